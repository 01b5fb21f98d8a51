"""A tracking store that fails: a server that does not answer (ridden out for tracking.outage_s by OutageWatch,
shared by every thread of the process), a store that is busy (tried again the same way), and a store that refuses
writes for good (StoreFailed, which ends the sweep). `client` is the MlflowClient every process writes through.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainbench.store.tracking.redaction import error_line, private, redact, redact_paths

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
    (
        "its database file is damaged (not an SQLite database any more)",
        ("file is not a database", "database disk image is malformed"),
    ),
)


def store_fault(error: BaseException, uri: str = "") -> str | None:
    """Why a store refused a write, when the reason means it will refuse every other one too; else None."""
    text = f"{error} {error.__cause__ or ''} {error.__context__ or ''}".lower()
    for cause, needles in _STORE_FAULTS:
        if any(needle in text for needle in needles):
            if uri.startswith("sqlite:///"):
                database = Path(uri[len("sqlite:///") :].split("?", 1)[0])
                return _sqlite_fault(database) or _tables_gone(text, database) or cause
            return cause
    return None


def _tables_gone(text: str, database: Path) -> str | None:
    """A write that found no MLflow table in a file that is still there: the file was emptied or replaced, though
    by the time it is looked at another process may have created MLflow's tables in it again, or hold it locked."""
    if "no such table" in text and database.exists():
        return "its database was emptied or replaced (MLflow's tables were gone when it was written)"
    return None


def _sqlite_fault(database: Path) -> str | None:
    """What the database's file and folder say about a refused write, which SQLite's words can hide: it calls a
    database whose file was deleted under it read-only (SQLITE_READONLY_DBMOVED), and a folder where it cannot
    make its journal `unable to open database file`."""
    try:
        size = database.stat().st_size
    except FileNotFoundError:
        return "its files were removed"
    except OSError:
        return None
    if not _holds_runs(database):  # there, readable, and without MLflow's tables
        if size == 0:
            return "its database was emptied (the file is there, with nothing in it)"
        return "its database was replaced (the file there has none of MLflow's tables)"
    try:
        read_only_mount = bool(os.statvfs(database.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    if read_only_mount or not os.access(database.parent, os.W_OK) or not os.access(database, os.W_OK):
        return "it is read-only"
    return None


def _holds_runs(database: Path) -> bool:
    """Whether the database file has MLflow's runs table (read-only; True when that cannot be told)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)) as connection:
            return connection.execute("select 1 from sqlite_master where name = 'runs'").fetchone() is not None
    except sqlite3.Error:
        return True


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
                            f"({error_line(error)[:160]})"
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
    "bad gateway",
    "service unavailable",
    "gateway timeout",
)


def unanswered(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}".lower()
    return any(needle in text for needle in _UNANSWERED) or bool(_STATUS_5XX.search(text))


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


# HTTP statuses as statuses, not the digits inside a run id that an error message quotes: a hex id holds "429" or
# "502" often, and a missing run read as an outage makes an import wait for tracking.outage_s.
_STATUS_429 = re.compile(r"(?<![0-9a-f])429(?![0-9a-f])")
_STATUS_5XX = re.compile(r"(?<![0-9a-f])50[234](?![0-9a-f])")


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
    # requests' words come last in a long line that names the endpoint and the connection pool first
    text = str(error).lower()
    said = next((words for words in _UNANSWERED_SAID if words in text), None)
    return said or error_line(error)[:120]


# What a server that does not answer is said to do, the most telling words first.
_UNANSWERED_SAID = (
    "connection refused",
    "connection reset",
    "connection aborted",
    "remote end closed connection without response",
    "read timed out",
    "failed to establish a new connection",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
)


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
