"""What runs inside a cell's own process, however it was started: by the worker (trainbench.cell.worker), as
one rank of a data-parallel cell (trainbench.cell.ranks), or as a batch_size=max probe
(trainbench.cell.batch_probes). Each of those imports this module; it imports none of them.

Light: no framework import at module level (the worker imports it before its stop handlers are even set).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

PARENT_DIED = signal.SIGUSR2  # sent by the kernel (Linux) or the watch thread when the parent dies
PARENT_CHECK_S = 1.0
# The backend the cell's framework selected (cpu, cuda, mps, ...), None before: says whose memory ran out.
selected_backend: str | None = None


class CellSummary(TypedDict):
    """What a cell that ran tells its launcher beside its figures (those go to the run): `run`'s return."""

    backend: str
    samples_per_s: float | None
    peak_tflops: float | None
    num_devices: int
    hw_label: str
    framework_version: str


class ProcessResult(TypedDict, total=False):
    """RESULT, the JSON a cell's process writes for its launcher (trainbench.sweep.cell_run), and what the launcher
    makes of a process that wrote none: the outcome and its reason, what ran out, and a cell's summary
    (CellSummary's keys) or batch_size=max's search (trainbench.cell.batch_probes.search)."""

    outcome: str  # finished, failed, killed, unavailable, hung
    reason: str | None
    failure: str  # oom or error
    memory: str  # whose memory ran out: device or host
    search: dict[str, Any]
    progress: list[dict[str, Any]]  # batch_size=max: the probes a process made before it stopped
    backend: str
    samples_per_s: float | None
    peak_tflops: float | None
    num_devices: int
    hw_label: str
    framework_version: str


def run(order: Any, log: Any) -> CellSummary:
    """Bind the device, tag what runs where, run the task, add memory figures; return the summary. `order`: the
    cell's trainbench.cell.order.CellOrder, its cell as it runs."""
    from trainbench import frameworks, progress
    from trainbench.measure import hardware
    from trainbench.measure.timeline import mark
    from trainbench.tasks.base import DeviceInfo, task_of

    global selected_backend
    cell = order.cell
    load_at_start = host_load()
    progress.phase(f"loading {cell.framework.name} and its device ({cell.device.name})")
    framework = frameworks.load(cell)
    mark("cell: framework imported")
    device = framework.bind(cell.device)
    backend = selected_backend = device.backend
    described = framework.describe()
    mark("cell: device selected")
    # The machine's tags are this process's to write, probed here: the parent's probe may be a sweep old (power
    # source). hw.label goes in the same write: the launcher reads it as "the cell wrote its machine".
    host = hardware.host_tags()
    mark("cell: hardware probed")
    label = hardware.label(backend, host)
    task = task_of(cell)
    log.tags(
        {
            **host,
            "mlflow.runName": order.name_on(backend),
            "trainbench.backend": backend,
            "hw.label": label,
            "trainbench.framework_version": described.version,
            # which GPUs the cell's process could see (set per cell when cells share a machine: sweep/slots.py)
            "trainbench.visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
            **described.tags,
        }
    )
    # the count that ran (device.count=all resolved), and how they are linked
    log.tags({"trainbench.num_devices": device.count, **hardware_links(backend, device.gpu_indices)})
    summary = task.run(framework, cell, log, DeviceInfo(device, label, host))
    after = device.after_task()
    summary["peak_device_memory_mb"] = after.peak_memory_mb
    summary["peak_host_memory_mb"] = peak_host_memory_mb()
    summary["host_load_1m_start"], summary["host_load_1m_end"] = load_at_start, host_load()
    log.tags(after.tags)
    log.metrics(summary)
    return {
        "backend": backend,
        "samples_per_s": summary.get("samples_per_s"),
        "peak_tflops": summary.get("peak_tflops"),
        "num_devices": device.count,
        "hw_label": label,
        "framework_version": described.version,
    }


def host_load() -> float | None:
    """The host's 1-minute load average (runnable processes, every program's), None where the OS has none
    (Windows): beside the cell's figures, it tells a busy host from a noisy cell."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def hardware_links(backend: str, gpu_indices: list[int]) -> dict[str, str]:
    """hw.gpu_interconnect and hw.gpu_links of the cell's GPUs (NVIDIA: nvidia-smi topo -m)."""
    from trainbench.measure import topology

    if backend not in ("cuda", "gpu") or len(gpu_indices) < 2:
        return {}
    return topology.interconnect_tags(gpu_indices)


def write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader sees all of it or nothing."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


# How each backend says it ran out of memory: CUDA and MPS (torch.OutOfMemoryError or "out of memory"),
# TensorFlow (ResourceExhaustedError), JAX/XLA (RESOURCE_EXHAUSTED), the host (MemoryError, allocators).
_OOM_TEXT = (
    "out of memory",
    "resource_exhausted",
    "resourceexhausted",
    "can't allocate memory",
    "cannot allocate memory",
    "failed to allocate",
    "oom when allocating",
    "bad_alloc",
)


def failure_kind(error: BaseException) -> str:
    """`oom` when the error is running out of (device or host) memory, else `error`."""
    text = str(error).lower()
    names = {cls.__name__ for cls in type(error).__mro__}
    if isinstance(error, MemoryError) or "OutOfMemoryError" in names or any(t in text for t in _OOM_TEXT):
        return "oom"
    return "error"


def peak_host_memory_mb() -> float:
    """Peak resident memory of this cell's process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def die_with_parent(parent_pid: int) -> None:
    """Get PARENT_DIED when the parent dies: the kernel's parent-death signal on Linux, and on every system a
    thread that notices the parent pid change (the process was re-parented). Its default action ends the
    process, as in the ranks (cell/ranks.py), which install no handler."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, PARENT_DIED)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os.kill(os.getpid(), PARENT_DIED)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), PARENT_DIED)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def one_line(error: BaseException) -> str:
    """'ExceptionClass: first line of the message', short enough for a tag."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."


# Test-only, never a user's setting: the faults a test asks of the cells' processes, so that it can prove the sweep
# survives them. Comma-separated entries, each FAULT (every cell's process), CELL:FAULT (only the cell at that place
# in its sweep, from 1) or [CELL:]FAULT@RANK (only that rank of a data-parallel cell); FAULT is one of FAULTS.
INJECT_FAULT_ENV = "TRAINBENCH_INJECT_FAULT"
FAULTS = ("abort", "raise", "sleep", "stuck", "exit", "abort_on_exit")


def fault_for(cell_index: int, rank: int | None) -> str | None:
    """The fault $TRAINBENCH_INJECT_FAULT asks of cell `cell_index`'s process (`rank` None) or of one of its ranks."""
    for entry in filter(None, os.environ.get(INJECT_FAULT_ENV, "").split(",")):
        where, _, what = entry.strip().rpartition(":")
        fault, _, at_rank = what.partition("@")
        if fault not in FAULTS:
            raise ValueError(f"{INJECT_FAULT_ENV}={entry}: the faults are {', '.join(FAULTS)}")
        if (not where or int(where) == cell_index) and (int(at_rank) if at_rank else None) == rank:
            return fault
    return None


def inject_fault(fault: str | None) -> None:
    """Test-only ways for a cell to go wrong (fault_for says which), so the tests can prove the sweep survives them."""
    if fault == "abort":
        sys.stderr.write(f"trainbench: {INJECT_FAULT_ENV}=abort: calling os.abort()\n")
        sys.stderr.flush()
        os.abort()
    if fault == "raise":
        raise RuntimeError(f"{INJECT_FAULT_ENV}=raise: a deliberate failure")
    if fault == "sleep":
        time.sleep(3600)
    if fault == "stuck":  # as in a long call into C code: a stop's Python handler waits until it returns
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, PARENT_DIED})
        time.sleep(3600)
    if fault == "exit":
        os._exit(3)
    if fault == "abort_on_exit":  # the work done, a native crash on the way out
        import atexit

        atexit.register(os.abort)
