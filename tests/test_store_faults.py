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

from conftest import RUN_PY, child_env, command_of, runs_in, start_multirun, with_schema
from trainbench.config.schema import CellLimits
from trainbench.sweep import cell_process as runner
from trainbench.sweep.oom_evidence import OomEvidence

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
    from mlflow.tracking import MlflowClient

    from trainbench.store import tracking
    from trainbench.sweep import liveness

    with tmpfs(tmp_path / "store", "4m") as store:
        uri = f"sqlite:///{store / 'mlflow.db'}"
        tracking.experiment_id(MlflowClient(uri), "trainbench", uri)  # the store's schema and experiment
        filler = store / "filler"
        free = shutil.disk_usage(store).free
        filler.write_bytes(b"\0" * max(0, free - 96 * 1024))  # about 96 KiB left: a few runs' worth
        code, out, err, took = sweep(tmp_path / "sweep", uri, *CELLS, "task.epochs=3")
        assert code == 1 and took < BOUND_S, err[-3000:]
        assert "Traceback" not in err and "autoflush" not in err, err[-3000:]
        (line,) = fault_lines(err)
        assert "the disk is full" in line
        filler.unlink()  # room again: the next invocation's first step closes what the full disk kept open
        client = MlflowClient(uri)
        left_open = [r.info.run_id for r in runs_in(uri) if r.info.status == "RUNNING"]
        assert sorted(liveness.close_lost_runs(client, lost_after_s=300)) == sorted(left_open)
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
    # The folder and its database go while the sweep writes to them. Moved aside first: rmtree alone races the
    # sweep's next artifact file in the same folder ("Directory not empty").
    gone = store.rename(tmp_path / "removed")
    shutil.rmtree(gone)
    out, err = running.communicate(timeout=BOUND_S)
    assert running.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (line,) = fault_lines(err)
    assert "its files were removed" in line


def test_cells_whose_records_a_removed_store_lost_say_so_in_the_summary(tmp_path) -> None:
    """Two cells side by side (joblib) train on while their store goes: the summary says they ran and their
    records were lost, not `killed` with no reason (nobody stopped them) nor `not started`."""
    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    (tmp_path / "sweep").mkdir()
    with open(tmp_path / "out.txt", "w") as out:
        running = subprocess.Popen(
            [sys.executable, str(RUN_PY), "-m", *CELLS[1:], "seed=0,1", "task.epochs=20"]
            + ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
            cwd=tmp_path / "sweep",
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env({"MLFLOW_TRACKING_URI": with_schema(uri)}),
        )
        deadline = time.monotonic() + BOUND_S
        while points(store / "mlflow.db", "epoch_time_s") < 2:
            assert running.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()[-3000:]
            time.sleep(0.2)
        shutil.rmtree(store.rename(tmp_path / "removed"))
        running.wait(timeout=BOUND_S)
    text = (tmp_path / "out.txt").read_text()
    assert running.returncode == 1 and "Traceback" not in text, text[-3000:]
    rows = [line for line in text.splitlines() if line.startswith("pytorch-mlp-cpu-bs64 seed=")]
    assert len(rows) == 2 and all(" lost " in row and "it ran; its record was lost:" in row for row in rows), rows


def points(database: Path, key: str) -> int:
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as connection:
        try:
            return connection.execute("select count(*) from metrics where key = ?", (key,)).fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def test_a_cell_that_stops_making_progress_is_recorded_hung_and_the_sweep_goes_on(tmp_path) -> None:
    """kill -STOP: its run's heartbeat (another thread, another process) stays fresh; the watch does not care."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        *(c for c in CELLS[1:] if not c.startswith("data.num_samples=")),
        "data.num_samples=2048",
        "cell.hung_after_s=6",
    ]
    # The first cell has epochs enough to be stopped in them even on an idle machine (40 took under 3 s, and the
    # cell was gone before its stop); it ends as hung. The second need only show that the sweep goes on.
    running = start_multirun(uri, tmp_path, "task.epochs=4000,1", *args)
    deadline = time.monotonic() + BOUND_S
    worker = None
    while worker is None:
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[1][-3000:]
        worker = next(
            (
                p
                for p in psutil.Process(running.pid).children(recursive=True)
                if "trainbench.cell.worker" in command_of(p)
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


def test_resume_reads_its_own_history_whatever_a_run_managed_to_record(tmp_path) -> None:
    """A real store holding the runs a sweep leaves (as a cell records them): a run killed before its cell bound a
    device (no backend, no framework version: the OOM killer at import time) is this machine's and reruns under
    resume=failed; a finished one is skipped under both modes; a cell with no run at all runs; an unavailable one
    is left alone by resume=failed."""
    from mlflow.tracking import MlflowClient

    from trainbench.config import config_hash
    from trainbench.config.compose import cells_for
    from trainbench.measure import hardware
    from trainbench.store import tracking
    from trainbench.sweep import resume

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = tracking.experiment_id(client, "trainbench", uri)
    cells = cells_for(["seed=0,1,2,3", "device=cpu"])
    host = hardware.host_tags()
    ran = {
        "trainbench.backend": "cpu",
        "hw.label": hardware.label("cpu", host),
        "trainbench.framework_version": resume._installed("torch"),
    }
    recorded = [
        (cells[0], "finished", ran),
        (cells[1], "failed", {}),  # died before binding its device: only the host's tags
        (cells[3], "unavailable", ran),
    ]  # cells[2]: never ran
    for cell, outcome, extra in recorded:
        prepared = cell.task.prepared(cell)
        tags = {"trainbench.kind": "cell", "trainbench.config_hash": config_hash(prepared), **host, **extra}
        run = client.create_run(experiment, tags=tags)
        tracking.close(client, run.info.run_id, outcome, "as recorded")
    failed = [(d.run, d.reason.split(" (")[0]) for d in resume.decide(cells, client, experiment, "failed")]
    assert [run for run, _ in failed] == [False, True, True, False]
    assert failed[3][1] == "its latest run here was unavailable"
    assert [d.run for d in resume.decide(cells, client, experiment, True)] == [False, True, True, True]


def sleeper(megabytes: int = 0) -> subprocess.Popen[str]:
    """A real process holding `megabytes` of touched memory, waiting to be killed."""
    code = f"import sys, time; block = bytearray({megabytes} * 2**20); print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def killed(child: subprocess.Popen[str], evidence: OomEvidence) -> str | None:
    evidence.sample()
    child.kill()
    child.wait()
    return evidence.verdict()


def test_a_sigkill_while_other_processes_were_killed_for_memory_is_not_blamed_on_memory(tmp_path) -> None:
    """The machine's OOM-kill count rises (the killer took other processes) while a small cell is SIGKILLed by
    someone: nothing ties the kill to the cell, so its sender is unknown."""
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 1000\noom_kill 7\nnuma_hit 3\n")
    child = sleeper()
    evidence = OomEvidence(child.pid, vmstat=vmstat, kmsg=tmp_path / "no-kmsg")
    vmstat.write_text("nr_free_pages 1000\noom_kill 9\nnuma_hit 3\n")
    oom = killed(child, evidence)
    assert oom is None
    plain = runner.read_result(tmp_path / "result.json", -signal.SIGKILL, CellLimits(), oom)
    assert "failure" not in plain
    assert plain["reason"] == "cell process killed by SIGKILL (sender unknown)"


def test_a_sigkill_tied_to_the_cell_is_recorded_oom(tmp_path) -> None:
    """The kernel's log names the cell's pid; or an OOM kill is counted while the cell holds most of its cgroup's
    memory limit (a real cgroup's files, rewritten where the cell's /proc/<pid>/cgroup points)."""
    child = sleeper()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(f"3,1,2,-;Out of memory: Killed process {child.pid} (python) total-vm:1kB\n")
    oom = killed(child, OomEvidence(child.pid, kmsg=kmsg))
    assert oom == "the kernel's log names its process"
    result = runner.read_result(tmp_path / "result.json", -signal.SIGKILL, CellLimits(), oom)
    assert (result["outcome"], result["failure"]) == ("failed", "oom")
    assert "out-of-memory killer" in result["reason"] and oom in result["reason"]

    child = sleeper(megabytes=64)
    evidence = OomEvidence(child.pid, kmsg=tmp_path / "no-kmsg")
    assert evidence.cgroup is not None
    cgroup = tmp_path / "cgroup" / evidence.cgroup.relative_to("/sys/fs/cgroup")
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text(f"{100 * 2**20}\n")
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    evidence = OomEvidence(child.pid, cgroup_root=tmp_path / "cgroup", kmsg=tmp_path / "no-kmsg")
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    assert killed(child, evidence) == "an OOM kill was counted while it held 0.1 of the 0.1 GiB it could have"


def test_a_read_only_store_folder_is_reported_read_only_not_removed(tmp_path) -> None:
    """The database's folder is mounted read-only while the database itself is intact: a write fails, and the
    reason is that it is read-only (its files are all there)."""
    from mlflow.tracking import MlflowClient

    from trainbench.store import tracking

    with tmpfs(tmp_path / "store", "16m") as store:
        uri = with_schema(f"sqlite:///{store / 'mlflow.db'}")
        subprocess.run(["mount", "-o", "remount,ro", str(store)], check=True)
        with pytest.raises(Exception) as refused:
            MlflowClient(uri).create_experiment("after")
        assert (store / "mlflow.db").exists()
        assert tracking.store_fault(refused.value, uri) == "it is read-only"
        # SQLite's words when it cannot make its journal beside the database: the folder is read-only
        cannot_open = sqlite3.OperationalError("unable to open database file")
        assert tracking.store_fault(cannot_open, uri) == "it is read-only"
    assert tracking.store_fault(cannot_open, uri) == "its files were removed"  # unmounted: the database is gone


@pytest.mark.parametrize("run_id", ["3f4295e0c1d84a2bb1e5d7a0429c11aa", "e802650210414534a16e896c484cdd2f"])
def test_a_run_id_that_holds_an_http_status_is_neither_a_busy_store_nor_a_server_down(run_id: str) -> None:
    """HTTP 429 and 502-504 are waited out; those digits inside a run id that an error quotes are not a status (a
    missing run once read as a busy store, or as a Bad Gateway, made an import wait for tracking.outage_s)."""
    from mlflow.exceptions import MlflowException

    from trainbench.store.tracking import busy, unanswered

    missing = MlflowException(f"Run with id={run_id} not found", error_code="RESOURCE_DOES_NOT_EXIST")
    assert not busy(missing)
    assert not unanswered(missing)
    assert busy(MlflowException("API request failed with error code 429 != 200: Too Many Requests"))
    assert busy(MlflowException("(sqlite3.OperationalError) database is locked"))
    assert unanswered(MlflowException("API request failed with error code 502 != 200. Response body: ''"))
    assert unanswered(MlflowException("Max retries exceeded with url: ... (Caused by ResponseError('too many 503 "
                                      "error responses'))"))  # fmt: skip


def test_a_write_that_found_no_table_says_emptied_even_when_the_tables_are_back_when_looked_at(tmp_path) -> None:
    # Between a cell's refused write and the look at the file, another cell's MLflow may create its tables in the
    # emptied file again (or hold it locked): the write's own words decide, never "its files were removed".
    import contextlib
    import sqlite3

    from trainbench.store.tracking.outage import store_fault

    database = tmp_path / "mlflow.db"
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.execute("create table runs (run_uuid text)")
        connection.commit()
    refused = sqlite3.OperationalError("no such table: runs")
    assert store_fault(refused, f"sqlite:///{database}").startswith("its database was emptied or replaced")
    database.unlink()
    assert store_fault(refused, f"sqlite:///{database}") == "its files were removed"


def test_parallel_cells_whose_store_was_emptied_under_them_say_they_ran_not_not_started(tmp_path) -> None:
    """Two cells side by side (joblib) while their database is emptied (truncated: nothing in it can be read any
    more, so the sweep cannot read their outcomes back). Neither line says `not started`: both cells ran. The one
    line says what happened to the store (emptied), not that its files were removed."""
    store = tmp_path / "store"
    store.mkdir()
    database = store / "mlflow.db"
    uri = f"sqlite:///{database}"
    (tmp_path / "sweep").mkdir()
    with open(tmp_path / "out.txt", "w") as out:
        running = subprocess.Popen(
            [sys.executable, str(RUN_PY), "-m", *CELLS[1:], "seed=0,1", "task.epochs=20"]
            + ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
            cwd=tmp_path / "sweep",
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env({"MLFLOW_TRACKING_URI": with_schema(uri)}),
        )
        deadline = time.monotonic() + BOUND_S
        while runs_with(database, "epoch_time_s") < 2:  # both cells are training
            assert running.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()[-3000:]
            time.sleep(0.2)
        database.write_bytes(b"")
        running.wait(timeout=BOUND_S)
    text = (tmp_path / "out.txt").read_text()
    assert running.returncode == 1 and "Traceback" not in text, text[-3000:]
    rows = [line for line in text.splitlines() if line.startswith("pytorch-mlp-cpu-bs64 seed=")]
    assert len(rows) == 2 and not [row for row in rows if "not started" in row], rows
    # The cell whose write met the fault first was stopped by it; the other ran, and its record went with the store.
    assert sorted(row.split()[2] for row in rows) == ["failed", "lost"], rows
    assert all("stopped accepting writes" in row for row in rows), rows
    assert [row for row in rows if " lost " in row and "; its record was lost: " in row and "it ran" in row], rows
    # Emptied, or damaged when a cell wrote into the emptied file before the check: never "removed" or read-only.
    (line,) = [line for line in fault_lines(text) if line.startswith("trainbench: the tracking store ")]
    assert "its database was emptied" in line or "its database file is damaged" in line, line


def runs_with(database: Path, key: str) -> int:
    """How many runs have logged metric `key`, read read-only."""
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as connection:
        try:
            query = "select count(distinct run_uuid) from metrics where key = ?"
            return int(connection.execute(query, (key,)).fetchone()[0])
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def test_an_emptied_or_overwritten_database_is_named_so_not_removed_nor_read_only(tmp_path) -> None:
    """The store's file is still there, writable: emptied (truncated), it is `emptied`; overwritten with other
    bytes, `damaged`. Both end a sweep (StoreFailed), where `file is not a database` was not a store fault at all and
    each cell printed the SQL of every failed write instead."""
    from mlflow.tracking import MlflowClient

    from trainbench.store import tracking

    for content, said in ((b"", "its database was emptied"), (os.urandom(64 * 1024), "its database file is damaged")):
        uri = with_schema(f"sqlite:///{tmp_path / f'{len(content)}.db'}")
        client = MlflowClient(uri)
        client.search_experiments()
        (tmp_path / f"{len(content)}.db").write_bytes(content)
        with pytest.raises(Exception) as refused:
            client.create_experiment("after")
        assert (tracking.store_fault(refused.value, uri) or "").startswith(said), refused.value
