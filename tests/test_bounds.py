"""Bounds the docs state, held with real processes and signals (issue 39): a cell ends within a second of its
launcher's SIGKILL and leaves no scratch folder; Ctrl-C in a cell's first instant prints no traceback; data-parallel
ranks on a CPU are cut to its cores and memory with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, TINY, child_env

sys.path.insert(0, str(ROOT / "benchmarks"))
import owner_kill  # noqa: E402

from trainbench.runner.launchers import bound_cpu_ranks  # noqa: E402
from trainbench.runner.orphan import remove_abandoned_scratch, scratch_prefix  # noqa: E402

DIGITS = ["model=mlp", "data=digits", "device=cpu", "tracking.system_metrics_interval_s=0"]


@pytest.mark.slow
def test_a_cell_ends_within_a_second_of_its_sweeps_sigkill_and_closes_its_run(tmp_path: Path) -> None:
    measured = owner_kill.once("basic", tmp_path)
    assert measured["cell_end_s"] is not None and measured["cell_end_s"] <= 1.0, measured
    assert measured["status"] == ["KILLED"] and measured["closed_s"] is not None, measured
    assert measured["left"] == [], measured  # its scratch folder went with it


def test_scratch_folders_of_dead_launchers_are_swept_up_and_live_ones_kept(tmp_path: Path) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = tmp_path / f"{scratch_prefix(ended.pid)}abc"
    alive = tmp_path / f"{scratch_prefix(os.getpid())}def"
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "spec.json").write_text("{}")
    assert remove_abandoned_scratch(str(tmp_path)) == [dead]
    assert alive.is_dir() and not dead.exists()


@pytest.mark.slow
def test_ctrl_c_in_a_cells_first_instant_prints_no_traceback(tmp_path: Path) -> None:
    for attempt in range(3):
        sweep = subprocess.Popen(
            [sys.executable, str(ROOT / "src" / "run.py"), *DIGITS, *TINY, f"tracking.uri=sqlite:///{tmp_path}/m.db"],
            cwd=tmp_path,
            env=child_env({"PYTHONPATH": str(ROOT / "src")}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own: Ctrl-C on a terminal reaches the whole group
        )
        parent = psutil.Process(sweep.pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sweep.poll() is None:
            children = parent.children()
            if children:  # the cell's process, in the first milliseconds of its Python
                time.sleep(0.01 * attempt)
                os.killpg(sweep.pid, signal.SIGINT)
                break
            time.sleep(0.002)
        _, err = sweep.communicate(timeout=120)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert sweep.returncode == 130, err


def test_data_parallel_ranks_on_a_cpu_are_bounded_by_its_cores_then_its_memory() -> None:
    assert bound_cpu_ranks(64, cores=2, available_mb=24_000, per_rank_mb=1536) == (2, "2 cores")
    assert bound_cpu_ranks(64, cores=32, available_mb=6_000, per_rank_mb=1536) == (
        3,
        "6,000 MB of memory available, about 1,536 MB a rank",
    )
    assert bound_cpu_ranks(2, cores=2, available_mb=24_000, per_rank_mb=1536) == (2, None)


@pytest.mark.slow
def test_more_ranks_than_cores_run_as_many_as_cores_with_one_line(trainbench) -> None:
    cores = len(os.sched_getaffinity(0))
    asked = cores + 4  # bounded: a few processes more than the machine has cores, never dozens
    result = trainbench(*DIGITS, "task.epochs=1", "data.num_samples=256", f"device.count={asked}", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    cut = [line for line in result.stderr.splitlines() if "cut to" in line]
    assert cut == [f"trainbench: device.count={asked} cut to {cores} data-parallel ranks on the CPU ({cores} cores)"]
    (cell,) = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    assert cell.data.metrics["num_devices"] == cores
