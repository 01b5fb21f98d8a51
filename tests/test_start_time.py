"""The tool's own start (issue 41): the first cell's process starts before the store opens and loads its framework
while the sweep imports MLflow and creates the run; it computes only once its run exists, and its figures land in
that run. Real sweeps through the real entry point, read back from their stores and their timelines
(TRAINBENCH_TIMELINE: every process stamps `time pid cpu phase`)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from conftest import TINY, invoke

CELL = [
    *(o for o in TINY if not o.startswith("task.epochs=")),
    "task.epochs=1",
    "device=cpu",
    "model.hidden_sizes=[16]",
]


def timeline(path: Path) -> list[tuple[float, int, str]]:
    rows = []
    for line in path.read_text().splitlines():
        stamp, pid, _, phase = line.split(" ", 3)
        rows.append((float(stamp), int(pid), phase))
    return rows


def stamp(rows: list[tuple[float, int, str]], phase: str) -> tuple[float, int]:
    found = [(at, pid) for at, pid, name in rows if name.startswith(phase)]
    assert found, f"no `{phase}` in the timeline: {[name for _, _, name in rows]}"
    return found[0]


@pytest.mark.slow
def test_the_first_cell_loads_its_framework_before_its_run_exists_and_computes_after(tmp_path: Path) -> None:
    marks = tmp_path / "timeline.txt"
    done = invoke(tmp_path, *CELL, env={"TRAINBENCH_TIMELINE": str(marks)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].startswith("[cell 1/1] pytorch-mlp-cpu-bs64: ")
    rows = timeline(marks)
    prestarted, _ = stamp(rows, "parent: cell's process prestarted")
    store_open, _ = stamp(rows, "parent: store open")
    run_created, _ = stamp(rows, "job: run created")
    _, loaded_in = stamp(rows, "cell: framework preloaded")
    computing, cell_pid = stamp(rows, "cell: config read")
    _, finished_in = stamp(rows, "cell: result written (finished)")
    assert prestarted < store_open  # started before MLflow loads
    assert loaded_in == cell_pid == finished_in  # the process that loaded the framework ran the cell
    assert run_created < computing  # and began on it only once its run existed
    (run,) = [r for r in done.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    assert run.info.status == "FINISHED" and run.data.metrics["samples_per_s"] > 0


@pytest.mark.slow
def test_a_prestarted_process_that_does_not_fit_its_cell_is_ended_and_the_cell_runs_in_a_process_of_its_own(
    tmp_path: Path,
) -> None:
    """A job whose environment is not the one the early process got (hydra.job.env_set) must not run in it."""
    marks = tmp_path / "timeline.txt"
    done = invoke(
        tmp_path, *CELL, "++hydra.job.env_set.TRAINBENCH_TEST_SETTING=1", env={"TRAINBENCH_TIMELINE": str(marks)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = timeline(marks)
    _, prestarted_pid = stamp(rows, "cell: python started, trainbench imported (prestarted)")
    stamp(rows, "job: the prestarted process does not fit this cell: discarded")
    _, cell_pid = stamp(rows, "cell: result written (finished)")
    assert cell_pid != prestarted_pid
    assert not psutil.pid_exists(prestarted_pid) or psutil.Process(prestarted_pid).status() == psutil.STATUS_ZOMBIE
    (run,) = [r for r in done.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    assert run.info.status == "FINISHED"
