"""A store that is busy or gone, within tracking.outage_s: a SQLite store locked by another process is waited for
(at the start, saying so, and mid-sweep, losing nothing); an unreachable database server is refused in seconds;
a tracking server that never returns ends the sweep soon after the bound, with one line and no further cell.
Real sweeps (`python src/run.py`), real SQLite locks, a real `mlflow server` killed for good."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import RUN_PY, child_env, runs_in, start_multirun, with_schema
from servers import MlflowServer, free_port

TINY = ["device=cpu", "model=mlp", "model.hidden_sizes=[32]", "data.num_samples=256", "data.num_val_samples=16",
        "task.epochs=1", "tracking.system_metrics_interval_s=0"]  # fmt: skip


def tiny_but(key: str) -> list[str]:
    """TINY less `key`, for a test that gives its own value (a key given twice is refused)."""
    return [a for a in TINY if a.split("=", 1)[0] != key]


@contextmanager
def locked(database: Path) -> Iterator[None]:
    """Another process's write transaction on the database, as a long `sqlite3` session or a backup holds."""
    connection = sqlite3.connect(database, timeout=30, isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


class StderrLines:
    """A process's stderr read line by line as it comes, in a thread: a test waits for a line, not for a time."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.arrived: list[float] = []  # time.monotonic() of each line's arrival
        self.ended = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, args=(process.stderr,), daemon=True)
        self.reader.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.arrived.append(time.monotonic())
                self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        """Whether a line with `text` came within `timeout` s (False as soon as the stream ends without one)."""
        with self.changed:
            self.changed.wait_for(lambda: self.ended or any(text in line for line in self.lines), timeout)
            return any(text in line for line in self.lines)

    def when(self, text: str) -> float | None:
        """When the first line with `text` arrived (time.monotonic()), or None."""
        with self.changed:
            return next((at for line, at in zip(self.lines, self.arrived, strict=True) if text in line), None)

    def so_far(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def whole(self) -> str:
        """Everything, once the process has closed its stderr."""
        self.reader.join(timeout=60)
        return self.so_far()


def run_py(folder: Path, *args: str, timeout: float = 300) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(RUN_PY), *args],
        cwd=folder,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


@pytest.mark.slow
def test_an_unreachable_database_server_is_refused_within_15_s(tmp_path: Path) -> None:
    uri = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/mlflow"
    code, _, err, took = run_py(tmp_path, *TINY, f"tracking.uri={uri}", timeout=120)
    assert code == 2, err[-2000:]
    assert took < 15, f"refused after {took:.0f} s"
    (line,) = err.strip().splitlines()
    assert "cannot reach the database server" in line and "connection refused" in line, line


@contextmanager
def not_a_database_server() -> Iterator[int]:
    """A port that takes connections and answers as an HTTP proxy does (what a firewall's or a wrong port's
    listener answers a database client), then hangs up."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with connection:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join()
        listener.close()


@pytest.mark.slow
def test_a_port_that_takes_connections_but_is_no_database_is_refused_within_15_s(tmp_path: Path) -> None:
    """A wrong port, a proxy, a server refusing the password: the TCP connection succeeds, the database's does not,
    and MLflow retried it for minutes (114 s) before a traceback-free refusal."""
    with not_a_database_server() as port:
        uri = f"postgresql+psycopg://postgres:pw@127.0.0.1:{port}/mlflow"
        code, _, err, took = run_py(tmp_path, *TINY, f"tracking.uri={uri}", timeout=300)
    assert code == 2, err[-2000:]
    assert took < 15, f"refused after {took:.0f} s"
    (line,) = err.strip().splitlines()
    assert line.startswith("trainbench: cannot use the MLflow tracking store postgresql") and "pw" not in line, line


@pytest.mark.slow
def test_a_store_locked_at_start_is_waited_for_saying_so(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    uri = with_schema(f"sqlite:///{database}")
    with locked(database):
        sweep = subprocess.Popen(
            [sys.executable, str(RUN_PY), *TINY, f"tracking.uri={uri}", "tracking.outage_s=60"],
            cwd=tmp_path,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        stderr = StderrLines(sweep)
        assert stderr.wait_for("locked by another process", timeout=240), stderr.so_far()[-3000:]  # reached it
        time.sleep(3)  # several more of its looks at the lock: it keeps waiting, it does not give up
        assert sweep.poll() is None, stderr.so_far()[-3000:]
    sweep.wait(timeout=300)
    err = stderr.whole()
    assert sweep.returncode == 0, err[-3000:]
    assert "move it aside" not in err and "Traceback" not in err, err[-3000:]
    waiting = [line for line in err.splitlines() if "locked by another process" in line]
    assert len(waiting) == 1 and "waiting for it up to 60 s (tracking.outage_s)" in waiting[0], err[-3000:]
    (cell,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert cell.data.tags["trainbench.outcome"] == "finished"


@pytest.mark.slow
def test_a_store_locked_mid_sweep_is_waited_out_and_loses_nothing(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    uri = with_schema(f"sqlite:///{database}")
    sweep = start_multirun(
        uri, tmp_path / "sweep", *tiny_but("task.epochs"), "task.epochs=6", "batch_size=16,32", "tracking.outage_s=60"
    )
    deadline = time.monotonic() + 120
    while not any(r.data.tags.get("trainbench.kind") == "cell" for r in runs_in(uri)):
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.2)
    with locked(database):
        time.sleep(25)  # longer than the 20 s SQLite waits on its own (MLflow sets busy_timeout)
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert len(cells) == 2 and {c.data.tags["trainbench.outcome"] for c in cells} == {"finished"}, err[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    for cell in cells:
        assert len(client.get_metric_history(cell.info.run_id, "epoch_samples_per_s")) == 6


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_server_that_never_returns_ends_the_sweep_soon_after_the_bound(how: str, tmp_path: Path) -> None:
    """Killed: every request is refused at once. Frozen (SIGSTOP, as a hung host or a black-holing network): the
    connection is taken and no answer comes, so each request waits for its timeout."""
    outage_s = 10
    with MlflowServer(tmp_path / "server") as server:
        sweep = start_multirun(
            server.uri,
            tmp_path / "sweep",
            *tiny_but("task.epochs"),
            "task.epochs=100000",  # computing until it is stopped, however fast the machine
            "batch_size=16,32,64",
            f"tracking.outage_s={outage_s}",
        )
        stderr = StderrLines(sweep)
        deadline = time.monotonic() + 180
        while not any(r.data.tags.get("trainbench.kind") == "cell" for r in runs_in(server.uri)):
            assert sweep.poll() is None and time.monotonic() < deadline, stderr.so_far()[-3000:]
            time.sleep(0.5)
        time.sleep(2)
        if how == "killed":
            server.stop(kill=True)
        else:
            os.killpg(server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        gone = time.monotonic()
        ended: list[float] = []
        waiter = threading.Thread(target=lambda: (sweep.wait(timeout=300), ended.append(time.monotonic())))
        waiter.start()
        out = sweep.stdout.read()  # type: ignore[union-attr]
        waiter.join()
        err = stderr.whole()
    # The bound: within 10 s of outage_s, from the outage's start. Killed: the first request that failed,
    # which the sweep says ("waiting for it up to ..."), after a heartbeat or an epoch and MLflow's own retries (a
    # few seconds with random jitter; bounded apart, loosely). Frozen: the requests in flight at the freeze hang
    # from then on, so it starts with the freeze.
    noticed = stderr.when("waiting for it up to") if how == "killed" else gone
    assert noticed is not None, err[-3000:]
    took, unnoticed = ended[0] - noticed, noticed - gone
    print(f"the outage began {unnoticed:.1f} s after the server went; the sweep ended {took:.1f} s after that, "
          f"tracking.outage_s={outage_s}")  # fmt: skip
    assert took <= outage_s + 10, f"the sweep ended {took:.1f} s after the outage began\n{err[-3000:]}\n{out[-2000:]}"
    assert unnoticed <= 60, f"the sweep noticed the server gone {unnoticed:.1f} s after it went\n{err[-3000:]}"
    assert sweep.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    gave_up = [line for line in err.splitlines() if "has not answered for" in line]
    assert len(gave_up) == 1, err[-3000:]
    assert out.count("not started") == 2, out[-3000:]
    (row,) = [line for line in out.splitlines() if line.startswith("pytorch-mlp-cpu-bs16 ")]
    assert "failed" in row and "stopped: the tracking server" in row, row


def postgres_points(cluster, key: str) -> int:
    """Points of `key` in the cluster's MLflow database, read directly."""
    import psycopg

    with psycopg.connect(
        host="127.0.0.1", port=cluster.port, user="postgres", dbname=cluster.database, options="-c lock_timeout=0"
    ) as connection:
        try:
            return connection.execute("select count(*) from metrics where key = %s", (key,)).fetchone()[0]
        except psycopg.errors.UndefinedTable:  # the schema is not there yet
            return 0


@pytest.mark.slow
def test_a_postgresql_lock_timeout_mid_sweep_is_waited_out_losing_nothing(postgres_cluster, tmp_path: Path) -> None:
    """A database whose lock_timeout (1 s) is far shorter than a lock another session holds on the metrics table
    (a migration, a VACUUM FULL, a long report): every write of the cells' figures is refused with "canceling
    statement due to lock timeout" for 12 s. The sweep waits, says so once, and loses nothing."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=postgres_cluster.port, user="postgres", autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE \"{postgres_cluster.database}\" SET lock_timeout = '1s'")
    uri = postgres_cluster.uri
    sweep = start_multirun(uri, tmp_path / "sweep", *tiny_but("task.epochs"), "task.epochs=2", "seed=0,1", fresh=True)
    deadline = time.monotonic() + 300
    while postgres_points(postgres_cluster, "epoch_time_s") < 1:  # the first cell is in its epochs
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.1)
    with psycopg.connect(
        host="127.0.0.1", port=postgres_cluster.port, user="postgres", dbname=postgres_cluster.database
    ) as holder:
        holder.execute("LOCK TABLE metrics IN ACCESS EXCLUSIVE MODE")
        time.sleep(12)
        holder.rollback()
    out, err = sweep.communicate(timeout=300)

    assert sweep.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    from mlflow.tracking import MlflowClient

    cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert sorted(c.data.tags["trainbench.outcome"] for c in cells) == ["finished"] * 2, err[-3000:]
    client = MlflowClient(uri)
    for cell in cells:
        assert len(client.get_metric_history(cell.info.run_id, "epoch_samples_per_s")) == 2
        assert len(client.get_metric_history(cell.info.run_id, "samples_per_s")) == 1
    waited = [line for line in err.splitlines() if "(tracking.outage_s)" in line]
    assert len(waited) == 1, err[-3000:]
    assert "the tracking store is busy (canceling statement due to lock timeout)" in waited[0], waited
