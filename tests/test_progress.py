"""Progress a person can follow, in milliseconds (no framework, no store): a sweep's estimate of what is left,
plain lines instead of a bar off a terminal, and the cell's name on every line where cells share an output.
End-to-end through real sweeps: tests/test_sweep.py (phases, elapsed and estimate, joblib labels) and
tests/test_mps.py (no line inside a timed block)."""

from __future__ import annotations

import os
import pty
import re
import sys

import pytest

from trainbench import progress
from trainbench.runner.sweep_clock import ABSENT, estimate

CPU, GPU = "train/resnet50/cpu", "train/resnet50/gpu"


def test_before_any_cell_ends_the_sweep_says_an_estimate_comes_after_the_first() -> None:
    assert estimate(5.2, 3, 0, [], [CPU] * 3, 0) == (
        "sweep: 5 s elapsed, 0 of 3 cells done; estimate after the first cell"
    )
    # cells skipped by sweep.resume are done, but say nothing of how long a cell takes
    assert estimate(3, 4, 2, [], [CPU, CPU], 0).endswith("2 of 4 cells done; estimate after the first cell")


def test_the_estimate_shares_the_cells_left_among_those_running_side_by_side() -> None:
    one_at_a_time = estimate(70, 5, 1, [(CPU, 50.0), (CPU, 70.0)], [CPU] * 4, 0)
    assert one_at_a_time == "sweep: 1:10 elapsed, 1 of 5 cells done; about 4:00 left"
    two_at_a_time = estimate(70, 5, 1, [(CPU, 60.0)], [CPU] * 4, 1)
    assert two_at_a_time == "sweep: 1:10 elapsed, 1 of 5 cells done; about 2:00 left (2 at a time)"
    assert estimate(4000, 2, 1, [(CPU, 3700.0)], [CPU], 0).endswith("about 1:01:40 left")


def test_the_estimate_of_each_cell_left_comes_from_cells_of_its_kind() -> None:
    # the headline on a machine without a GPU: a slow CPU cell says nothing of a GPU cell recorded at once
    assert estimate(1440, 2, 1, [(CPU, 1438.0)], [ABSENT], 0).endswith("1 of 2 cells done; about 0 s left")
    # ...nor of a GPU cell that will run: that one waits for a GPU cell to end
    assert estimate(1440, 2, 1, [(CPU, 1438.0)], [GPU], 0).endswith(
        "1 of 2 cells done; estimate after the first cell like train/resnet50/gpu (task/model/device)"
    )
    mixed = estimate(1500, 4, 2, [(CPU, 1400.0), (GPU, 20.0)], [GPU, CPU, "train/mlp/cpu"], 0)
    assert mixed.endswith(
        "about 23:40 left, and 1 cell estimated after the first like train/mlp/cpu (task/model/device)"
    )


def test_off_a_terminal_a_bar_is_plain_lines_at_most_every_n_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.Bar(3, "timed blocks", "block", lines_every_s=0) as bar:
        bar.done("  block 1/3: 12.00 s")
        bar.done("  block 2/3: 12.10 s")
    with progress.Bar(3, "timed blocks", "block", lines_every_s=3600) as bar:
        bar.done("  block 1/3: 0.01 s")  # short blocks: a line at most once an hour here
    assert capsys.readouterr().out == "  block 1/3: 12.00 s\n  block 2/3: 12.10 s\n"


def test_where_cells_share_an_output_every_line_carries_the_cells_name_and_no_bar_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    main, terminal_fd = pty.openpty()
    with os.fdopen(terminal_fd, "w") as terminal:
        monkeypatch.setattr(sys, "stdout", terminal)
        assert progress.interactive()  # a terminal of its own: a bar
        monkeypatch.setenv(progress.LABEL_ENV, "pytorch-mlp-cpu-bs8")
        assert not progress.interactive()  # shared with another cell: lines only
        progress.phase("building the model (mlp)")
        progress.line("epoch 1/2: 0.40 s")
    written = _everything_written(main)
    assert written.splitlines() == [
        "[pytorch-mlp-cpu-bs8]   building the model (mlp) ...",
        "[pytorch-mlp-cpu-bs8] epoch 1/2: 0.40 s",
    ]


def _everything_written(main: int) -> str:
    """A pty hands its lines back one read at a time; the writer's side is closed, so read to its end."""
    chunks = []
    try:
        while chunk := os.read(main, 4096):
            chunks.append(chunk)
    except OSError:  # Linux answers EIO once the other side is closed and drained
        pass
    os.close(main)
    return b"".join(chunks).decode()


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.4, "0 s"), (42.4, "42 s"), (59.6, "1:00"), (185, "3:05"), (3725, "1:02:05")]
)
def test_durations_read_as_a_clock(seconds: float, shown: str) -> None:
    assert progress.duration(seconds) == shown


def test_off_a_terminal_a_long_epoch_says_how_far_it_got_between_steps_at_most_every_n_seconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import time

    from trainbench.timing import time_block

    ran: list[int] = []
    printed_at: list[int] = []  # how many steps had run when each line came: always a whole number of steps

    def step(index: int) -> None:
        time.sleep(0.02)
        ran.append(index)

    with progress.EpochsBar(2, "train") as bar:
        stepped = bar.steps_with_lines(step, 40, "epoch 1/2", every_s=0.2)
        original_line = progress.line

        def noted(text: str) -> None:
            printed_at.append(len(ran))
            original_line(text)

        progress.line = noted  # type: ignore[assignment]
        try:
            block = time_block(stepped, 40, lambda: None)
        finally:
            progress.line = original_line  # type: ignore[assignment]
    lines = capsys.readouterr().out.splitlines()
    assert ran == list(range(40)) and block.steps == 40
    # 0.8 s of steps: a line about every 0.2 s, never more often
    assert 2 <= len(lines) <= 4, lines
    assert all(re.fullmatch(r"  epoch 1/2: \d+ of 40 steps, \d s", line) for line in lines), lines
    counts = [int(line.split(": ")[1].split()[0]) for line in lines]
    assert counts == printed_at and all(b - a >= 0.2 / 0.02 - 1 for a, b in zip(counts, counts[1:], strict=False))


def test_off_a_terminal_a_benchmarks_blocks_say_how_far_they_got_between_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """task=benchmark and task=inference run a step through a warm-up and blocks, each counting its steps from
    0 again: the lines count every step run so far, and come within the blocks, not only when they end."""
    import time

    from trainbench.timing import Plan, measure

    def step(index: int) -> None:
        time.sleep(0.01)

    stepped = progress.steps_with_lines(step, "benchmark", every_s=0.2)
    measure(stepped, lambda: None, Plan(warmup_steps=10, steps=40, repeats=2))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  benchmark:")]
    # 90 steps of 10 ms (and the blocks' bookkeeping): about 0.9 s, a line about every 0.2 s
    assert 2 <= len(lines) <= 6, lines
    assert all(re.fullmatch(r"  benchmark: \d+ steps, \d s", line) for line in lines), lines
    counts = [int(line.split(": ")[1].split()[0]) for line in lines]
    assert counts == sorted(counts) and counts[-1] > 50  # past the first block: the count goes on across blocks
