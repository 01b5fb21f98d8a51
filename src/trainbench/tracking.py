"""MLflow plumbing: where the store is, opening it safely, creating and closing runs, logging into them.

Every process uses MlflowClient with explicit run ids rather than mlflow.start_run(): the owner of a run
creates it and always closes it, others only log into it, and nobody depends on the fluent API's
process-global "active run" (which `mlflow run` pre-sets through MLFLOW_RUN_ID).

A tracking server may blink (a restart, a network hiccup): MLflow's own HTTP retries stay on, with a
backoff bounded so that a server that is really gone fails a cell within about a minute. A fresh SQLite
store is created once, under a file lock, so sweeps started at the same instant do not race its creation, as a
copy of an empty migrated store (trainbench.store_template) rather than by MLflow's migrations. Names of params,
tags and metrics follow docs/mlflow-schema.md.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainbench import store_template, untrusted
from trainbench.locations import PROJECT_ROOT

# MLflow statuses for our outcomes. `unavailable` is FAILED: the cell produced no figures.
RUN_STATUS = {
    "finished": "FINISHED",
    "failed": "FAILED",
    "unavailable": "FAILED",
    "killed": "KILLED",
    "hung": "FAILED",
    "lost": "FAILED",
    "skipped": "FINISHED",
}
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 5000
# MLflow's own retries are short (waits of 0 and 2 s): an outage longer than that is ridden out by OutageWatch,
# for tracking.outage_s, whatever the request.
HTTP_RETRY_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
DEFAULT_OUTAGE_S = 300.0  # tracking.outage_s


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written. str() is the one line shown to the user."""


class StoreFailed(BaseException):
    """The tracking store stopped accepting writes mid-sweep (its disk is full, it became read-only, its files
    were removed): nothing more can be recorded, so the sweep ends at once. A BaseException, like Ctrl-C, so
    that it unwinds through Hydra's launchers (which record an Exception as the job's result and carry on)
    and through the `except Exception` of code that only means to skip a record. str(): the one line shown."""


# What a store that can no longer be written says, in MLflow's, SQLAlchemy's, SQLite's and the OS's words.
_STORE_FAULTS = (
    ("the disk is full", ("database or disk is full", "no space left on device", "disk quota exceeded")),
    (
        "it is read-only",
        ("read-only file system", "readonly database", "attempt to write a readonly", "permission denied"),
    ),
    (
        "its files were removed",
        ("unable to open database file", "no such table", "disk i/o error"),
    ),
)


def store_fault(error: BaseException, uri: str = "") -> str | None:
    """Why a store refused a write, when the reason means it will refuse every other one too; else None."""
    text = f"{error} {error.__cause__ or ''} {error.__context__ or ''}".lower()
    for cause, needles in _STORE_FAULTS:
        if any(needle in text for needle in needles):
            if uri.startswith("sqlite:///"):
                return _sqlite_fault(Path(uri[len("sqlite:///") :].split("?", 1)[0])) or cause
            return cause
    return None


def _sqlite_fault(database: Path) -> str | None:
    """What the database's file and folder say about a refused write, which SQLite's words can hide: it calls a
    database whose file was deleted under it read-only (SQLITE_READONLY_DBMOVED), and a folder where it cannot
    make its journal `unable to open database file`."""
    try:
        database.stat()
    except FileNotFoundError:
        return "its files were removed"
    except OSError:
        return None
    try:
        read_only_mount = bool(os.statvfs(database.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    if read_only_mount or not os.access(database.parent, os.W_OK) or not os.access(database, os.W_OK):
        return "it is read-only"
    return None


# ------------------------------------------------------------------------------------------ where it is


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


# --------------------------------------------------------------------------------------- opening a store


def client(uri: str, outage_s: float = DEFAULT_OUTAGE_S) -> Any:
    """An MlflowClient for `uri` that rides out a server's outage of up to `outage_s` seconds, and raises
    StoreFailed when the store stops accepting writes."""
    from mlflow.tracking import MlflowClient

    return _GuardedClient(MlflowClient(tracking_uri=uri), uri, outage_s)


class _GuardedClient:
    """Passes every call to the MlflowClient it wraps, and watches how it fails.

    - A server that does not answer (refused, reset, a gateway's 502-504, MLflow's few retries exhausted):
      the call waits and tries again until the server answers or the outage has lasted tracking.outage_s
      (OutageWatch, shared by every thread of the process). A restart costs no record and no cell; a server
      that is really gone ends the sweep after that bound, every later call then failing at once.
    - A store that refuses writes for good (disk full, read-only, its files removed): StoreFailed, naming it.
    """

    def __init__(self, inner: Any, uri: str, outage_s: float) -> None:
        self._inner, self._uri, self._outage_s = inner, uri, outage_s
        self._server = uri.startswith(("http://", "https://"))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if OUTAGE.overdue() and not OUTAGE.stopping:  # past the bound: no request, each would wait for retries
                raise OUTAGE.fault(self._uri)
            while True:
                token = OUTAGE.request_started(self._outage_s)
                try:
                    result = attribute(*args, **kwargs)
                except Exception as error:
                    OUTAGE.request_ended(token)
                    if busy(error) or (self._server and unanswered(error)):
                        wait_s = OUTAGE.failed(error, self._outage_s)
                        if wait_s is not None:
                            time.sleep(wait_s)
                            continue
                        if OUTAGE.given_up and not OUTAGE.stopping:
                            raise OUTAGE.fault(self._uri) from error
                    cause = store_fault(error, self._uri)
                    if cause is not None:
                        raise StoreFailed(
                            f"the tracking store {private(self._uri)} stopped accepting writes: {cause} "
                            f"({_reason(error)[:160]})"
                        ) from error
                    raise
                OUTAGE.request_ended(token)
                OUTAGE.answered()
                return result

        return call


# What a server that is down, restarting or behind a gateway that lost it answers (or fails to).
_UNANSWERED = (
    "max retries exceeded",
    "connection refused",
    "connection aborted",
    "connection reset",
    "remote end closed",
    "remotedisconnected",
    "failed to establish a new connection",
    "read timed out",
    "502",
    "503",
    "504",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
)


def unanswered(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}".lower()
    return any(needle in text for needle in _UNANSWERED)


# What a store answers while another client holds what a write needs: SQLite's lock (after its own 5 s wait),
# a server's rate limit, PostgreSQL's lock_timeout or a deadlock it broke. The write was rolled back: it is tried
# again, for tracking.outage_s, as during an outage.
_BUSY = (
    "database is locked",
    "database table is locked",
    "too many requests",
    "lock timeout",
    "lock_not_available",
    "could not obtain lock",
    "deadlock detected",
)


# HTTP 429 as a status, not the digits inside a run id that an error message quotes (a hex id holds "429" often).
_STATUS_429 = re.compile(r"(?<![0-9a-f])429(?![0-9a-f])")


def busy(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}".lower()
    return any(needle in text for needle in _BUSY) or bool(_STATUS_429.search(text))


# urllib3's words once MLflow's retries of an HTTP status are spent: the status is what the user needs to know, and
# it comes at the end of a long line that names the endpoint and the connection pool.
_HTTP_STATUS_RETRIED = re.compile(r"too many (\d{3}) error responses")
_HTTP_STATUS_NAMES = {429: "Too Many Requests", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _outage_reason(error: BaseException) -> str:
    """What the store answered, in a few words: the HTTP status when MLflow's retries of one were spent."""
    status = _HTTP_STATUS_RETRIED.search(str(error))
    if status is not None:
        code = int(status.group(1))
        return f"HTTP {code} {_HTTP_STATUS_NAMES.get(code, '')}".rstrip() + ", after MLflow's retries"
    # SQLAlchemy puts the database's own words on a later line, after hints about its session and before the SQL.
    for line in str(error).splitlines():
        if any(needle in line.lower() for needle in _BUSY):
            return redact_paths(redact(_DRIVER_ERROR_PREFIX.sub("", line.strip())))[:120]
    return _reason(error)[:120]


_DRIVER_ERROR_PREFIX = re.compile(r"^\([\w.]+\)\s*")  # "(psycopg.errors.LockNotAvailable) "


class OutageWatch:
    """One outage of the tracking server at a time, as every thread of this process sees it: when it began,
    whether it has outlasted its bound; one line when it begins, ends or is given up on."""

    POLL_S = 5.0  # how often a waiting call tries again

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.began: float | None = None
        self.given_up = False
        self.stopping = False  # the sweep was stopped: its last writes try once, they wait for nobody
        self.what = "server"  # what the lines name: a server that does not answer, or a store that is busy
        self.outage_s = DEFAULT_OUTAGE_S  # the bound of the outage under way
        # Requests under way, by when they were sent: a server that takes connections and never answers (a frozen
        # host, a black-holing network) fails none of them until their timeouts and retries run out, minutes on.
        self._in_flight: dict[object, tuple[float, float]] = {}  # token -> (sent at, that call's outage_s)

    @staticmethod
    def _what(error: BaseException) -> str:
        return "store" if busy(error) else "server"

    def stop_waiting(self) -> None:
        """A stopped sweep (Ctrl-C, SIGTERM) ends promptly: what the server does not take now is closed `lost`
        by the next invocation."""
        self.stopping = True

    def failed(self, error: BaseException, outage_s: float) -> float | None:
        """Seconds to wait before trying again, or None: give up (the outage has lasted outage_s)."""
        if self.stopping:
            return None
        with self._lock:
            now = time.monotonic()
            if self.began is None:
                self.began, self.given_up = now, False
                state = "is busy" if busy(error) else "does not answer"
                sys.stderr.write(
                    f"trainbench: the tracking {self._what(error)} {state} ({_outage_reason(error)}): waiting for it up "
                    f"to {outage_s:g} s (tracking.outage_s); what the cells record meanwhile is kept\n"
                )
                self.what = self._what(error)
            if self.given_up:
                return None
            self.outage_s = outage_s
            left = outage_s - (now - self.began)
            if left <= 0:
                self.given_up = True  # said once, by the StoreFailed that ends the sweep (fault)
                return None
            return min(self.POLL_S, left)

    def request_started(self, outage_s: float) -> object:
        token = object()
        self._in_flight[token] = (time.monotonic(), outage_s)
        return token

    def request_ended(self, token: object) -> None:
        self._in_flight.pop(token, None)

    def _silent_since(self) -> float | None:
        """Since when the store has not answered: the outage's start, or the oldest request still waiting."""
        waiting = [sent for sent, _ in list(self._in_flight.values())]
        starts = [t for t in (self.began, min(waiting, default=None)) if t is not None]
        return min(starts, default=None)

    def overdue(self) -> bool:
        """Whether the store has been silent for longer than the bound, though no call has noticed yet: one may
        hang in a request, its timeout and retries still to come."""
        now, began = time.monotonic(), self.began
        if self.given_up or (began is not None and now - began > self.outage_s):
            return True
        return any(now - sent > outage_s for sent, outage_s in list(self._in_flight.values()))

    def fault(self, uri: str) -> StoreFailed:
        """What ends the sweep once the outage has outlasted tracking.outage_s: the running cell is stopped, no
        other starts; what could not be closed, the next invocation closes as `lost`."""
        self.given_up = True
        silent_since = self._silent_since()
        lasted = time.monotonic() - silent_since if silent_since is not None else self.outage_s
        return StoreFailed(
            f"the tracking {self.what} {private(uri)} has not answered for {lasted:.0f} s (tracking.outage_s): "
            "giving up on it"
        )

    def answered(self) -> None:
        if self.began is None:
            return
        with self._lock:
            if self.began is not None:
                sys.stderr.write(
                    f"trainbench: the tracking {self.what} answers again after {time.monotonic() - self.began:.0f} s\n"
                )
                self.began, self.given_up = None, False


OUTAGE = OutageWatch()


def open_store(uri: str, *, mid_sweep: bool = False, outage_s: float = DEFAULT_OUTAGE_S) -> Any:
    """A client for `uri`, checked to answer; raises TrackingUnavailable with what to do.

    Before a sweep a server that is down fails at once (one line, exit 2). `mid_sweep` (a cell's job: the
    sweep's owner reached the server already) rides out an outage of up to `outage_s` instead, so a restart
    between two cells costs no cell."""
    configure_http_retries()
    quiet_logs()
    # MLflow prints "View run ... at: <the URI, credentials and all>" whenever a run ends on a server; the
    # sweep prints its own redacted link instead (inherited by every cell's process).
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
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
        raise TrackingUnavailable(f"cannot use the MLflow tracking store {redact(uri)} ({_reason(error)})") from None
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
    return _reason(error)


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


def _reason(error: BaseException) -> str:
    """The error's first line, whole: MLflow often ends it with what to do (a cut at 200 characters lost the
    hint of its folder-store refusal). Bounded only against a line that is really a dump."""
    text = str(error).strip()
    line = text.splitlines()[0][:2000] if text else type(error).__name__
    return redact_paths(redact(line))


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


def verbose() -> bool:
    """`hydra.verbose=...` on the command line (set for every process of the sweep by trainbench.cli)."""
    return os.environ.get("TRAINBENCH_VERBOSE", "") not in ("", "0")


def quiet_logs() -> None:
    """MLflow's INFO lines say nothing a user must act on: off unless hydra.verbose is given. TensorFlow's C++
    log (oneDNN notes, a `failed call to cuInit` on machines without a GPU) is left on: the cell's launcher keeps
    it out of the terminal and in the cell's run (trainbench.runner.framework_log). Whatever is printed,
    verbose or not, names no password (redact_output)."""
    redact_output()
    if verbose():
        return
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read by MLflow when it configures its loggers
    for name in ("mlflow", "alembic", "absl", "jax._src.xla_bridge"):
        logging.getLogger(name).setLevel(logging.WARNING)


class _OneLine(logging.Filter):
    """MLflow's warnings and errors as one redacted line each (their tracebacks are MLflow's internals), and
    none at all from its stores: a store that fails is reported by trainbench, once, with what it means for the
    sweep (StoreFailed, the outage lines). hydra.verbose shows them all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or verbose():
            return True
        if record.name.startswith("mlflow.store."):
            return False
        first = (record.getMessage().strip().splitlines() or [""])[0]
        record.msg, record.args = private(first)[:300], None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def one_line_store_errors() -> None:
    """Attach _OneLine to MLflow's handlers (MLflow's loggers do not propagate to the root); once."""
    import mlflow  # noqa: F401  (configures its loggers and their handler)

    for handler in logging.getLogger("mlflow").handlers:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())


# ----------------------------------------------------------------------------------------- privacy


def redact(text: str) -> str:
    """Secrets in `text` masked (trainbench.untrusted.redact: the one rule set): http://user:***@host,
    ?password=***, MLFLOW_TRACKING_PASSWORD=***, cloud access key ids."""
    return untrusted.redact(text)


def redact_output() -> None:
    """Everything this process prints goes through redact(): every log record, of any logger, whatever handler
    prints it (MLflow's "API request to http://user:pass@host failed" while a server is down, urllib3's retries,
    Hydra's), and every write to sys.stdout and sys.stderr (print, tracebacks, warnings, Hydra's `--cfg`).
    Called first thing by each process trainbench starts: the sweep, a launcher's worker and its job, a cell."""
    import logging

    global _records_redacted
    if not _records_redacted:
        logging.setLogRecordFactory(_redacting_records(logging.getLogRecordFactory()))
        _records_redacted = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Redacted):
            setattr(sys, name, _Redacted(stream))


_records_redacted = False


def _redacting_records(make_record: Any) -> Any:
    """A log record factory that redacts the record's message and traceback as it is made, before any handler
    (whoever installed it, whenever) formats it."""
    import logging

    def make(*args: Any, **kwargs: Any) -> Any:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it as it would have
            return record
        if redact(message) != message:
            record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    return make


class _Redacted:
    """A text stream that writes through redact(); everything else is the stream it wraps (fileno, isatty,
    encoding, flush). Each write is redacted whole: a URI split over two writes would pass, and no caller here
    writes one that way (print, logging and tracebacks write a URI within one string)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def redact_paths(text: str) -> str:
    """Absolute paths made relative to the project (./...) or the home folder (~/...)."""
    home = str(Path.home())
    for root, short in ((str(PROJECT_ROOT), "."), (home, "~")):
        if root and root != "/":
            text = untrusted.path_prefix(root).sub(short, text)
    return text


def private(text: str) -> str:
    return redact_paths(redact(text))


def pasteable(uri: str) -> str:
    """`uri` for a command a person pastes into a shell: credentials redacted, the home folder as $HOME, which
    the shell expands anywhere in a word (a `~` inside `sqlite:///~/...` it leaves alone, and SQLite would then
    open a new, empty store in a folder named `~`)."""
    home = str(Path.home())
    text = redact(uri)
    if home and home != "/":
        text = text.replace(home + os.sep, "$HOME/")
    return text


# ----------------------------------------------------------------------------------------- runs


def log_params(tracking: Any, run_id: str, params: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    batch = [Param(key, _text(value, MAX_PARAM_LENGTH, key)) for key, value in params.items()]
    for start in range(0, len(batch), 100):  # MLflow takes at most 100 params per batch
        tracking.log_batch(run_id, params=batch[start : start + 100])


def log_metrics(tracking: Any, run_id: str, metrics: Mapping[str, float | None], step: int = 0) -> None:
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    now = get_current_time_millis()
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, metrics=batch)


def set_tags(tracking: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    batch = [RunTag(k, _text(v, MAX_TAG_LENGTH, k)) for k, v in tags.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, tags=batch)


def close(tracking: Any, run_id: str, outcome: str, reason: str | None = None) -> None:
    """Record the outcome and end the run. The end is attempted even when the tags cannot be written."""
    try:
        set_tags(tracking, run_id, {"trainbench.outcome": outcome, "trainbench.reason": reason})
    finally:
        tracking.set_terminated(run_id, RUN_STATUS[outcome])


def _text(value: Any, limit: int, name: str = "") -> str:
    """A param or tag value as recorded: secrets masked (the whole value where `name` is a secret's), paths
    shortened, cut to MLflow's limit."""
    text = private(untrusted.redact_value(name, "null" if value is None else str(value)))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def git_commit() -> str:
    """The project's commit, with -dirty when the work tree has uncommitted changes."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def installed_packages() -> str:
    """`pip freeze` of the running environment, without running pip (which takes seconds)."""
    from importlib.metadata import distributions

    lines = {f"{name}=={version}" for name, version in map(_name_and_version, distributions()) if name}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _name_and_version(distribution: Any) -> tuple[str | None, str]:
    """The Name and Version headers read from the top of the metadata file: parsing the whole file as email, as
    importlib.metadata does, takes a new sweep's parent a noticeable part of a second for a few hundred packages."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("Name", "Version"):
            headers.setdefault(key, value.strip())
    if "Name" in headers and "Version" in headers:
        return headers["Name"], headers["Version"]
    return distribution.metadata["Name"], distribution.version


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()


class RunLogger:
    """Logs into one run that someone else created (and will close)."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.tracking, self.run_id = client(uri), run_id

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None:
        log_metrics(self.tracking, self.run_id, values, step)

    def tags(self, values: Mapping[str, Any]) -> None:
        set_tags(self.tracking, self.run_id, values)

    def params(self, values: Mapping[str, Any]) -> None:
        log_params(self.tracking, self.run_id, values)

    def text(self, text: str, artifact_file: str) -> None:
        self.tracking.log_text(self.run_id, private(text), artifact_file)

    def figure(self, figure: Any, artifact_file: str) -> None:
        self.tracking.log_figure(self.run_id, figure, artifact_file)


class NullLog:
    """Logs nothing: the probes of batch_size=max, and data-parallel ranks other than 0."""

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None: ...

    def tags(self, values: Mapping[str, Any]) -> None: ...

    def params(self, values: Mapping[str, Any]) -> None: ...

    def text(self, text: str, artifact_file: str) -> None: ...

    def figure(self, figure: Any, artifact_file: str) -> None: ...
