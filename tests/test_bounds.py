"""Bounds the docs state, held with real processes and signals (issue 39): a cell ends within a second of its
launcher's SIGKILL and leaves no scratch folder; a sweep SIGKILLed whole leaves nothing in /dev/shm; Ctrl-C in a cell's first instant prints no traceback; data-parallel
ranks on a CPU are cut to its cores and memory with one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, TINY, child_env, command_of

sys.path.insert(0, str(ROOT / "benchmarks"))
import owner_kill  # noqa: E402

from trainbench.cell.cpu_ranks import bound_cpu_ranks  # noqa: E402
from trainbench.cell.orphan import (  # noqa: E402
    remove_abandoned_scratch,
    remove_abandoned_shared_memory,
    scratch_prefix,
)

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


def children_of(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children()
    except psutil.Error:
        return []


def shared_memory_of(pids: set[int]) -> list[str]:
    """The entries of /dev/shm whose names carry one of `pids` (loky's semaphores and memmapping folders, torch's
    segments and Python's named semaphores are named for the process that made them)."""
    found = []
    for path in Path("/dev/shm").iterdir():
        numbers = {int(n) for n in re.findall(r"(?<![0-9a-z])\d+(?![0-9])", path.name)}
        if numbers & pids:
            found.append(path.name)
    return sorted(found)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this system")
def test_no_shared_memory_file_outlives_a_sweep_sigkilled_with_its_cells_and_their_loader_workers(
    tmp_path: Path,
) -> None:
    """A joblib sweep whose cells feed their model through DataLoader worker processes, SIGKILLed as a whole (the
    OOM killer taking a container's processes, `kill -9 -- -PGID`): nothing of it may stay in /dev/shm once the next
    cell has been launched on the machine."""
    uri = f"sqlite:///{tmp_path}/m.db"
    # Two cells: joblib runs a single job in its own process, without loky's workers and their semaphores.
    sweep = subprocess.Popen(
        [sys.executable, str(ROOT / "src" / "run.py"), "-m", *DIGITS, "task.epochs=100000", "cell.timeout_s=300",
         "data.pipeline=loader", "data.loader_workers=2", "batch_size=16,32", "hydra/launcher=joblib",
         f"tracking.uri={uri}"],
        cwd=tmp_path, env=child_env({"PYTHONPATH": str(ROOT / "src")}),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    pids: set[int] = set()
    try:
        owner = psutil.Process(sweep.pid)
        deadline = time.monotonic() + 180
        while True:  # until a cell's loader workers are up: every kind of file is made by then
            tree = owner.children(recursive=True)
            cells = [p for p in tree if "trainbench.cell.worker" in command_of(p)]
            pids = {sweep.pid} | {p.pid for p in tree}
            if any(children_of(cell) for cell in cells) and shared_memory_of(pids):  # a loaded machine lags
                break
            assert sweep.poll() is None and time.monotonic() < deadline, "no cell started its loader workers"
            time.sleep(0.2)
        pids = {sweep.pid} | {p.pid for p in owner.children(recursive=True)}
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)
        # Looked at as the kill lands: once its makers are gone, any cell launched on this machine (another test's,
        # in a parallel run) sweeps a file up, so a later look can find nothing left and prove nothing
        left = shared_memory_of(pids)
        sweep.wait(timeout=30)
    assert left, "the kill left nothing in /dev/shm: this test no longer tests what it is named for"
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)

    next_cell = subprocess.run(
        [sys.executable, str(ROOT / "src" / "run.py"), *DIGITS, *TINY, f"tracking.uri={uri}"],
        cwd=tmp_path, env=child_env({"PYTHONPATH": str(ROOT / "src")}), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert next_cell.returncode == 0, next_cell.stderr[-3000:]
    assert shared_memory_of(pids) == [], f"left by the killed sweep: {left}"


def test_shared_memory_of_dead_processes_is_swept_up_and_that_of_live_ones_and_other_programs_kept(
    tmp_path: Path,
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = [tmp_path / f"sem.loky-{ended.pid}-ab12cd", tmp_path / f"joblib_memmapping_folder_{ended.pid}_ab_cd"]
    kept = [tmp_path / f"sem.loky-{os.getpid()}-ab12cd", tmp_path / f"torch_{ended.pid}_123", tmp_path / "psm_x"]
    dead[0].write_bytes(b"\0" * 32)
    dead[1].mkdir()
    (dead[1] / "array.pkl").write_bytes(b"x")
    for path in kept:
        path.write_bytes(b"\0")
    assert sorted(remove_abandoned_shared_memory(str(tmp_path))) == sorted(dead)
    assert all(path.exists() for path in kept) and not any(path.exists() for path in dead)
