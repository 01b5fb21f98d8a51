"""Runs that are really running, and runs whose process vanished.

A RUNNING run carries who runs it (`trainbench.process`: a host id, a pid and the process's start time) and
a heartbeat (`trainbench.heartbeat`, seconds since the epoch) refreshed every sweep.heartbeat_s by the
process that owns it. Every invocation against a store first closes, as `lost`, the runs whose owner is
gone: on this host at once (the pid is dead, or belongs to another process now), elsewhere once the
heartbeat is older than sweep.lost_after_s. So a power cut or a SIGKILL leaves no run RUNNING forever.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import socket
import subprocess
import threading
import time
from typing import Any

import psutil

from trainbench.store import tracking

PROCESS_TAG = "trainbench.process"
HEARTBEAT_TAG = "trainbench.heartbeat"


HOST_SALT = "trainbench-host-id-v2"  # this tool's own hashes: they match no other program's hash of the same ids


@functools.lru_cache(maxsize=1)
def host_id() -> str:
    """A stable, anonymous name for this machine: 12 hex digits of a salted SHA-256 of the hostname and the
    machine's random id (Linux /etc/machine-id, macOS IOPlatformUUID). Neither is recorded, and without the
    machine id the hash cannot be guessed back to a hostname."""
    return hashlib.sha256(f"{HOST_SALT}:{socket.gethostname()}:{_machine_id()}".encode()).hexdigest()[:12]


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as source:
                return source.read().strip()
        except OSError:
            continue
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["ioreg", "-rd1", "-c", "IOPlatformExpertDevice"], capture_output=True, text=True, timeout=5
        ).stdout
        found = re.search(r'"IOPlatformUUID" = "([^"]+)"', out)
        if found:
            return found.group(1)
    return ""


def process_identity(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{host_id()}:{pid}:{int(psutil.Process(pid).create_time())}"


def alive_tags() -> dict[str, str]:
    return {PROCESS_TAG: process_identity(), HEARTBEAT_TAG: str(int(time.time()))}


class Heartbeat:
    """Refreshes a run's heartbeat tag from a thread while the `with` block runs. A failed write (the
    server blinking) is skipped: the next beat tries again, and lost_after_s is many beats long."""

    def __init__(self, store: Any, run_id: str, interval_s: float) -> None:
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id[:8]}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            # A missed beat is harmless (see the class docstring); a store that stopped accepting writes is
            # the sweep's to report, not this thread's.
            with contextlib.suppress(Exception, tracking.StoreFailed):
                tracking.set_tags(self.store, self.run_id, {HEARTBEAT_TAG: str(int(time.time()))})


def owner_gone(tags: dict[str, str], start_time_ms: int, lost_after_s: float, now: float | None = None) -> str | None:
    """Why a RUNNING run's owner is gone, or None while it may still be alive."""
    now = time.time() if now is None else now
    identity = tags.get(PROCESS_TAG, "")
    parts = identity.split(":")
    if len(parts) == 3 and parts[0] == host_id() and not _same_process_alive(int(parts[1]), int(parts[2])):
        return f"its process (pid {parts[1]} on this machine) is gone"
    last = tags.get(HEARTBEAT_TAG)
    last_s = float(last) if last and last.replace(".", "", 1).isdigit() else start_time_ms / 1000.0
    if now - last_s > lost_after_s:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last_s))
        return f"no heartbeat since {stamp} (sweep.lost_after_s={lost_after_s:g})"
    return None


def _same_process_alive(pid: int, started: int) -> bool:
    try:
        return int(psutil.Process(pid).create_time()) == started
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def close_lost_runs(store: Any, lost_after_s: float) -> list[str]:
    """Close every RUNNING trainbench run in the store whose owner is gone, as `lost`; return their ids.
    Sweep parents are closed after their cells, so a parent's summary can count its lost cells."""
    closed: list[str] = []
    experiments = [e.experiment_id for e in store.search_experiments(max_results=10_000)]
    if not experiments:
        return closed
    runs = store.search_runs(experiments, "attributes.status = 'RUNNING'", max_results=10_000)
    for kind in ("cell", "sweep"):
        for run in runs:
            tags = run.data.tags
            if tags.get("trainbench.kind") != kind:
                continue
            reason = owner_gone(tags, run.info.start_time, lost_after_s)
            if reason:
                try:
                    tracking.close(store, run.info.run_id, "lost", f"the run's process vanished: {reason}")
                    closed.append(run.info.run_id)
                except Exception:  # noqa: S112  (another invocation may be closing it at the same moment)
                    continue
    return closed
