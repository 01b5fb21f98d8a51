"""How a cell's process reports to its run without importing MLflow: JSON lines over a pipe.

The cell's process (cell/worker.py) imports only its framework: importing MLflow and opening a store
cost ~5 s per cell on a 2-core machine, which is overhead no user asked to pay. It writes what it records
(metrics, tags, params, texts, figures) as one JSON line per event to a pipe; the process that launched it
(sweep/cell_process.py) reads them in a thread and hands them to a second thread that logs them into the run,
in order. The queue between the two threads is the buffer: when the tracking server blinks, MLflow's
retries hold up the logging thread, never the cell, and the queue is replayed in order once the server
answers (the launcher waits for it to drain before closing the run).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypedDict

# At the end of a cell, how long its queue may take to reach the store beyond tracking.outage_s (the writes of a
# long cell, after an outage that ended just before it did).
DRAIN_MARGIN_S = 120


class Event(TypedDict, total=False):
    """One JSON line on the pipe: exactly one of metrics (with its step), tags, params, text or figure (each of
    the last two with the artifact_file it becomes in the run)."""

    metrics: dict[str, float]
    step: int
    tags: dict[str, str]
    params: dict[str, Any]
    text: str
    figure: str  # the path of the saved image in the cell's scratch folder
    artifact_file: str


class LauncherGone(BrokenPipeError):
    """The pipe to the launcher broke: the launcher died (its death signal may not have arrived yet)."""


class PipeLog:
    """The cell's side (a trainbench.frameworks.base.RunLog): each call is one JSON line."""

    def __init__(self, stream: IO[str], scratch: Path) -> None:
        self.stream, self.scratch = stream, scratch
        self._figures = 0

    def _send(self, event: Event) -> None:
        try:
            self.stream.write(json.dumps(event, default=_plain) + "\n")
            self.stream.flush()
        except BrokenPipeError as error:  # its only reader, the process that launched the cell, is gone
            raise LauncherGone(str(error)) from error

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None:
        self._send({"metrics": {k: v for k, v in values.items() if v is not None}, "step": step})

    def tags(self, values: Mapping[str, Any]) -> None:
        self._send({"tags": {k: str(v) for k, v in values.items() if v is not None}})

    def params(self, values: Mapping[str, Any]) -> None:
        self._send({"params": dict(values)})

    def text(self, text: str, artifact_file: str) -> None:
        self._send({"text": text, "artifact_file": artifact_file})

    def figure(self, figure: Any, artifact_file: str) -> None:
        self._figures += 1
        path = self.scratch / f"figure-{self._figures}-{Path(artifact_file).name}"
        figure.savefig(path, dpi=120)
        self._send({"figure": str(path), "artifact_file": artifact_file})


class RankRelay:
    """The one recording path for a cell whose framework runs a process per device: the ranks are spawned by the
    framework's own launcher, which passes them no inherited pipe, so the cell's process listens on a Unix socket
    in its scratch folder and copies each line rank 0 sends onto its own pipe, whole and in order. Rank 0 thus
    records through the same JSON lines, the same writer and the same outage bound as any cell (`rank_log`)."""

    def __init__(self, log: PipeLog) -> None:
        import socket

        self.log = log
        self.address = str(log.scratch / "rank-events.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen()
        self._copying: list[threading.Thread] = []
        threading.Thread(target=self._accept, name="rank-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:  # closed: the ranks have ended
                return
            copying = threading.Thread(target=self._copy, args=(connection,), name="rank-events", daemon=True)
            self._copying.append(copying)
            copying.start()

    def _copy(self, connection: Any) -> None:
        # The launcher gone mid-line (a broken pipe): the cell is ending; its run is closed by the orphan's process.
        with contextlib.suppress(OSError), connection, connection.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                self.log.stream.write(line)
                self.log.stream.flush()

    def close(self) -> None:
        """After the ranks ended: every line they sent is on the pipe."""
        self._server.close()
        for copying in self._copying:
            copying.join(timeout=10)


def rank_log(address: str, scratch: Path) -> PipeLog:
    """Rank 0's RunLog: JSON lines to the cell's process's RankRelay."""
    import socket

    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(address)
    return PipeLog(connection.makefile("w", encoding="utf-8", buffering=1), scratch)


def _plain(value: Any) -> Any:
    """numpy and framework scalars as plain numbers."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class RunWriter:
    """The launcher's side: reads the cell's events and logs them into its run, in order, without ever
    making the cell wait for the store."""

    def __init__(
        self,
        store: Any,
        run_id: str,
        stream: IO[str],
        on_event: Callable[[], None] | None = None,
        on_fault: Callable[[Any], None] | None = None,
    ) -> None:
        from trainbench.store import tracking

        self.tracking, self.store, self.run_id, self.stream = tracking, store, run_id, stream
        self.on_event = on_event  # told of every event as it arrives (the cell shows progress)
        self.on_fault = on_fault  # told when the store stops accepting writes (the cell is then stopped)
        self.events: queue.Queue[Event | None] = queue.Queue()
        self.failures = 0
        self.fault: BaseException | None = None  # the store stopped accepting writes (tracking.StoreFailed)
        self._reader = threading.Thread(target=self._read, name=f"events-{run_id[:8]}", daemon=True)
        self._writer = threading.Thread(target=self._write, name=f"logging-{run_id[:8]}", daemon=True)

    def start(self) -> RunWriter:
        self._reader.start()
        self._writer.start()
        return self

    def finish(self, timeout_s: float = DRAIN_MARGIN_S) -> None:
        """After the cell's process ended: read what is left, then log it all (or give up after timeout_s)."""
        self._reader.join(timeout=10)
        self.events.put(None)
        deadline = time.monotonic() + timeout_s
        while self._writer.is_alive() and time.monotonic() < deadline:
            # A store silent past tracking.outage_s: the writer may hang in a request whose timeout and retries
            # take minutes more; what it still holds is lost either way, and the sweep must end near the bound.
            if self.tracking.OUTAGE.overdue():
                return
            self._writer.join(timeout=0.5)

    def lost(self) -> int:
        """Events that did not reach the store: failed after MLflow's retries, or still queued at the end."""
        return self.failures + max(0, self.events.qsize() - 1)  # less the end marker

    def _read(self) -> None:
        for line in self.stream:
            if self.on_event is not None:
                self.on_event()
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by the cell's death

    def _write(self) -> None:
        while (event := self.events.get()) is not None:
            if self.fault is not None:  # the store refuses every write now: count what is lost, try nothing
                self.failures += 1
                continue
            try:
                self._apply(event)
            except self.tracking.StoreFailed as fault:
                self.fault = fault
                self.failures += 1
                if self.on_fault is not None:
                    self.on_fault(fault)
            except Exception as error:  # after the outage bound: say so once, go on with the next event
                self.failures += 1
                if self.failures == 1:
                    sys.stderr.write(
                        f"trainbench: could not record {sorted(event)[0]} in the run: "
                        f"{self.tracking.private_line(error)}\n"
                    )

    def _apply(self, event: Event) -> None:
        tracking, store, run_id = self.tracking, self.store, self.run_id
        if "metrics" in event:
            tracking.log_metrics(store, run_id, event["metrics"], step=int(event.get("step", 0)))
        elif "tags" in event:
            tracking.set_tags(store, run_id, event["tags"])
        elif "params" in event:
            tracking.log_params(store, run_id, event["params"])
        elif "text" in event:
            store.log_text(run_id, tracking.private(event["text"]), event["artifact_file"])
        elif "figure" in event:
            folder = str(Path(event["artifact_file"]).parent) if "/" in event["artifact_file"] else None
            named = Path(event["figure"]).with_name(Path(event["artifact_file"]).name)
            Path(event["figure"]).rename(named)
            store.log_artifact(run_id, str(named), folder)
