"""What keeps `trainbench import` whole: one import at a time per store, and a stop that waits for a safe point.

Two imports of one file at the same instant would each find none of its runs in the store and each write them
all. An import holds the store's import lock while it looks for the runs already there and writes the rest:

- SQLite: a file lock beside the database (`<db>.import.lock`), released by the kernel if the process dies;
- PostgreSQL: a session advisory lock, released by the server when the connection closes, however it closes;
- a tracking server (http/https): none, as MLflow's REST API has no lock; imports into one server must not
  overlap (docs/comparing.md).

A stop (Ctrl-C, SIGTERM, SIGHUP) during an import is noted, not raised where it lands: an exception inside an
SQLAlchemy commit leaves the session unusable, and then the runs already written could not be deleted. The
import asks `StopRequests.check` between store calls, which raises ImportStopped at the next safe point.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from trainbench.stops import STOP_SIGNALS

# pg_advisory_lock's key: any fixed 64-bit number; this one spells "trainbench import" to no one in particular.
_POSTGRES_LOCK_KEY = 0x7472_6169_6E69_6D70
_NOTICE_AFTER_S = 1.0  # a lock held longer than this is named on stderr, so that a waiting import is not a mystery


class ImportStopped(BaseException):
    """A stop signal came during an import; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequests:
    """Within the block, a stop signal is recorded; `check()` raises ImportStopped for the first one."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequests:
        def note(signum: int, frame: FrameType | None) -> None:
            if self.signum is None:
                self.signum = signum

        self._previous = {sig: signal.signal(sig, note) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def check(self) -> None:
        if self.signum is not None:
            raise ImportStopped(self.signum)


@contextmanager
def import_lock(uri: str, stops: StopRequests, label: str) -> Iterator[None]:
    """Hold the store's import lock for the block (see the module's text); waiting for it yields to a stop."""
    if uri.startswith("sqlite:///"):
        with _sqlite_lock(uri[len("sqlite:///") :].split("?", 1)[0] + ".import.lock", stops, label):
            yield
    elif uri.startswith(("postgresql:", "postgresql+", "postgres:")):
        with _postgres_lock(uri, stops, label):
            yield
    else:
        yield


@contextmanager
def _sqlite_lock(path: str, stops: StopRequests, label: str) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock = FileLock(path)
    waited = _Wait(label)
    while True:
        stops.check()
        try:
            lock.acquire(timeout=0.2)
            break
        except Timeout:
            waited.tick()
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _postgres_lock(uri: str, stops: StopRequests, label: str) -> Iterator[None]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(uri, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            waited = _Wait(label)
            while True:
                stops.check()
                got = connection.execute(sqlalchemy.text(f"SELECT pg_try_advisory_lock({_POSTGRES_LOCK_KEY})"))
                if got.scalar():
                    break
                time.sleep(0.2)
                waited.tick()
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text(f"SELECT pg_advisory_unlock({_POSTGRES_LOCK_KEY})"))
    finally:
        engine.dispose()


class _Wait:
    def __init__(self, label: str) -> None:
        self.label, self.began, self.said = label, time.monotonic(), False

    def tick(self) -> None:
        if not self.said and time.monotonic() - self.began > _NOTICE_AFTER_S:
            print(f"trainbench: another import into {self.label} is under way: waiting for it", file=sys.stderr)
            self.said = True
