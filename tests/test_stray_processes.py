"""Processes a sweep starts (issue 28): as many launcher workers as the sweep can use, none left behind however
the sweep ends, and a stop in the first instants of a process printing no traceback. Real sweeps through the
real entry point, real signals, the processes found with psutil by process group and command line."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import runs_in, start_multirun
from servers import group_processes, kill_group
from test_data import write_mnist
from trainbench.cell.in_cell import INJECT_FAULT_ENV
from trainbench.sweep.launchers import bound_parallelism

# Cells that cost next to nothing: the cell's process hangs (TRAINBENCH_INJECT_FAULT=sleep, set by `start`) before
# importing a framework.
HANGING_CELL = ["device=cpu", "tracking.system_metrics_interval_s=0", "sweep.heartbeat_s=1"]


@pytest.fixture
def start(tmp_path: Path):
    """start(ARGS): `python src/run.py -m ARGS` from tmp_path, in a process group of its own (its leader's pid is
    the group id), against a store of its own in tmp_path, every cell's process hanging unless `hanging=False`;
    returns the process and the store's URI."""

    def run(*args: str, hanging: bool = True, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        env = {INJECT_FAULT_ENV: "sleep"} if hanging else env or {}
        return start_multirun(uri, tmp_path, *args, env=env, new_session=True), uri

    return run


def with_command(pgid: int, text: str) -> list[psutil.Process]:
    """Live processes of group `pgid` whose command line holds `text`."""
    found = []
    for process in group_processes(pgid):
        try:
            if text in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def parent_of(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


def cell_run_exists(uri: str) -> bool:
    """Whether the sweep created a cell's run in the SQLite store at `uri` (read with sqlite3: polled often)."""
    import sqlite3

    path = uri.removeprefix("sqlite:///")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as store:
            found = store.execute("SELECT 1 FROM tags WHERE key = 'trainbench.kind' AND value = 'cell' LIMIT 1")
            return found.fetchone() is not None
    except sqlite3.Error:
        return False


def wait_until(condition, timeout: float, what: str, sweep: subprocess.Popen[str], poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if sweep.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}:\n{sweep.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            kill_group(sweep, signal.SIGKILL)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll_s)


def cells_hanging(pgid: int, uri: str, count: int) -> bool:
    """`count` cell runs exist and as many cell processes sit idle for a second, in their injected sleep. A worker
    started ahead of its cell (trainbench.sweep.cell_process.prestart) exists before the run it will be given: a
    stop then would leave that run for the next invocation to close as `lost`, not for this test's cells."""
    workers = with_command(pgid, "trainbench.cell.worker")
    cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    if len(workers) != count or len(cells) != count:
        return False
    try:
        before = [sum(w.cpu_times()[:2]) for w in workers]
        time.sleep(1.0)
        after = [sum(w.cpu_times()[:2]) for w in workers]
    except psutil.Error:
        return False
    return all(a - b < 0.05 for a, b in zip(after, before, strict=True))


# ------------------------------------------------------------------------------------------------ how many


def test_parallelism_is_bounded_by_the_cells_and_the_cores_a_cell_takes() -> None:
    assert bound_parallelism(50, cells=2, cores=64, cpus_per_cell=None) == (2, "2 cells")
    assert bound_parallelism(50, cells=20, cores=8, cpus_per_cell=None) == (8, "8 cores")
    assert bound_parallelism(50, cells=20, cores=16, cpus_per_cell=4) == (4, "16 cores, cell.cpus=4")
    assert bound_parallelism(4, cells=20, cores=16, cpus_per_cell=4) == (4, None)  # within the bound: as asked
    assert bound_parallelism(-1, cells=2, cores=64, cpus_per_cell=None) == (2, "2 cells")  # joblib's "all cores"
    assert bound_parallelism(-1, cells=20, cores=8, cpus_per_cell=None) == (8, None)
    assert bound_parallelism(2, cells=1, cores=1, cpus_per_cell=8) == (1, "1 cell")  # never below one
    assert bound_parallelism(None, cells=2, cores=2, cpus_per_cell=None) == (None, None)  # joblib's own default


@pytest.mark.slow
def test_a_joblib_sweep_asking_for_50_workers_for_2_cells_starts_2_and_says_so(start) -> None:
    sweep, uri = start(
        "hydra/launcher=joblib", "hydra.launcher.n_jobs=50", "seed=0,1", "cell.timeout_s=2", *HANGING_CELL
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while sweep.poll() is None:
            # The sweep's own children: a cell a worker forks holds the worker's command line until it execs.
            workers |= {p.pid for p in with_command(sweep.pid, "popen_loky_posix") if parent_of(p) == sweep.pid}
            assert len(workers) <= 2, f"{len(workers)} joblib workers for 2 cells"
            assert time.monotonic() < deadline, "the sweep did not end in 120 s"
            time.sleep(0.1)
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    _, err = sweep.communicate()
    assert "trainbench: hydra.launcher.n_jobs=50 cut to 2 (2 cells)" in err.splitlines()
    assert len(workers) == 2  # both cells ran side by side
    cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert len(cells) == 2 and all("timed out" in c.data.tags["trainbench.reason"] for c in cells)


# ------------------------------------------------------------------------------------------------ none left behind


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "to_group"), [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGINT, True)]
)
def test_a_joblib_sweep_stopped_mid_cell_leaves_no_process_behind(start, stop, to_group) -> None:
    """SIGKILL and SIGTERM to the sweep's process alone: what it started must follow on its own. SIGINT to the
    whole process group, as Ctrl-C on a terminal sends it."""
    sweep, uri = start("hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", *HANGING_CELL)
    pgid = sweep.pid
    try:
        wait_until(lambda: cells_hanging(pgid, uri, 2), 120, "both cells in their injected sleep", sweep)
        os.killpg(pgid, stop) if to_group else sweep.send_signal(stop)
        _, err = sweep.communicate(timeout=60)
        left_after = time.monotonic() + 15
        while group_processes(pgid) and time.monotonic() < left_after:
            time.sleep(0.2)
        left = [" ".join(p.cmdline()[:4]) for p in group_processes(pgid)]
        assert left == [], f"left behind after {signal.Signals(stop).name}: {left}"
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert sweep.returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 128 + stop)
    assert "Traceback" not in err, err[-3000:]
    cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert len(cells) == 2
    # SIGKILL: each cell's process saw its launcher die and handed its run to a closing process
    # (trainbench.cell.orphan), which closes it within seconds (importing MLflow takes 6 s of a core, more on a
    # loaded machine); otherwise the sweep closed them.
    closing_by = time.monotonic() + 60
    while any(c.info.status == "RUNNING" for c in cells) and time.monotonic() < closing_by:
        time.sleep(0.5)
        cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert {c.data.tags["trainbench.outcome"] for c in cells} == {"killed"}
    assert {c.info.status for c in cells} == {"KILLED"}


@pytest.mark.slow
def test_a_cell_stuck_in_c_code_ends_soon_after_its_sweep_is_killed(start) -> None:
    """The cell's main thread cannot run a stop's handler while it is inside C code (a compile, a kernel on the
    CPU, a loader's queue): the cell's guard thread must end the process and hand its run over to be closed."""
    sweep, uri = start("seed=0", *HANGING_CELL, hanging=False, env={INJECT_FAULT_ENV: "stuck"})
    pgid = sweep.pid
    try:
        # The cell's process may start before its run exists, loading its framework meanwhile (prestarted)
        wait_until(lambda: cell_run_exists(uri), 120, "the cell's run", sweep)
        wait_until(lambda: len(with_command(pgid, "trainbench.cell.worker")) == 1, 120, "the cell", sweep)
        cell = with_command(pgid, "trainbench.cell.worker")[0]
        time.sleep(3)  # past the cell's start: its main thread sleeps with the stop signals blocked
        sweep.kill()
        sweep.communicate(timeout=60)
        try:
            cell.wait(timeout=15)
        except psutil.TimeoutExpired:
            raise AssertionError("the stuck cell outlived its sweep by 15 s") from None
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    closing_by = time.monotonic() + 60
    while time.monotonic() < closing_by:
        (run,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
        if run.info.status != "RUNNING":
            break
        time.sleep(0.5)
    assert (run.info.status, run.data.tags["trainbench.outcome"]) == ("KILLED", "killed")
    assert "died" in run.data.tags["trainbench.reason"]


# ------------------------------------------------------------------------------------------------ early stops


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "delay_s"), [(signal.SIGINT, 0.1), (signal.SIGTERM, 0.25), (signal.SIGINT, 0.5)])
def test_a_stop_in_the_first_instants_of_a_cell_prints_no_traceback_and_is_recorded(start, stop, delay_s) -> None:
    """Ctrl-C reaches every process of the terminal's process group at once, a service manager's SIGTERM too:
    sent to the group while the cell's process is still importing."""
    sweep, uri = start(*HANGING_CELL)
    pgid = sweep.pid
    try:
        # its run first: the cell's process may start earlier, loading its framework (prestarted), but computes
        # only once its run exists
        wait_until(lambda: cell_run_exists(uri), 120, "the cell's run", sweep, 0.02)
        wait_until(lambda: with_command(pgid, "trainbench.cell.worker"), 120, "the cell's process", sweep, 0.02)
        time.sleep(delay_s)
        os.killpg(pgid, stop)
        out, err = sweep.communicate(timeout=60)
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert "Traceback" not in err, err[-3000:]
    assert sweep.returncode == 128 + stop, err[-3000:]
    (cell,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert cell.data.tags["trainbench.outcome"] == "killed" and cell.info.status == "KILLED"
    assert "killed" in out


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_first_cell_loads_its_framework_before_its_run_exists_leaves_nothing(start, stop) -> None:
    """The first cell's process starts while the sweep still opens the store: a stop then ends the sweep quietly,
    and that process with it, with no run left open."""
    sweep, uri = start(*HANGING_CELL)
    pgid = sweep.pid
    try:
        wait_until(lambda: with_command(pgid, "--preload"), 120, "the prestarted cell's process", sweep, 0.02)
        os.killpg(pgid, stop)
        _, err = sweep.communicate(timeout=60)
        left_by = time.monotonic() + 15
        while group_processes(pgid) and time.monotonic() < left_by:
            time.sleep(0.2)
        assert not group_processes(pgid), "a process of the sweep outlived it by 15 s"
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert "Traceback" not in err, err[-3000:]
    assert sweep.returncode == 128 + stop, err[-3000:]
    assert all(r.info.status != "RUNNING" for r in runs_in(uri))


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_sweep_imports_exits_quietly(start, stop) -> None:
    sweep, uri = start(*HANGING_CELL)
    time.sleep(0.3)  # Python is importing Hydra and trainbench
    os.killpg(sweep.pid, stop)
    try:
        _, err = sweep.communicate(timeout=60)
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert "Traceback" not in err, err[-3000:]
    assert sweep.returncode == 128 + stop
    assert runs_in(uri) == []


LOADER_CELL = [
    "framework=pytorch",
    "device=cpu",
    "model=mlp",
    "model.hidden_sizes=[16]",
    "data=mnist",
    "data.root=data",
    "data.download=false",
    "data.pipeline=loader",
    "data.loader_workers=2",
    "data.num_val_samples=8",
    "batch_size=4",
    "task.epochs=1000",
    "tracking.system_metrics_interval_s=0",
]


@pytest.mark.slow
def test_a_stop_while_loader_workers_feed_a_cell_prints_no_traceback(start, tmp_path: Path) -> None:
    """A stop sent to the process group (a service manager's SIGTERM; Ctrl-C likewise) reaches the DataLoader's
    worker processes too: neither they nor the cell's process may print a traceback for it."""
    stop = signal.SIGTERM
    write_mnist(tmp_path / "data", train=64, test=8)
    sweep, uri = start(*LOADER_CELL, hanging=False)
    pgid = sweep.pid

    def workers_feeding() -> bool:  # loader workers are forked, so they carry the cell's command line
        return len(with_command(pgid, "trainbench.cell.worker")) >= 3

    try:
        wait_until(workers_feeding, 120, "the loader's workers", sweep)
        time.sleep(1.5)  # steps under way, batches passing from the workers
        os.killpg(pgid, stop)
        out, err = sweep.communicate(timeout=60)
    finally:
        kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert "Traceback" not in err + out and "ConnectionResetError" not in err + out, err[-3000:]
    assert "UserWarning" not in err, err[-3000:]  # a loader over files read without a copy warns of nothing
    assert sweep.returncode == 128 + stop, err[-3000:]
    (cell,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert cell.data.tags["trainbench.outcome"] == "killed"
