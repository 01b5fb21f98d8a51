"""Where the tracking store is and opening it: tracking.uri, else $MLFLOW_TRACKING_URI, else the project's own
SQLite store; checked before a sweep so that a store that cannot be used fails in one line (TrackingUnavailable).

Every process uses MlflowClient with explicit run ids rather than mlflow.start_run(): the owner of a run
creates it and always closes it, others only log into it, and nobody depends on the fluent API's
process-global "active run" (which `mlflow run` pre-sets through MLFLOW_RUN_ID).

A tracking server may blink (a restart, a network hiccup): MLflow's own HTTP retries stay on, with a
backoff bounded so that a server that is really gone fails a cell within about a minute. A fresh SQLite
store is created once, under a file lock, so sweeps started at the same instant do not race its creation, as a
copy of an empty migrated store (trainbench.store.store_template) rather than by MLflow's migrations.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from trainbench.locations import PROJECT_ROOT
from trainbench.store import store_template
from trainbench.store.tracking.outage import DEFAULT_OUTAGE_S, StoreFailed, TrackingUnavailable, client
from trainbench.store.tracking.redaction import (
    error_line,
    one_line_store_errors,
    private,
    quiet_logs,
    redact,
    redact_paths,
)

# MLflow's own retries are short (waits of 0 and 2 s): an outage longer than that is ridden out by OutageWatch,
# for tracking.outage_s, whatever the request.
HTTP_RETRY_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def default_tracking_uri() -> str:
    return f"sqlite:///{default_store_folder() / 'mlflow.db'}"


def default_store_folder() -> Path:
    """The checkout's root (runs land beside the project wherever you launch from); for an installed
    `trainbench` with no checkout, the folder it is launched from."""
    return PROJECT_ROOT if (PROJECT_ROOT / "conf").is_dir() and (PROJECT_ROOT / "src").is_dir() else Path.cwd()


def resolve_tracking_uri(configured: str | None) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else the project's own SQLite store; local paths absolute.

    Hydra's output folders and `mlflow run` change the working directory: a relative sqlite path or
    folder would then split the runs over several stores.
    """
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///') :]).resolve()}"
    if "://" not in uri:
        return str(Path(uri).resolve())
    return uri


def configure_http_retries() -> None:
    """MLflow's HTTP retries with a bounded backoff, unless the user set them (inherited by every cell)."""
    for key, value in HTTP_RETRY_DEFAULTS.items():
        os.environ.setdefault(key, value)


def configure_store_environment() -> None:
    """What opening a store sets in this process's environment, which every cell's process inherits."""
    configure_http_retries()
    quiet_logs()
    # MLflow prints "View run ... at: <the URI, credentials and all>" whenever a run ends on a server; the
    # sweep prints its own redacted link instead (inherited by every cell's process).
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def open_store(uri: str, *, mid_sweep: bool = False, outage_s: float = DEFAULT_OUTAGE_S) -> Any:
    """A client for `uri`, checked to answer; raises TrackingUnavailable with what to do.

    Before a sweep a server that is down fails at once (one line, exit 2). `mid_sweep` (a cell's job: the
    sweep's owner reached the server already) rides out an outage of up to `outage_s` instead, so a restart
    between two cells costs no cell."""
    configure_store_environment()
    _wait_while_locked(uri, outage_s)
    problem = _local_problem(uri)
    if problem and mid_sweep:  # it was there when the sweep began
        raise StoreFailed(
            f"the tracking store {private(uri)} stopped accepting writes: its files were removed ({problem})"
        )
    if problem:
        raise TrackingUnavailable(f"cannot use the MLflow tracking store {redact(uri)}: {problem}")
    one_line_store_errors()
    if uri.startswith(("http://", "https://")) and not mid_sweep:
        _check_server(uri)
    if uri.startswith(("postgresql", "mysql", "mssql")) and not mid_sweep:
        _check_database_server(uri)
    try:
        with _creation_lock(uri):
            if uri.startswith("sqlite:///") and not mid_sweep:
                store_template.create_from_template(Path(uri[len("sqlite:///") :].split("?", 1)[0]))
            tracking = client(uri, outage_s)
            # Before a sweep, one plain request: a server that does not answer now is refused, not waited for.
            (tracking if mid_sweep else tracking._inner).search_experiments(max_results=1)
    except TrackingUnavailable:
        raise
    except Exception as error:  # MLflow raises many types here: connection, SQL, permission
        raise TrackingUnavailable(f"cannot use the MLflow tracking store {redact(uri)} ({error_line(error)})") from None
    return tracking


def _local_problem(uri: str) -> str | None:
    """What is wrong with a local store before MLflow tries it (MLflow's own errors take minutes or mislead)."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :].split("?", 1)[0])
        if path.is_dir():
            return f"{redact_paths(str(path))} is a folder, not a database file: name a file, e.g. sqlite:///{path}/mlflow.db"
        if not path.parent.is_dir():
            return f"the folder {redact_paths(str(path.parent))} does not exist: create it first"
        if path.exists() and path.stat().st_size > 0:
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
                    connection.execute("select count(*) from sqlite_master").fetchone()
            except sqlite3.DatabaseError as error:
                return f"{redact_paths(str(path))} is not a readable SQLite database ({error}): move it aside or name another file"
        if not os.access(path.parent, os.W_OK):
            return f"the folder {redact_paths(str(path.parent))} is not writable"
    elif "://" not in uri or uri.startswith("file://"):
        folder = Path(uri[len("file://") :] if uri.startswith("file://") else uri)
        if folder.exists() and not folder.is_dir():
            return (
                f"{redact_paths(str(folder))} is a file, not a folder of runs: name a folder or a sqlite:/// database"
            )
        return _folder_store_refused(folder)
    elif not uri.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql", "sqlite")):
        return "unknown kind of URI: use http(s)://host:port, sqlite:///path/mlflow.db or a folder"
    return None


def _folder_store_refused(folder: Path) -> str | None:
    """MLflow 3 refuses its filesystem backend unless MLFLOW_ALLOW_FILE_STORE is true; its own message is a
    paragraph whose way out comes last. Said in one line, with both ways out; older MLflow, which has no such
    switch, takes the folder."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:
        return None
    if MLFLOW_ALLOW_FILE_STORE.get():
        return None
    shown = redact_paths(str(folder))
    return (
        f"{shown} is a folder store, and MLflow keeps its filesystem backend in maintenance mode: use a database, "
        f"e.g. sqlite:///{shown}/mlflow.db (`mlflow migrate-filestore` moves runs already in the folder), or set "
        "MLFLOW_ALLOW_FILE_STORE=true to use the folder anyway"
    )


def _check_server(uri: str) -> None:
    """A quick answer about a server that is down, instead of a minute of retries before the first cell."""
    import requests

    try:
        requests.get(f"{uri.rstrip('/')}/health", timeout=5)
    except requests.RequestException as error:
        raise TrackingUnavailable(
            f"cannot reach the MLflow tracking server {redact(uri)} ({_network_reason(error)}): start it "
            "(mlflow server ...), or unset MLFLOW_TRACKING_URI / tracking.uri to use the project's local store"
        ) from None


_DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
_LOCK_POLL_S = 0.5


def _check_database_server(uri: str) -> None:
    """A database server that does not take a connection is refused in seconds: SQLAlchemy's store, as MLflow
    makes it, retries its first connection for minutes."""
    import socket

    from sqlalchemy.engine import make_url

    try:
        url = make_url(uri)
    except Exception:  # noqa: BLE001  (MLflow names a malformed URI better)
        return
    if not url.host:  # a unix socket: local, and SQLAlchemy's own error comes at once
        return
    port = url.port or _DATABASE_PORTS.get(url.get_backend_name(), 0)
    try:
        socket.create_connection((url.host, port), timeout=5).close()
    except OSError as error:
        raise TrackingUnavailable(
            f"cannot reach the database server of {redact(uri)} ({_network_reason(error)}): start it, or unset "
            "MLFLOW_TRACKING_URI / tracking.uri to use the project's local store"
        ) from None
    _check_database_answers(uri, url.get_backend_name())


def _check_database_answers(uri: str, backend: str) -> None:
    """One connection, bounded: a port that takes TCP but is no database (a proxy, a wrong port), or a server that
    refuses the password, is refused now; MLflow would retry it for minutes."""
    timeout_arg = {"postgresql": "connect_timeout", "mysql": "connect_timeout"}.get(backend)
    if timeout_arg is None:
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    try:
        engine = sqlalchemy.create_engine(uri, poolclass=NullPool, connect_args={timeout_arg: 10})
    except Exception:  # noqa: BLE001  (no driver, a malformed URI: MLflow names those better)
        return
    try:
        engine.connect().close()
    except Exception as error:  # noqa: BLE001  (each driver raises its own)
        raise TrackingUnavailable(f"cannot use the MLflow tracking store {redact(uri)} ({error_line(error)})") from None
    finally:
        engine.dispose()


def _wait_while_locked(uri: str, outage_s: float) -> None:
    """A SQLite store that another process holds locked (a long transaction, a backup) is waited for, saying so,
    up to tracking.outage_s; then refused, naming the lock (not the file: it is fine)."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri[len("sqlite:///") :].split("?", 1)[0])
    began, said = time.monotonic(), False
    while _sqlite_locked(path):
        waited = time.monotonic() - began
        if waited >= outage_s:
            raise TrackingUnavailable(
                f"the MLflow tracking store {redact(uri)} is still locked by another process after {waited:.0f} s "
                "(tracking.outage_s): end what holds it (a sqlite3 session, a backup), then start again"
            )
        if not said:
            sys.stderr.write(
                f"trainbench: the tracking store {private(uri)} is locked by another process: waiting for it up to "
                f"{outage_s:g} s (tracking.outage_s)\n"
            )
            said = True
        time.sleep(_LOCK_POLL_S)


def _sqlite_locked(path: Path) -> bool:
    """Whether another connection holds the database so that nothing can even read it (or, briefly, write)."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=_LOCK_POLL_S)
        try:
            connection.execute("select count(*) from sqlite_master").fetchone()
        finally:
            connection.close()
    except sqlite3.OperationalError as error:
        return "locked" in str(error).lower()
    except sqlite3.DatabaseError:
        return False
    return False


def _network_reason(error: BaseException) -> str:
    """What went wrong on the network, in words (requests' own message is a nested repr)."""
    text = str(error)
    for needle, words in (
        ("Connection refused", "connection refused"),
        ("timed out", "no answer in 5 s"),
        ("Name or service not known", "unknown host"),
        ("Temporary failure in name", "unknown host"),
        ("No route to host", "no route to host"),
        ("SSL", "TLS handshake failed"),
    ):
        if needle in text:
            return words
    return error_line(error)


class _creation_lock:  # noqa: N801  (used as a context manager)
    """An exclusive lock beside a SQLite store while its first client creates or migrates the schema:
    MLflow's migrations are not safe against a second process doing the same at the same instant."""

    def __init__(self, uri: str) -> None:
        self.lock: Any = None
        if uri.startswith("sqlite:///"):
            from filelock import FileLock

            self.lock = FileLock(uri[len("sqlite:///") :].split("?", 1)[0] + ".lock", timeout=120)

    def __enter__(self) -> None:
        if self.lock is not None:
            self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()


def experiment_id(tracking: Any, name: str, uri: str) -> str:
    experiment = tracking.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    artifact_location = None
    if uri.startswith("sqlite:///"):
        # MLflow would put artifacts in ./mlruns of whatever folder the process started in: beside the
        # database instead (the project's mlruns/ for its own store), so a store and its files stay together.
        artifact_location = (Path(uri[len("sqlite:///") :]).parent / "mlruns" / name).as_uri()
    try:
        return str(tracking.create_experiment(name, artifact_location=artifact_location))
    except Exception:  # another process created it in between
        return str(tracking.get_experiment_by_name(name).experiment_id)
