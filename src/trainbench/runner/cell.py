"""Run one cell in a process of its own and record it in MLflow, whatever happens to that process.

This runs inside a sweep's job (in the sweep's process, or a launcher's worker on this or another machine).
It creates the cell's run first (params, tags, config artifacts), so a cell that dies at import time is
still on record; keeps the run's heartbeat while the cell runs; and always closes the run with an outcome:
  finished     the cell's process wrote a result saying so
  unavailable  no such device here (reason says what was checked): found by the cell's framework in its
               process, or before starting one (trainbench.measure.device_probe: no GPU driver at all)
  failed       the process raised (reason: exception class and message), or died without a result:
               abort, segfault, the OOM killer (reason: the signal), or a timeout; stderr tail attached
  killed       the sweep was stopped (Ctrl-C, SIGTERM, SIGHUP), or the launching process died
A cell that did not finish prints one line as it ends (outcome_line). Running out of memory, a missing device,
a timeout or a stop is expected, and prints no traceback. The run's stderr_tail.txt keeps the traceback of an
out-of-memory error. The frameworks' own log lines (TensorFlow's, XLA's, absl's) go to the run's framework_log.txt,
not to the terminal (trainbench.runner.framework_log); the run's description leads with its figures
(trainbench.run_description).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from trainbench import progress, run_description, stops, suite
from trainbench.config import PROJECT_ROOT, CellConfig, config_hash, params, to_spec
from trainbench.config.schema import CellLimits
from trainbench.measure import device_probe, hardware
from trainbench.measure.timeline import mark
from trainbench.runner import batch_probes, batch_search, framework_log, liveness, names, scaling, slots
from trainbench.runner.batch_search import Probe, SearchFailed
from trainbench.runner.events import DRAIN_MARGIN_S, RunWriter
from trainbench.runner.framework_log import FrameworkLog
from trainbench.runner.in_cell import ProcessResult
from trainbench.runner.oom_evidence import OomEvidence
from trainbench.runner.orphan import remove_abandoned_scratch, remove_abandoned_shared_memory, scratch_prefix
from trainbench.runner.worker import UNBLOCK_STOPS_ENV, traceback_path
from trainbench.store import tracking
from trainbench.store.runs import tag_setting_name
from trainbench.tasks.base import task_of

STDERR_TAIL_LINES = 200
GRACE_S = 10  # how long a cell's process gets to write its result after SIGINT/SIGTERM
TIMED_OUT = -1000
STUCK_AT_CAP = -1001
HUNG = -1002
STORE_FAILED = -1003


@dataclass(frozen=True)
class CellResult:
    index: int
    name: str
    outcome: str
    samples_per_s: float | None
    reason: str | None
    run_id: str | None
    peak_tflops: float | None = None  # matmul cells

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Store:
    """Where a cell's run goes: the tracking client, its URI, the experiment and the sweep's parent run."""

    client: Any
    uri: str
    experiment_id: str
    parent_run_id: str | None
    sweep_id: str | None


class Stopped(KeyboardInterrupt):
    """The sweep was told to stop (SIGINT, SIGTERM or SIGHUP): unwinds like Ctrl-C, remembering the signal."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def reason(self) -> str:
        what = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
        return f"the sweep was stopped by {what.get(signal.Signals(self.signum), signal.Signals(self.signum).name)}"


def run_cell(cell: CellConfig, store: Store, overrides: list[str]) -> CellResult:
    """Create the cell's run, run the cell in its own process, close the run with the outcome."""
    swallowed = stops.unanswered()
    if swallowed is not None:  # a stop that a library's bare except took: no further cell starts
        raise Stopped(swallowed)
    task = task_of(cell)
    cell = task.prepared(cell)
    index, suffix = cell.launch.index, cell.launch.name_suffix
    name = task.run_name(cell, names.shown_device(cell.device.name)) + suffix
    mark("job: started")
    progress.phase("recording the cell's settings in its run, starting the cell's process")
    run_id = _create_run(cell, store, overrides, name)
    mark("job: run created")
    outcome: str = "failed"
    reason: str | None = "the cell's launcher stopped unexpectedly"
    result: ProcessResult = {}
    chatter = FrameworkLog()
    try:
        absent = device_probe.absent(cell.device.name)
        if absent is not None:  # this machine cannot have the device: no process need import a framework to see it
            result, stderr_tail = {"outcome": "unavailable", "reason": absent}, ""
        else:
            with liveness.Heartbeat(store.client, run_id, cell.sweep.heartbeat_s):
                if cell.batch_size == "max":
                    cell = _with_max_batch(cell, store, run_id, chatter)
                with _system_metrics(store, run_id, cell.tracking.system_metrics_interval_s):
                    result, stderr_tail = _run_in_child(cell, store, run_id, suffix, chatter=chatter)
        outcome, reason = str(result["outcome"]), result.get("reason")
        if outcome == "finished":
            scaling.record(store.client, run_id, cell, result)
        if outcome == "failed" and stderr_tail:
            _attempt(lambda: store.client.log_text(run_id, tracking.private(stderr_tail), "stderr_tail.txt"))
        if result.get("failure"):
            _attempt(lambda: tracking.set_tags(store.client, run_id, {"trainbench.failure": result["failure"]}))
    except SearchFailed as error:
        outcome, reason = error.outcome, str(error)
        if error.memory:
            result = {"failure": "oom", "memory": error.memory}
    except tracking.StoreFailed as fault:  # closing it is tried below: the store may still take that write
        reason = str(fault)
        raise
    except Stopped as stop:
        outcome, reason = "killed", stop.reason
        tracking.OUTAGE.stop_waiting()  # closing the run must not wait out a server that is down
        raise
    except KeyboardInterrupt:
        outcome, reason = "killed", Stopped().reason
        tracking.OUTAGE.stop_waiting()
        raise
    except BaseException as error:
        reason = f"the cell's launcher failed: {type(error).__name__}: {error}"
        raise
    finally:
        if kept := chatter.text():
            _attempt(lambda: store.client.log_text(run_id, tracking.private(kept), framework_log.ARTIFACT))
        _attempt(lambda: tag_setting_name(store.client, run_id))
        _attempt(lambda: run_description.write(store.client, run_id, outcome, reason))
        _attempt(lambda: tracking.close(store.client, run_id, outcome, reason))
    if result.get("backend"):
        name = task.run_name(cell, result["backend"]) + suffix
    if outcome != "finished":
        print(outcome_line(name, outcome, reason, result, cell), file=sys.stderr, flush=True)
    return CellResult(index, name, outcome, result.get("samples_per_s"), reason, run_id, result.get("peak_tflops"))


def outcome_line(name: str, outcome: str, reason: str | None, result: ProcessResult, cell: CellConfig) -> str:
    """The one line the terminal shows for a cell that did not finish (the run has the reason in full, and the
    traceback, if any, in stderr_tail.txt): what ran out and what to try, for running out of memory; the
    outcome and its reason otherwise."""
    reason = tracking.private(reason or "no reason recorded")
    if result.get("failure") != "oom":
        return f"trainbench: {name} {outcome}: {reason}"
    device = result.get("memory", _memory_of(cell)) == "device"
    what = "GPU memory" if device else "host memory"
    if cell.batch_size == "max":
        tries = ["mixed precision (precision=mixed_bf16)", "a smaller model", "more devices"]
    else:
        tries = ["a smaller batch_size", "batch_size=max"]
    if not device and cell.cell.memory_limit_mb:
        tries.append(f"more than cell.memory_limit_mb={cell.cell.memory_limit_mb}")
    advice = ", ".join(tries[:-1]) + ", or " + tries[-1]
    return f"trainbench: {name} ran out of {what} ({batch_probes.short_memory_reason(reason)}); try {advice}"


def _attempt(call: Any) -> None:
    """A store write on the way out: one failure must not stop the run from being closed. A store that stopped
    accepting writes is reported once, by the sweep."""
    try:
        call()
    except tracking.StoreFailed:
        return
    except Exception as error:
        sys.stderr.write(f"trainbench: could not write to the tracking store: {tracking.private(str(error))[:200]}\n")


def _create_run(cell: CellConfig, store: Store, overrides: list[str], name: str) -> str:
    tags = {
        "trainbench.kind": "cell",
        "trainbench.framework": cell.framework.name,
        "trainbench.device": cell.device.name,
        "trainbench.config_hash": config_hash(cell),
        "trainbench.outcome": "running",
        "trainbench.sweep_id": store.sweep_id,
        "trainbench.cell_index": cell.launch.index,
        "trainbench.compile": str(cell.optimize.compile).lower(),
        **task_of(cell).tags(cell),
        **suite.tags(),
        "git.commit": tracking.git_commit(),
        "sw.python": sys.version.split()[0],
        "sw.mlflow": _version("mlflow"),
        **hardware.host_tags(),
        **liveness.alive_tags(),
    }
    if store.parent_run_id:
        tags["mlflow.parentRunId"] = store.parent_run_id
    run = store.client.create_run(
        store.experiment_id, run_name=name, tags={k: tracking.private(str(v)) for k, v in tags.items() if v is not None}
    )
    run_id = str(run.info.run_id)
    try:
        tracking.log_params(store.client, run_id, params(cell))
        spec = to_spec(cell)
        shown = {k: v for k, v in spec["cell"].items() if k != "launch"}
        store.client.log_text(run_id, tracking.private(yaml.safe_dump(shown, sort_keys=False)), "config.yaml")
        store.client.log_text(run_id, tracking.private("\n".join(overrides) + "\n"), "overrides.txt")
        store.client.log_text(run_id, tracking.installed_packages(), "requirements-freeze.txt")
    except tracking.StoreFailed as fault:  # e.g. its artifact folder is read-only while its database is not
        why = str(fault)
        _attempt(lambda: tracking.close(store.client, run_id, "failed", why))
        raise
    return run_id


def _with_max_batch(cell: CellConfig, store: Store, run_id: str, chatter: FrameworkLog) -> CellConfig:
    """Search the largest batch that fits (trainbench.runner.batch_search), record it and the search, return
    the cell with that batch size. Raises SearchFailed when a probe fails for another reason or nothing fits.

    Each process the search starts (trainbench.runner.batch_probes) goes on from the probes made so far, and
    probes in itself for as long as its framework allows: all of them (PyTorch on CUDA), or one."""
    from trainbench.config import replace

    started = time.monotonic()
    limit = cell.cell.max_batch_size
    probes: list[Probe] = []
    processes = 0
    found: dict[str, Any] = {}
    progress.phase(
        f"batch_size=max: searching the largest batch that fits, up to cell.max_batch_size={limit} (each probe: "
        f"{batch_probes.PROBE_WARMUP_STEPS + 1} training steps, not recorded)"
    )
    while not found:
        processes += 1
        result, _ = _run_in_child(cell, store, None, "", {"limit": limit, "known": probes}, chatter)
        finished = result["outcome"] == "finished"
        made = [Probe(**fields) for fields in (result["search"]["probes"] if finished else result.get("progress", []))]
        new = [p for p in made if p.batch_size not in {k.batch_size for k in probes}]
        if not finished:
            pending = batch_search.next_batch([*probes, *new], limit)
            if result.get("failure") != "oom" or pending is None:
                raise SearchFailed(
                    f"batch_size=max: the probe at batch {pending} failed ({result.get('reason')})",
                    "unavailable" if result["outcome"] == "unavailable" else "failed",
                )
            # The process died of it (the kernel's out-of-memory killer, cell.memory_limit_mb): that batch does not fit
            new.append(Probe(pending, False, result.get("reason")))
            progress.line(f"  batch_size=max: {batch_probes.describe(new[-1])}")
        for probe in new:
            tracking.log_metrics(
                store.client, run_id, {"batch_size_probe_fits": float(probe.fits)}, step=probe.batch_size
            )
        if not new:  # every process probes at least once: never so, but a loop must not hang on it
            raise SearchFailed("batch_size=max: a probing process made no probe")
        probes = [*probes, *new]
        if finished and result["search"]["best"] is not None:
            found = result["search"]
    best, search_s = int(found["best"]), time.monotonic() - started
    figures = {
        "batch_size_probes": len(probes),
        "batch_size_search_processes": processes,
        "batch_size_search_s": search_s,
    }
    if found.get("estimate") is not None:
        figures["batch_size_estimate"] = found["estimate"]
    if best == 0:
        tracking.log_metrics(store.client, run_id, figures)
        tracking.set_tags(store.client, run_id, {"trainbench.failure": "oom"})
        backend = found.get("backend")
        memory = "host" if backend == "cpu" else "device" if backend else _memory_of(cell)
        raise SearchFailed(batch_probes.NOTHING_FITS + str(probes[-1].reason), memory=memory)
    chosen, peak = next(p for p in probes if p.batch_size == best), ""
    if chosen.peak_mb is not None and chosen.capacity_mb:
        peak = f", peak {chosen.peak_mb / 1024:.1f} of {chosen.capacity_mb / 1024:.1f} GiB"
        # what the headroom left: the cell's run needs more than its probe's two steps
        figures["batch_size_peak_mb"] = chosen.peak_mb
        figures["batch_size_capacity_mb"] = chosen.capacity_mb
        figures["batch_size_headroom"] = batch_search.HEADROOM
    above = min((p for p in probes if p.batch_size > best), key=lambda p: p.batch_size, default=None)
    if best == limit or above is None:
        why = f"the limit, cell.max_batch_size={limit}"
    elif above.fits:
        why = f"{above.batch_size} peaks over {1 - batch_search.HEADROOM:.0%} of the memory"
    else:
        why = f"{above.batch_size} does not fit"
    progress.line(
        f"  batch_size=max: {best} ({why}), {len(probes)} probes in {processes} process(es), {search_s:.1f} s{peak}"
    )
    tracking.log_metrics(store.client, run_id, {"max_batch_size": best, **figures})
    tracking.set_tags(store.client, run_id, {"trainbench.batch_size": best, "trainbench.batch_size_search": "max"})
    return replace(cell, batch_size=best)


def pinnable_cores() -> list[str]:
    """The cores this process may run on, by number, for cell.cpus to pin; none where the system pins no
    process to cores (macOS has no sched_setaffinity): there cell.cpus pins nothing."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def _memory_of(cell: CellConfig) -> str:
    """Whose memory a cell that ran out of it ran out of, when its process cannot say: its device's."""
    return "host" if cell.device.name == "cpu" else "device"


def _run_in_child(
    cell: CellConfig,
    store: Store,
    run_id: str | None,
    name_suffix: str,
    search: dict[str, Any] | None = None,
    chatter: FrameworkLog | None = None,
) -> tuple[ProcessResult, str]:
    """Run `cell` in a worker process (recording into run_id; None: records nothing), on the GPUs and cores it
    may use; return (its result, its stderr tail with the traceback of an expected failure). `search`: the
    batch_size=max search's limit and the probes so far (the process probes and records nothing; the probes
    it made before dying are in the result's `progress`). `chatter` keeps the frameworks' own log records."""
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
        events_read, events_write = os.pipe() if run_id else (None, None)
        spec_path.write_text(
            json.dumps(
                {
                    "cell": to_spec(cell),
                    "run_id": run_id,
                    "tracking_uri": store.uri,
                    "result_path": str(result_path),
                    "parent_pid": os.getpid(),
                    "name_suffix": name_suffix,
                    "events_fd": events_write,
                    "cpus": [int(c) for c in cores] if cores else None,
                    "search": search,
                }
            )
        )
        env = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else {}
        activity = Activity()
        activity.store_uri = store.uri
        writer = None
        if run_id and events_read is not None and events_write is not None:
            events = os.fdopen(events_read, encoding="utf-8")
            writer = RunWriter(store.client, run_id, events, on_event=activity.touch, on_fault=activity.failed)
            writer.start()
        try:
            returncode, stderr_tail = _run_child(spec_path, cell.cell, env, events_write, activity, chatter)
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
) -> tuple[int, str]:
    """Start the cell's process, echo its stderr while keeping the tail; return (exit status, tail)."""
    env = {**os.environ, **extra_env}
    # The child logs by run id; an inherited MLFLOW_RUN_ID (set by `mlflow run`) must not redirect it.
    env.pop("MLFLOW_RUN_ID", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    tracking.configure_http_retries()
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
    mark("job: starting the cell's process")
    passed = (events_fd,) if events_fd is not None else ()
    # The child inherits this thread's signal mask: with Ctrl-C blocked it starts deaf to it until its handlers are
    # set (worker.py's first lines unblock it, and one that came meanwhile is taken then, not lost). Where Ctrl-C is
    # already blocked (a joblib launcher's workers: it is the sweep's alone) it stays blocked.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    if signal.SIGINT not in blocked:
        env[UNBLOCK_STOPS_ENV] = "1"
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "trainbench.runner.worker", str(spec_path)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            pass_fds=passed,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if events_fd is not None:
        os.close(events_fd)  # the child holds the only writing end: its exit ends the stream
    try:
        reader = threading.Thread(target=_pump, args=(child.stderr, tail, activity, chatter), daemon=True)
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
    # Its time goes to the failing mmap: 84% in the kernel on one 6.18 kernel, over 90% on others;
    # a process computing at its cap spends its time in user space.
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


@contextlib.contextmanager
def _system_metrics(store: Store, run_id: str, interval_s: float) -> Iterator[None]:
    """MLflow's own system metrics (CPU, memory, GPU via NVML) sampled from here into the cell's run while
    the cell's process runs: they describe the machine, not a process, so the cell need not import MLflow."""
    monitor = None
    if interval_s:
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            monitor = SystemMetricsMonitor(
                run_id, sampling_interval=interval_s, samples_before_logging=1, tracking_uri=store.uri
            )
            monitor.start()
        except Exception as error:  # optional: a cell must not fail because monitoring could not start
            sys.stderr.write(f"trainbench: system metrics off: {tracking.private(str(error))[:200]}\n")
            monitor = None
    try:
        yield
    finally:
        if monitor is not None:
            with contextlib.suppress(Exception):
                monitor.finish()


def _pump(stream: Any, tail: collections.deque[str], activity: Activity, chatter: FrameworkLog | None) -> None:
    """Echo the cell's stderr (credentials redacted: MLflow's errors quote the store's URI) and keep its tail;
    the frameworks' own log records go to `chatter` instead (trainbench.runner.framework_log says which)."""
    quiet = not tracking.verbose()
    label = progress.label()
    for line in stream:
        activity.touch()
        own = framework_log.is_chatter(line)
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


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return ""
