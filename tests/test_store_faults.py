"""Nothing lost and nothing left RUNNING when the store, the disk or a cell's process turns hostile (issue 28):
a store that stops accepting writes (read-only, full, removed), a cell that stops making progress, and resume
after all that. Real sweeps through the real entry point, real SQLite stores on real tmpfs mounts (where this
machine lets a test mount one: root with CAP_SYS_ADMIN; elsewhere those tests are skipped, saying so), real
signals. Nothing of MLflow is mocked."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from conftest import RUN_PY, child_env, runs_in, start_multirun
from trainbench.config.schema import CellLimits
from trainbench.runner import cell as runner

pytestmark = pytest.mark.slow

# Small, quick cells; three of them, so that a failure in the first shows what happens to the rest.
CELLS = [
    "seed=0,1,2",
    "device=cpu",
    "model.hidden_sizes=[32]",
    "data.image_size=8",
    "data.num_samples=256",
    "data.num_val_samples=16",
    "tracking.system_metrics_interval_s=0",
]
BOUND_S = 120  # no test of a fault may take longer than this to end its sweep


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs at `path` (root with CAP_SYS_ADMIN), unmounted afterwards; skips the test elsewhere."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def sweep(folder: Path, uri: str, *args: str, timeout: float = BOUND_S) -> tuple[int, str, str, float]:
    """`python src/run.py -m ARGS` against `uri`: (exit status, stdout, stderr, seconds it took)."""
    started = time.monotonic()
    running = start_multirun(uri, folder, *args)
    out, err = running.communicate(timeout=timeout)
    return running.returncode, out, err, time.monotonic() - started


def tagged(database: Path, key: str, value: str) -> int:
    """Runs with tag key=value in a SQLite store, read directly and read-only: a test's MlflowClient polling a
    store a sweep is creating would race it to create the schema."""
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as connection:
        try:
            query = "select count(*) from tags where key = ? and value = ?"
            return int(connection.execute(query, (key, value)).fetchone()[0])
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def fault_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "stopped accepting writes" in line]


def test_a_read_only_artifact_folder_ends_the_sweep_at_once_with_every_run_closed(tmp_path) -> None:
    """Its database still takes writes: every run the sweep created is closed, saying why."""
    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    with tmpfs(store / "mlruns", "16m") as artifacts:
        subprocess.run(["mount", "-o", "remount,ro", str(artifacts)], check=True)
        code, out, err, took = sweep(tmp_path / "sweep", uri, *CELLS)
    assert code == 1 and took < BOUND_S, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (line,) = fault_lines(err)
    assert "it is read-only" in line and line.startswith("trainbench: the tracking store ")
    runs = runs_in(uri)
    assert runs and not [r for r in runs if r.info.status == "RUNNING"]
    (cell,) = [r for r in runs if r.data.tags.get("trainbench.kind") == "cell"]  # the others never started
    assert cell.data.tags["trainbench.outcome"] == "failed" and "read-only" in cell.data.tags["trainbench.reason"]
    (parent,) = [r for r in runs if r.data.tags.get("trainbench.kind") == "sweep"]
    assert parent.data.tags["trainbench.outcome"] == "failed" and "read-only" in parent.data.tags["trainbench.reason"]
    assert out.count("not started") == 2


def test_a_full_disk_ends_the_sweep_with_one_line_and_the_next_invocation_closes_what_it_left(tmp_path) -> None:
    with tmpfs(tmp_path / "store", "4m") as store:
        uri = f"sqlite:///{store / 'mlflow.db'}"
        first = sweep(tmp_path / "first", uri, "seed=0", *CELLS[1:])  # the store's schema, and a finished cell
        assert first[0] == 0, first[2][-3000:]
        filler = store / "filler"
        free = shutil.disk_usage(store).free
        filler.write_bytes(b"\0" * max(0, free - 96 * 1024))  # about 96 KiB left: a few runs' worth
        code, out, err, took = sweep(tmp_path / "sweep", uri, *CELLS, "task.epochs=3")
        assert code == 1 and took < BOUND_S, err[-3000:]
        assert "Traceback" not in err and "autoflush" not in err, err[-3000:]
        (line,) = fault_lines(err)
        assert "the disk is full" in line
        filler.unlink()  # room again: the next invocation closes what the full disk kept open
        after = sweep(tmp_path / "after", uri, "seed=9", *CELLS[1:])
        assert after[0] == 0, after[2][-3000:]
        assert not [r for r in runs_in(uri) if r.info.status == "RUNNING"]


def test_a_store_removed_mid_sweep_ends_it_with_one_line(tmp_path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    running = start_multirun(uri, tmp_path / "sweep", *CELLS, "task.epochs=4")
    deadline = time.monotonic() + BOUND_S
    while not tagged(store / "mlflow.db", "trainbench.outcome", "finished"):
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
        time.sleep(0.3)
    shutil.rmtree(store)  # the folder and its database, while the sweep writes to them
    out, err = running.communicate(timeout=BOUND_S)
    assert running.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (line,) = fault_lines(err)
    assert "its files were removed" in line


def test_a_cell_that_stops_making_progress_is_recorded_hung_and_the_sweep_goes_on(tmp_path) -> None:
    """kill -STOP: its run's heartbeat (another thread, another process) stays fresh; the watch does not care."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [*CELLS[1:], "data.num_samples=2048", "task.epochs=40", "cell.hung_after_s=6"]
    running = start_multirun(uri, tmp_path, "seed=0,1", *args)
    deadline = time.monotonic() + BOUND_S
    worker = None
    while worker is None:
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
        worker = next(
            (
                p
                for p in psutil.Process(running.pid).children(recursive=True)
                if "runner.worker" in " ".join(p.cmdline())
            ),
            None,
        )
        time.sleep(0.2)
    time.sleep(3)  # into its epochs
    os.kill(worker.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    out, err = running.communicate(timeout=BOUND_S * 3)
    assert running.returncode == 1, err[-3000:]
    cells = {
        r.data.tags["trainbench.cell_index"]: r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"
    }
    hung = cells["1"].data.tags
    assert hung["trainbench.outcome"] == "hung" and "cell.hung_after_s" in hung["trainbench.reason"]
    assert cells["2"].data.tags["trainbench.outcome"] in ("finished", "hung")  # the sweep went on
    assert not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE
    assert "Traceback" not in err
    assert time.monotonic() - stopped_at < BOUND_S * 3


def test_resume_failed_runs_the_cells_a_stopped_sweep_never_started_and_those_that_died_early(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [*CELLS, "task.epochs=6", "data.num_samples=1024"]
    running = start_multirun(uri, tmp_path / "first", *args)
    deadline = time.monotonic() + BOUND_S
    while not tagged(tmp_path / "mlflow.db", "trainbench.cell_index", "2"):
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
        time.sleep(0.2)
    # Cell 2's process dies before it binds a device (the OOM killer at import time, say): no backend recorded.
    worker = None
    while worker is None and time.monotonic() < deadline:
        worker = next(
            (
                p
                for p in psutil.Process(running.pid).children(recursive=True)
                if "runner.worker" in " ".join(p.cmdline())
            ),
            None,
        )
    assert worker is not None
    worker.kill()
    running.send_signal(signal.SIGINT)  # and the sweep is stopped before cell 3
    running.communicate(timeout=BOUND_S)
    first = {
        r.data.tags["trainbench.cell_index"]: r.data.tags
        for r in runs_in(uri)
        if "trainbench.cell_index" in r.data.tags
    }
    assert first["1"]["trainbench.outcome"] == "finished" and "3" not in first
    assert first["2"]["trainbench.outcome"] in ("failed", "killed") and "trainbench.backend" not in first["2"]

    resumed = subprocess.run(
        [sys.executable, str(RUN_PY), "-m", *args, "sweep.resume=failed"],
        cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=BOUND_S * 2,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    newest = max(
        (r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "sweep"), key=lambda r: r.info.start_time
    )
    children = {
        r.data.tags["trainbench.cell_index"]: r.data.tags["trainbench.outcome"]
        for r in runs_in(uri)
        if r.data.tags.get("mlflow.parentRunId") == newest.info.run_id
    }
    assert children == {"1": "skipped", "2": "finished", "3": "finished"}


def test_a_sigkill_while_the_kernel_killed_processes_for_memory_is_recorded_oom(tmp_path) -> None:
    """The kernel's out-of-memory killer sends SIGKILL; /proc/vmstat's oom_kill counts it (Linux 4.13+)."""
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 1000\noom_kill 7\nnuma_hit 3\n")
    assert runner.oom_kill_count(vmstat) == 7 and runner.oom_kill_count(tmp_path / "absent") is None
    limits = CellLimits()
    killed = runner.read_result(tmp_path / "result.json", -signal.SIGKILL, limits, oom_kills=1)
    assert (killed["outcome"], killed["failure"]) == ("failed", "oom") and "out-of-memory killer" in killed["reason"]
    plain = runner.read_result(tmp_path / "result.json", -signal.SIGKILL, limits, oom_kills=0)
    assert "failure" not in plain and "SIGKILL" in plain["reason"]
