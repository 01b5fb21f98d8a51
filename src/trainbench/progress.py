"""Progress a person can follow: what a cell is doing, as plain lines, and a bar on a terminal.

Three kinds of output, all printed between units of work, never inside a timed region (a block of steps, an epoch,
a warm-up whose time is recorded): host work there would be part of the figure, and a figure must not depend on
where its output went. One exception, the same work wherever the output goes: within a long epoch, a line between
two steps at most every STEP_LINES_EVERY_S (EpochsBar.steps_with_lines).
- `phase`: a line as a phase that may take seconds begins (loading the framework, building the model, counting its
  FLOPs, the warm-up, the timed blocks, a memory probe, the batch_size=max probes).
- `Bar`: a count of epochs or blocks, moved as each ends: a tqdm bar on a terminal; elsewhere (a log file, CI, a
  pipe) plain lines, at most one every `lines_every_s` seconds.
- `line`: a result line.

Cells that run side by side (a parallel launcher: joblib, submitit, Ray) share one output: their launcher sets
LABEL_ENV for the cell's process, and every line then begins with the cell's name in brackets, and no bar is
drawn (two bars on one terminal overwrite each other).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, Self

from trainbench import untrusted

# The cell's name, set where cells share an output: each line is prefixed with it.
LABEL_ENV = "TRAINBENCH_CELL_LABEL"


def label() -> str:
    return os.environ.get(LABEL_ENV, "")


def interactive() -> bool:
    """A bar is drawn: the output is a terminal, and no other cell writes to it at the same time."""
    return sys.stdout.isatty() and not label()


# False in the ranks of a data-parallel cell other than rank 0: rank 0 prints the cell's lines and warnings, once.
_speaks_for_cell = True


def quiet() -> None:
    """This process is a rank other than rank 0: its warnings would repeat rank 0's (its stdout is /dev/null
    already; its stderr stays open for what it fails with)."""
    global _speaks_for_cell
    _speaks_for_cell = False


def warning(text: str) -> None:
    """A warning about the cell's figures, on stderr, from the process that speaks for the cell."""
    if _speaks_for_cell:
        sys.stderr.write(untrusted.for_terminal(text, keep_newlines=True) + "\n")  # one write, as line()
        sys.stderr.flush()


def line(text: str) -> None:
    tag = label()
    text = untrusted.for_terminal(text)
    # One write of the whole line: print() writes the text and its newline apart, and cells side by side share an
    # unbuffered pipe, so another cell's line could land between them (a pipe keeps a write under 4 KiB whole)
    sys.stdout.write((f"[{tag}] {text}" if tag else text) + "\n")
    sys.stdout.flush()


def phase(text: str) -> None:
    """A phase that may take a while begins: one plain line saying what it does (printed before it starts)."""
    line(f"  {text} ...")


class Bar:
    """A count over `total` units (epochs, blocks) of one phase, moved as each unit ends (`with Bar(...) as bar:`).

    On a terminal: a tqdm bar (with each unit's line above it where `lines_on_terminal`). Elsewhere: each unit's
    line, at most one every `lines_every_s` seconds (0: every unit), so a log gets periodic plain lines, not the
    carriage returns of a bar. It moves between units, never within one: updating it from the steps, even as a
    counter with tqdm's redraws at most every 0.1 s, would be host work inside the timed unit that the same cell
    without a terminal does not do.
    """

    def __init__(
        self, total: int, description: str, unit: str, lines_every_s: float = 0.0, lines_on_terminal: bool = True
    ) -> None:
        self.lines_every_s, self.lines_on_terminal = lines_every_s, lines_on_terminal
        self._last_line = time.monotonic()
        self._bar: Any = None
        if interactive():
            from tqdm import tqdm

            tqdm.monitor_interval = 0  # no monitor thread waking up inside the timed units
            # Redrawn at every update: updates come once a unit, outside the timing.
            self._bar = tqdm(total=total, desc=description, unit=unit, leave=False, file=sys.stdout, mininterval=0)

    def done(self, text: str) -> None:
        """After a unit (and whatever untimed work follows it): its line, then the bar one step on."""
        if self._bar is None:
            now = time.monotonic()
            if now - self._last_line >= self.lines_every_s:
                line(text)
                self._last_line = now
            return
        if self.lines_on_terminal:
            self._bar.write(text, file=sys.stdout)
        self._bar.update()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


class EpochsBar(Bar):
    """A bar over a cell's epochs: every epoch's line is shown (it is the epoch's result), with the bar below it.

    Within a long epoch (minutes on a CPU), `steps_with_lines` says how far it has got at most every
    STEP_LINES_EVERY_S: off a terminal nothing else would show for the whole epoch."""

    def __init__(self, epochs: int, description: str) -> None:
        super().__init__(epochs, description, "epoch")

    def epoch_done(self, text: str) -> None:
        self.done(text)

    def steps_with_lines(
        self, step: Callable[[int], None], steps: int, what: str, every_s: float = 0.0
    ) -> Callable[[int], None]:
        """`step` as a timed block runs it, with a line (`  epoch 2/3: 120 of 512 steps, 0:31`) between two
        steps once `every_s` (STEP_LINES_EVERY_S) has passed since the block began or the last such line.

        Host work between steps is part of the block: the clock is read only every CHECK_CLOCK_EVERY_S of
        steps (a step counter compared the rest of the time) and nothing waits for the device: a step on an
        accelerator returns when its work is queued, so the count is of steps queued. The same on a terminal
        as off one (the line goes above the bar), so that no figure depends on where the output went."""
        every_s = every_s or STEP_LINES_EVERY_S
        check_every_s = min(CHECK_CLOCK_EVERY_S, every_s / 4)
        started = time.monotonic()
        due = started + every_s
        check_at = 0  # the step index after which the clock is read next

        def stepped(index: int) -> None:
            nonlocal check_at, due
            step(index)
            if index < check_at:
                return
            now = time.monotonic()
            done = index + 1
            # the next read about check_every_s of steps on, at the pace so far
            check_at = index + max(1, int(check_every_s * done / max(now - started, 1e-9)))
            if now >= due:
                due = now + every_s
                self.note(f"  {what}: {done} of {steps} steps, {duration(now - started)}")

        return stepped

    def note(self, text: str) -> None:
        """A line within a unit: above the bar on a terminal, else on its own."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
        else:
            line(text)


def steps_with_lines(step: Callable[[int], None], what: str, every_s: float = 0.0) -> Callable[[int], None]:
    """`step` as a measurement runs it in blocks (warm-up, timed blocks, a percentile pass: each block's index
    starts again at 0), with a line (`  benchmark: 1,200 steps, 0:31`) between two steps once `every_s`
    (STEP_LINES_EVERY_S) has passed since the first step or the last such line: off a terminal, a long block
    otherwise shows nothing until it ends. The host work between steps is EpochsBar.steps_with_lines's: a
    counter compared, the clock read about every CHECK_CLOCK_EVERY_S of steps, nothing waiting for the device."""
    every_s = every_s or STEP_LINES_EVERY_S
    check_every_s = min(CHECK_CLOCK_EVERY_S, every_s / 4)
    started = time.monotonic()
    due = started + every_s
    done = 0  # steps run, over every block
    check_at = 1  # the count of steps after which the clock is read next

    def stepped(index: int) -> None:
        nonlocal check_at, done, due
        step(index)
        done += 1
        if done < check_at:
            return
        now = time.monotonic()
        check_at = done + max(1, int(check_every_s * done / max(now - started, 1e-9)))
        if now >= due:
            due = now + every_s
            line(f"  {what}: {done:,} steps, {duration(now - started)}")

    return stepped


# Within a long epoch, a line at most this often; the clock is read about this often between steps.
STEP_LINES_EVERY_S = 30.0
CHECK_CLOCK_EVERY_S = 1.0


def duration(seconds: float) -> str:
    """`42 s`, `3:05` (minutes), `1:02:05` (hours): as a person reads a clock."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
