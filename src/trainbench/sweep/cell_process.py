"""A cell's own process as its launcher (trainbench.sweep.cell_run) sees it: started on the GPUs and cores the cell
may use, its events relayed into the run, its stderr echoed and its tail kept, watched for a timeout, a hang, a
process spinning at its memory cap or a store that stopped taking its records, stopped politely then firmly, and
its outcome read from the result it wrote or, when it wrote none, from how it ended.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainbench import progress
from trainbench.cell.events import DRAIN_MARGIN_S, RunWriter
from trainbench.cell.in_cell import ProcessResult
from trainbench.cell.order import ORDER_ENV
from trainbench.cell.orphan import remove_abandoned_scratch, remove_abandoned_shared_memory, scratch_prefix
from trainbench.cell.worker import PRELOAD_ARG, UNBLOCK_STOPS_ENV, traceback_path
from trainbench.config import PROJECT_ROOT, to_spec
from trainbench.config.schema import CellConfig, CellLimits
from trainbench.locations import module_command
from trainbench.measure.timeline import mark
from trainbench.store import tracking
from trainbench.sweep import framework_log, slots
from trainbench.sweep.framework_log import FrameworkLog
from trainbench.sweep.job_states import JOB_STATES_ENV
from trainbench.sweep.oom_evidence import OomEvidence

if TYPE_CHECKING:
    from trainbench.cell.order import CellOrder
    from trainbench.sweep.cell_run import Store

STDERR_TAIL_LINES = 200
GRACE_S = 10  # how long a cell's process gets to write its result after SIGINT/SIGTERM
TIMED_OUT = -1000
STUCK_AT_CAP = -1001
HUNG = -1002
STORE_FAILED = -1003


def pinnable_cores() -> list[str]:
    """The cores this process may run on, by number, for cell.cpus to pin; none where the system pins no
    process to cores (macOS has no sched_setaffinity): there cell.cpus pins nothing."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def run_in_child(
    order: CellOrder,
    store: Store,
    run_id: str | None,
    search: dict[str, Any] | None = None,
    chatter: FrameworkLog | None = None,
) -> tuple[ProcessResult, str]:
    """Run the order's cell in a worker process (recording into run_id; None: records nothing), on the GPUs and cores it
    may use; return (its result, its stderr tail with the traceback of an expected failure). `search`: the
    batch_size=max search's limit and the probes so far (the process probes and records nothing; the probes
    it made before dying are in the result's `progress`). `chatter` keeps the frameworks' own log records."""
    cell = order.cell
    remove_abandoned_scratch()  # those of launchers killed with their cells
    remove_abandoned_shared_memory()  # what joblib's launcher left in /dev/shm when it was killed
    gpus_wanted = None if cell.device.name == "cpu" else (None if cell.device.count == "all" else cell.device.count)
    with (
        slots.take("gpu", gpus_wanted, slots.visible_gpus()) as gpus,
        slots.take("cpu", cell.cell.cpus, pinnable_cores()) as cores,
        tempfile.TemporaryDirectory(prefix=scratch_prefix()) as scratch,
    ):
        result_path = Path(scratch) / "result.json"
        spec_path = Path(scratch) / "spec.json"
        progress_path = Path(scratch) / "probes.json"
        if search is not None:
            search = {**search, "known": [asdict(p) for p in search["known"]], "progress_path": str(progress_path)}
        env = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else {}
        ready = _claim_prestarted(cell, env) if run_id and search is None and not cores else None
        events_read: int | None
        events_write: int | None
        if ready is not None:
            events_read, events_write = ready.events_read, ready.events_write
        else:
            events_read, events_write = os.pipe() if run_id else (None, None)
        spec_path.write_text(
            json.dumps(
                {
                    "order": order.to_dict(),
                    "run_id": run_id,
                    "tracking_uri": store.uri,
                    "result_path": str(result_path),
                    "parent_pid": os.getpid(),
                    "events_fd": events_write,
                    "cpus": [int(c) for c in cores] if cores else None,
                    "search": search,
                }
            )
        )
        activity = Activity()
        activity.store_uri = store.uri
        writer = None
        if run_id and events_read is not None and events_write is not None:
            events = os.fdopen(events_read, encoding="utf-8")
            writer = RunWriter(store.client, run_id, events, on_event=activity.touch, on_fault=activity.failed)
            writer.start()
        try:
            returncode, stderr_tail = _run_child(spec_path, cell.cell, env, events_write, activity, chatter, ready)
        except BaseException:
            if ready is not None and not ready.handed:  # it would wait for its spec until this process ends
                ready.child.kill()
                ready.child.wait()
            raise
        finally:
            if writer is not None:  # a server down at the cell's end is waited for (tracking.outage_s), then some
                writer.finish(timeout_s=cell.tracking.outage_s + DRAIN_MARGIN_S)
        if activity.fault is not None:  # the cell was stopped: nothing it recorded can reach the store
            raise activity.fault
        oom = activity.memory.verdict() if activity.memory is not None and returncode == -signal.SIGKILL else None
        result = read_result(result_path, returncode, cell.cell, oom)
        if search is not None and progress_path.exists():
            result["progress"] = json.loads(progress_path.read_text())
        kept = traceback_path(result_path)
        if kept.exists():
            stderr_tail += ("\n" if stderr_tail and not stderr_tail.endswith("\n") else "") + kept.read_text()
        lost = writer.lost() if writer is not None else 0
        if lost and result["outcome"] == "finished":  # its figures are not in the store: not a result
            result = {
                **result,
                "outcome": "failed",
                "reason": f"{lost} of the cell's records could not be written to the tracking store",
            }
        return result, stderr_tail


class Activity:
    """What the launcher's threads learn about a running cell: when its process last showed a sign of progress
    (an event, an output line: the hung watch), whether the store stopped accepting its records, and what ties
    a SIGKILL to memory (`memory`, watched by _wait on Linux)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.fault: tracking.StoreFailed | None = None
        self.memory: OomEvidence | None = None
        self.store_uri = ""  # the store its records go to: named when an outage outlasts tracking.outage_s

    def touch(self) -> None:
        self.last = time.monotonic()

    def failed(self, fault: tracking.StoreFailed) -> None:
        self.fault = fault


def _run_child(
    spec_path: Path,
    limits: CellLimits,
    extra_env: dict[str, str],
    events_fd: int | None,
    activity: Activity,
    chatter: FrameworkLog | None = None,
    ready: _Prestarted | None = None,
) -> tuple[int, str]:
    """Start the cell's process (or hand the spec to `ready`, one started before with its framework loaded), echo
    its stderr while keeping the tail; return (exit status, tail)."""
    env = _child_env(extra_env)
    tracking.configure_http_retries()
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
    mark("job: starting the cell's process")
    lines: Iterable[str]
    if ready is not None:
        child, lines = ready.child, iter(ready.lines.get, None)
        ready.hand_over(spec_path)
    else:
        passed = (events_fd,) if events_fd is not None else ()
        child = _spawn(module_command("trainbench.cell.worker", str(spec_path)), env, passed)
        assert child.stderr is not None
        lines = child.stderr
    if events_fd is not None:
        os.close(events_fd)  # the child holds the only writing end: its exit ends the stream
    try:
        reader = threading.Thread(target=_pump, args=(lines, tail, activity, chatter), daemon=True)
        reader.start()
        returncode = _wait(child, limits, activity)
        if returncode in (TIMED_OUT, STORE_FAILED):
            _stop(child, signal.SIGTERM)
        elif returncode in (STUCK_AT_CAP, HUNG):
            child.kill()  # stopped, deadlocked or in C code holding the GIL: no Python handler would run
            child.wait()
        reader.join(timeout=5)
        mark("job: the cell's process ended")
    except BaseException:
        # Ctrl-C on a terminal reached the child too; SIGTERM/SIGHUP of the sweep, or a kill of this
        # process's parent, did not: pass the stop on, wait for the child to record it, then insist.
        _stop(child, signal.SIGTERM)
        raise
    return returncode, "".join(tail)


def _child_env(extra_env: dict[str, str]) -> dict[str, str]:
    """The environment of a cell's process."""
    env = {**os.environ, **extra_env}
    # The child logs by run id; an inherited MLFLOW_RUN_ID (set by `mlflow run`) must not redirect it.
    env.pop("MLFLOW_RUN_ID", None)
    env.pop(ORDER_ENV, None)  # the job's order reaches the cell's process in its spec, as it reaches every rank
    env.pop(UNBLOCK_STOPS_ENV, None)
    env.pop(JOB_STATES_ENV, None)  # where the sweep's jobs say how far they got: the job's, never read by the cell
    # MLflow's import in this process replaces its telemetry session; the cell does not import MLflow to run
    env.pop("_MLFLOW_TELEMETRY_SESSION_ID", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _spawn(argv: list[str], env: dict[str, str], passed: tuple[int, ...], stdin: int | None = None) -> Any:
    """Start a cell's process with its stderr piped here."""
    env = dict(env)
    # The child inherits this thread's signal mask: with Ctrl-C blocked it starts deaf to it until its handlers are
    # set (worker.py's first lines unblock it, and one that came meanwhile is taken then, not lost). Where Ctrl-C is
    # already blocked (a joblib launcher's workers: it is the sweep's alone) it stays blocked.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    if signal.SIGINT not in blocked:
        env[UNBLOCK_STOPS_ENV] = "1"
    try:
        return subprocess.Popen(
            argv, env=env, stdin=stdin, stderr=subprocess.PIPE, text=True, errors="replace", pass_fds=passed
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@dataclass
class _Prestarted:
    """A cell's process started before its run exists, loading its framework while the sweep opens the store and
    creates the run: it computes nothing until it is handed the cell's spec (with the run's id), and exits,
    recording nothing, when it is not (its stdin closes)."""

    child: Any  # subprocess.Popen[str]
    cell_key: str  # the cell it loads the framework for, as its spec (JSON)
    env: dict[str, str]
    cwd: str
    events_read: int
    events_write: int
    lines: queue.Queue[str | None]  # its stderr so far (read from its start: a full pipe would block its import)
    handed: bool = False

    def hand_over(self, spec_path: Path) -> None:
        assert self.child.stdin is not None
        self.handed = True
        self.child.stdin.write(f"{spec_path}\n")
        self.child.stdin.close()

    def discard(self) -> None:
        self.child.kill()  # it holds no run and wrote nothing: nothing to record
        self.child.wait()
        for fd in (self.events_read, self.events_write):
            with contextlib.suppress(OSError):
                os.close(fd)


_prestarted: _Prestarted | None = None


def prestart(cell: CellConfig) -> None:
    """Start the process of a cell that is about to run, here, before its run exists, so that its framework loads
    (seconds) while the sweep imports MLflow and creates the run. The first cell whose process starts here uses
    it if it is this cell in this environment (run_in_child); otherwise it is discarded then, or by
    discard_prestarted. Only for a cell of one process with no cores, memory cap or batch search to set first."""
    global _prestarted
    single = cell.framework.rank_launcher is None or cell.device.count == 1 or cell.device.name == "cpu"
    if (
        _prestarted is not None
        or cell.cell.cpus
        or cell.cell.memory_limit_mb
        or cell.batch_size == "max"
        or cell.device.nodes != 1
        or not single
    ):
        return
    from trainbench.sweep import launchers

    tracking.configure_store_environment()  # as the store's opening will have, by the time the cell starts
    launchers.mark_sweep_process()  # as the launcher will have marked this process by then
    env = _child_env({})
    events_read, events_write = os.pipe()
    key = json.dumps(to_spec(cell), sort_keys=True)
    child = _spawn(module_command("trainbench.cell.worker", PRELOAD_ARG), env, (events_write,), stdin=subprocess.PIPE)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_collect, args=(child.stderr, lines), daemon=True).start()
    _prestarted = _Prestarted(child, key, env, os.getcwd(), events_read, events_write, lines)
    assert child.stdin is not None
    child.stdin.write(key + "\n")
    child.stdin.flush()
    mark("parent: cell's process prestarted")


def discard_prestarted() -> None:
    """End the prestarted process if no cell took it."""
    global _prestarted
    if _prestarted is not None:
        _prestarted.discard()
        _prestarted = None


def _claim_prestarted(cell: CellConfig, extra_env: dict[str, str]) -> _Prestarted | None:
    """The prestarted process, if it loaded this cell's framework in the environment this cell's process would get;
    None otherwise (and then it is ended: one that loaded another cell's framework must not run this one)."""
    global _prestarted
    ready, _prestarted = _prestarted, None
    if ready is None:
        return None
    usable = (
        ready.child.poll() is None
        and ready.cell_key == json.dumps(to_spec(cell), sort_keys=True)
        and ready.env == _child_env(extra_env)
        and ready.cwd == os.getcwd()
    )
    if not usable:
        ready.discard()
        mark("job: the prestarted process does not fit this cell: discarded")
        return None
    return ready


def _collect(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _wait(child: subprocess.Popen[str], limits: CellLimits, activity: Activity) -> int:
    """The child's exit status; TIMED_OUT past cell.timeout_s; STUCK_AT_CAP when it spins at its memory cap;
    HUNG when it showed no progress for cell.hung_after_s."""
    timeout_s, memory_limit_mb = limits.timeout_s, limits.memory_limit_mb
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    watch = _CapWatch(child.pid, memory_limit_mb) if memory_limit_mb and sys.platform.startswith("linux") else None
    hung = _HungWatch(child.pid, limits.hung_after_s, activity) if limits.hung_after_s else None
    if sys.platform.startswith("linux"):
        activity.memory = OomEvidence(child.pid)
    while True:
        if activity.memory is not None:
            activity.memory.sample()
        wait_s = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        try:
            return child.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            return TIMED_OUT
        if watch is not None and watch.stuck():
            return STUCK_AT_CAP
        if hung is not None and hung.hung():
            return HUNG
        if activity.fault is None and tracking.OUTAGE.overdue():  # the writer may hang in a request: end it now
            activity.failed(tracking.OUTAGE.fault(activity.store_uri))
        if activity.fault is not None:
            return STORE_FAILED


class _HungWatch:
    """Notices a cell's process that has stopped making progress: no event over its pipe, no line on its error
    output and no CPU time used (by it or its children) for cell.hung_after_s. A stopped process (SIGSTOP, a
    debugger), a deadlock or a wait that never returns look like this; a compile, a warm-up or a long timed
    epoch keeps at least a core busy. Its run's heartbeat, written from another thread of another process,
    says nothing about it."""

    BUSY_S = 0.05  # CPU seconds per check (about one) that count as work: a watcher thread's wake-ups use less

    def __init__(self, pid: int, hung_after_s: float, activity: Activity) -> None:
        self.pid, self.hung_after_s, self.activity = pid, hung_after_s, activity
        self.cpu_s = self._cpu_s()

    def hung(self) -> bool:
        cpu_s = self._cpu_s()
        if cpu_s is not None and self.cpu_s is not None and cpu_s - self.cpu_s > self.BUSY_S:
            self.activity.touch()
        self.cpu_s = cpu_s
        return time.monotonic() - self.activity.last > self.hung_after_s

    def _cpu_s(self) -> float | None:
        import psutil

        try:
            process = psutil.Process(self.pid)
            tree = [process, *process.children(recursive=True)]
            return sum(sum(p.cpu_times()[:2]) for p in tree)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None


class _CapWatch:
    """Notices a cell's process spinning at cell.memory_limit_mb. Some native libraries retry a failed
    allocation forever instead of failing (OpenBLAS, loaded by scikit-learn/SciPy, loops on mmap): such a
    process sits at its cap, burning CPU almost only in the kernel. Seen for STUCK_WINDOW_S in a row, it is
    stopped and recorded as out of memory, rather than hanging until cell.timeout_s (or forever)."""

    NEAR_CAP_MB = 64  # the largest request such loops make is 32 MB (OpenBLAS's buffer)
    # Its time goes to the failing mmap, almost all of it in the kernel; a process computing at its cap spends
    # its time in user space.
    KERNEL_SHARE = 0.75
    STUCK_WINDOW_S = 15

    def __init__(self, pid: int, limit_mb: int) -> None:
        self.pid, self.limit_kb = pid, limit_mb * 1024
        self.samples: collections.deque[tuple[float, int, int]] = collections.deque()

    def stuck(self) -> bool:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return False
        data_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmData:")), 0)
        if data_kb < self.limit_kb - self.NEAR_CAP_MB * 1024:
            self.samples.clear()
            return False
        now, user, kernel = time.monotonic(), int(fields[11]), int(fields[12])  # utime, stime (clock ticks)
        self.samples.append((now, user, kernel))
        first = self.samples[0]
        if now - first[0] < self.STUCK_WINDOW_S:
            return False
        used = (user - first[1]) + (kernel - first[2])
        ticks = os.sysconf("SC_CLK_TCK") * (now - first[0])
        return used > 0.1 * ticks and (kernel - first[2]) >= self.KERNEL_SHARE * used  # busy, not asleep


def _pump(
    stream: Iterable[str], tail: collections.deque[str], activity: Activity, chatter: FrameworkLog | None
) -> None:
    """Echo the cell's stderr (credentials redacted: MLflow's errors quote the store's URI) and keep its tail;
    the frameworks' own log records go to `chatter` instead (trainbench.sweep.framework_log says which)."""
    quiet = not tracking.verbose()
    label = progress.label()
    said_by_framework = framework_log.Chatter()
    for line in stream:
        activity.touch()
        own = said_by_framework(line)
        if own and chatter is not None:
            chatter.keep(line)
        if not (quiet and own and not framework_log.is_fatal(line)):
            sys.stderr.write(f"[{label}] {tracking.redact(line)}" if label else tracking.redact(line))
        tail.append(line)


def _stop(child: subprocess.Popen[str], first: signal.Signals) -> None:
    """Ask politely (the child then records its own outcome), then insist."""
    for sig in (first, signal.SIGKILL):
        if child.poll() is not None:
            return
        child.send_signal(sig)
        try:
            child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue


def read_result(path: Path, returncode: int, limits: CellLimits, oom: str | None = None) -> ProcessResult:
    """The cell's outcome: its own result when it wrote one (even if the timeout fired just as it finished),
    else what its exit status says. `oom`: what ties a SIGKILL to the kernel's out-of-memory killer
    (OomEvidence.verdict), None where nothing does: the sender is then unknown."""
    timeout_s, memory_limit_mb = limits.timeout_s, limits.memory_limit_mb
    if path.exists():
        result: ProcessResult = json.loads(path.read_text())
        if returncode != TIMED_OUT or result.get("outcome") == "finished":
            return _blame_memory_limit(result, memory_limit_mb)
    if returncode == TIMED_OUT:
        return {"outcome": "failed", "reason": f"timed out after {timeout_s:g} s (cell.timeout_s) and was stopped"}
    if returncode == HUNG:
        return {
            "outcome": "hung",
            "reason": f"no progress for {limits.hung_after_s:g} s (no event, no output, no CPU time: stopped or "
            "deadlocked) and was stopped (cell.hung_after_s)",
        }
    if returncode == STUCK_AT_CAP:
        return {
            "outcome": "failed",
            "failure": "oom",
            "memory": "host",
            "reason": f"stopped after {_CapWatch.STUCK_WINDOW_S} s stuck at cell.memory_limit_mb={memory_limit_mb}, "
            "retrying an allocation that cannot succeed: raise the limit",
        }
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = ""
        if name == "SIGKILL" and oom:
            return {
                "outcome": "failed",
                "failure": "oom",
                "memory": "host",
                "reason": f"cell process killed by the kernel's out-of-memory killer (SIGKILL, and {oom}): try a "
                "smaller batch_size, or cell.memory_limit_mb to fail it sooner",
            }
        if name == "SIGKILL":
            hint = " (sender unknown)"
        return _blame_memory_limit(
            {"outcome": "failed", "reason": f"cell process killed by {name}{hint}"}, memory_limit_mb, died=True
        )
    return _blame_memory_limit(
        {"outcome": "failed", "reason": f"cell process exited with status {returncode} without a result"},
        memory_limit_mb,
        died=True,
    )


def _blame_memory_limit(result: ProcessResult, limit_mb: int | None, died: bool = False) -> ProcessResult:
    """Under cell.memory_limit_mb, a failure to allocate shows up in many disguises (MemoryError, an
    ImportError of a library that could not map itself, SIGSEGV or SIGABRT from an allocator): tag it oom."""
    if not limit_mb or result.get("outcome") != "failed" or result.get("memory") == "device":
        return result
    reason = (result.get("reason") or "").lower()
    # A thread's stack counts against the cap too: "can't start new thread", pthread_create's EAGAIN.
    allocation = any(
        word in reason
        for word in (
            "memory",
            "alloc",
            "mmap",
            "importerror",
            "cannot map",
            "oserror",
            "new thread",
            "resource temporarily unavailable",
        )
    )
    if died or allocation or result.get("failure") == "oom":
        result = {
            **result,
            "failure": "oom",
            "memory": "host",
            "reason": f"{result.get('reason')} (over cell.memory_limit_mb={limit_mb}, most likely)",
        }
    return result
