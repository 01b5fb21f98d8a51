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
not to the terminal (trainbench.sweep.framework_log); the run's description leads with its figures
(trainbench.run_description).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from trainbench import progress, run_description, stops
from trainbench.cell import batch_probes, batch_search
from trainbench.cell.batch_search import Probe, SearchFailed
from trainbench.cell.in_cell import ProcessResult
from trainbench.cell.order import CellOrder
from trainbench.config import CellConfig, params, to_spec
from trainbench.measure import device_probe, hardware
from trainbench.measure.timeline import mark
from trainbench.store import tracking
from trainbench.store.runs import tag_setting_name
from trainbench.sweep import framework_log, liveness, scaling
from trainbench.sweep.cell_process import run_in_child
from trainbench.sweep.framework_log import FrameworkLog
from trainbench.tasks.base import task_of


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


def run_cell(order: CellOrder, store: Store) -> CellResult:
    """Create the cell's run, run the cell in its own process, close the run with the outcome. `order`: what the
    sweep's owner decided about the cell (trainbench.cell.order); `store`: the client of its store."""
    swallowed = stops.unanswered()
    if swallowed is not None:  # a stop that a library's bare except took: no further cell starts
        raise Stopped(swallowed)
    cell = task_of(order.cell).prepared(order.cell)
    index, name = order.index, order.name
    mark("job: started")
    progress.phase("recording the cell's settings in its run, starting the cell's process")
    run_id = _create_run(order, cell, store, name)
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
                    cell = _with_max_batch(order.running(cell), store, run_id, chatter)
                with _system_metrics(store, run_id, cell.tracking.system_metrics_interval_s):
                    result, stderr_tail = run_in_child(order.running(cell), store, run_id, chatter=chatter)
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
        _attempt(lambda: _tag_host_if_untagged(store, run_id))
        _attempt(lambda: tag_setting_name(store.client, run_id))
        _attempt(lambda: run_description.write(store.client, run_id, outcome, reason))
        _attempt(lambda: tracking.close(store.client, run_id, outcome, reason))
    if result.get("backend"):
        name = order.name_on(result["backend"])
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
        sys.stderr.write(f"trainbench: could not write to the tracking store: {tracking.private_line(error)}\n")


def _create_run(order: CellOrder, cell: CellConfig, store: Store, name: str) -> str:
    """The cell's run, with the tags its order asks for and the software this process runs. The machine's hw.*
    tags are the cell's process's to write (_tag_host_if_untagged)."""
    tags = {
        **order.tags,
        "trainbench.outcome": "running",
        "git.commit": tracking.git_commit(),
        "sw.python": sys.version.split()[0],
        "sw.mlflow": _version("mlflow"),
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
        shown = to_spec(cell)["cell"]
        store.client.log_text(run_id, tracking.private(yaml.safe_dump(shown, sort_keys=False)), "config.yaml")
        store.client.log_text(run_id, tracking.private("\n".join(order.overrides) + "\n"), "overrides.txt")
        store.client.log_text(run_id, tracking.installed_packages(), "requirements-freeze.txt")
    except tracking.StoreFailed as fault:  # e.g. its artifact folder is read-only while its database is not
        why = str(fault)
        _attempt(lambda: tracking.close(store.client, run_id, "failed", why))
        raise
    return run_id


def _tag_host_if_untagged(store: Store, run_id: str) -> None:
    """The machine's hw.* tags (and sw.cuda_driver, sw.rocm) are written once, by the cell's process, probed as it
    binds its device (this process's probe may be a sweep old, and sees every GPU where the cell sees its own).
    A run whose cell wrote none (no such device here, batch_size=max found nothing that fits, a process that died
    before binding) gets this process's: every run says which machine it was on, for the report and sweep.resume."""
    if "hw.label" not in store.client.get_run(run_id).data.tags:
        tracking.set_tags(store.client, run_id, hardware.host_tags())


def _with_max_batch(order: CellOrder, store: Store, run_id: str, chatter: FrameworkLog) -> CellConfig:
    """Search the largest batch that fits (trainbench.cell.batch_search), record it and the search, return
    the cell with that batch size. Raises SearchFailed when a probe fails for another reason or nothing fits.

    Each process the search starts (trainbench.cell.batch_probes) goes on from the probes made so far, and
    probes in itself for as long as its framework allows: all of them (PyTorch on CUDA), or one."""
    from trainbench.config import replace

    cell = order.cell
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
        result, _ = run_in_child(order, store, None, {"limit": limit, "known": probes}, chatter)
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


def _memory_of(cell: CellConfig) -> str:
    """Whose memory a cell that ran out of it ran out of, when its process cannot say: its device's."""
    return "host" if cell.device.name == "cpu" else "device"


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
            sys.stderr.write(f"trainbench: system metrics off: {tracking.private_line(error)}\n")
            monitor = None
    try:
        yield
    finally:
        if monitor is not None:
            with contextlib.suppress(Exception):
                monitor.finish()


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return ""
