"""A cell's own process: `python -m trainbench.runner.worker SPEC.json`.

The process that launched it (trainbench.runner.cell) wrote SPEC (the cell, where to send what it records,
where to put the result) and closes the run whatever happens here. This process imports exactly one
framework and not MLflow: it sends its metrics, tags and artifacts as JSON lines over a pipe
(trainbench.runner.events), which the launcher logs into the run, and writes RESULT (outcome, reason,
samples/s) atomically. If it dies without writing one (abort, segfault, the OOM killer), the parent works
out the outcome from its exit status. An exception's traceback goes to stderr, which the parent echoes and
attaches to the run, unless running out of memory raised it: an expected outcome, whose traceback goes to
traceback.txt beside RESULT, for the run only, while the parent prints one line.

With `search` in SPEC, the process searches batch_size=max (trainbench.runner.batch_probes) instead of running
the cell.

If the parent dies (SIGKILL, the OOM killer, a lost node), this process notices within a second (Linux:
PR_SET_PDEATHSIG; everywhere: the parent pid changes), records its own run `killed` with that reason,
and exits: no orphan keeps computing and logging into a sweep nobody watches. The parent's death arrives as
its own signal (PARENT_DIED), not SIGTERM, the parent's way to stop a cell: while a killed process exits,
the kernel may send the death signal before this process is re-parented, so the parent pid alone cannot
tell the two apart.

A stop can come at any moment, also while Python is still importing (Ctrl-C in the first half second of a
cell): from the first line, a stop is only remembered, and raised once main() is ready to record it, so it
ends as `killed` like any other stop, with no traceback on the terminal.
"""

from __future__ import annotations

import signal
import sys

PARENT_DIED = signal.SIGUSR2  # sent by the kernel (Linux) or the watch thread when the parent dies
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, PARENT_DIED)
_stops: list[int] = []  # the stop signals received, in order


def _remember_stop(signum: int, frame: object) -> None:
    _stops.append(signum)


if __name__ == "__main__":  # first, before any import that takes time
    for _stop in _STOPS:
        signal.signal(_stop, _remember_stop)

import contextlib  # noqa: E402  (after the stop handlers, on purpose)
import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

PARENT_CHECK_S = 1.0
# The backend the cell's framework selected (cpu, cuda, mps, ...), None before: says whose memory ran out.
selected_backend: str | None = None


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the parent stopping this cell): unwinds like Ctrl-C."""


class ParentDied(Terminated):
    """PARENT_DIED: the process that launched this cell is gone, and with it whoever would close the run."""


def main(spec_path: str) -> int:
    from trainbench.timeline import mark

    mark("cell: python started, trainbench imported")
    spec = json.loads(Path(spec_path).read_text())
    parent_pid = int(spec["parent_pid"])
    result: dict[str, Any] = {"outcome": "failed", "reason": None}
    parent_died = False
    try:
        _die_with_parent(parent_pid)
        if spec.get("cpus"):
            os.sched_setaffinity(0, spec["cpus"])
        from trainbench.config import from_spec
        from trainbench.tracking import NullLog, quiet_logs

        quiet_logs()  # also redacts credentials in whatever this process prints
        cell = from_spec(spec["cell"])
        mark("cell: config read")
        _limit_memory(cell.cell.memory_limit_mb)
        from trainbench.runner.events import PipeLog

        if spec.get("events_fd") is not None:
            log: Any = PipeLog(os.fdopen(spec["events_fd"], "w", buffering=1), Path(spec["result_path"]).parent)
        else:  # a probe (batch_size=max search): runs the cell, records nothing
            log = NullLog()
        # Until here a stop was only remembered: raised inside a library's code, it can break the library's state
        # into another error (OmegaConf turns it into an AttributeError). From here on it unwinds to the
        # `except` below; one that came earlier is raised now.
        _raise_stops()
        if cell.debug.fault_rank is None:
            _inject_fault(cell.debug.inject_fault)
        if spec.get("search") is not None:  # batch_size=max: probes, no figures
            from trainbench.runner import batch_probes

            result["search"] = batch_probes.search(cell, spec["search"])
        else:
            result.update(launch(cell, log, spec))
        _stop_listening()  # done: a stop signal now would only lose the result
        result["outcome"] = "finished"
    except (KeyboardInterrupt, Terminated) as stop:
        _stop_listening()
        parent_died = isinstance(stop, ParentDied)
        result.update(outcome="killed", reason="stopped by the sweep (Ctrl-C, SIGTERM or a timeout)")
    except Exception as error:
        _stop_listening()
        from trainbench.frameworks.base import DeviceUnavailable
        from trainbench.runner.events import LauncherGone
        from trainbench.tracking import private

        parent_died = isinstance(error, LauncherGone) or os.getppid() != parent_pid or PARENT_DIED in _stops
        if parent_died:
            pass  # recorded as killed below
        elif _stops:  # a stop raised inside a library came out as another error: a stop all the same
            result.update(outcome="killed", reason="stopped by the sweep (Ctrl-C, SIGTERM or a timeout)")
        elif isinstance(error, DeviceUnavailable):
            result.update(outcome="unavailable", reason=private(str(error)))
        else:
            kind = failure_kind(error)
            result.update(outcome="failed", reason=private(one_line(error)), failure=kind)
            if kind == "oom":  # expected: the parent prints one line; the traceback goes to the run only
                result["memory"] = "host" if isinstance(error, MemoryError) or selected_backend == "cpu" else "device"
                with contextlib.suppress(OSError):
                    traceback_path(Path(spec["result_path"])).write_text(private(traceback.format_exc()))
            else:  # a bug: on the terminal too, and in the stderr tail the parent attaches to the run
                with contextlib.suppress(OSError):
                    traceback.print_exc()
    if parent_died or os.getppid() != parent_pid:
        # Whatever happened here, the launcher that would log the results and close the run is gone: nothing
        # reached the run after its death, so it is `killed`, and this process closes it (nobody else will).
        _stop_listening()
        _silence_output()
        result.pop("failure", None)
        result.update(outcome="killed", reason=f"the process that launched this cell (pid {parent_pid}) died")
        if spec.get("run_id"):
            _close_own_run(spec, result)
    write_atomically(Path(spec["result_path"]), json.dumps(result))
    mark(f"cell: result written ({result['outcome']})")
    return 0


def launch(cell: Any, log: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Run the cell here, or, where its framework runs one process per device and it asks for several, in
    ranks started by the framework's own launcher (trainbench.runner.ranks); return rank 0's summary."""
    if cell.framework.rank_launcher is not None:
        import importlib

        from trainbench.runner.ranks import rank_main

        launcher = importlib.import_module(cell.framework.rank_launcher)
        count = launcher.processes(cell.device)
        if count > 1:
            results = launcher.launch(count, rank_main, json.dumps(spec))
            return dict(results[min(results)])  # global rank 0's, or this node's first rank's
    return run(cell, log, spec.get("name_suffix", ""))


def run(cell: Any, log: Any, name_suffix: str = "") -> dict[str, Any]:
    """Bind the device, tag what runs where, run the task, add memory figures; return the summary."""
    from trainbench import frameworks, hardware
    from trainbench.tasks.base import DeviceInfo
    from trainbench.timeline import mark

    global selected_backend
    framework = frameworks.load(cell)
    mark("cell: framework imported")
    backend = selected_backend = framework.select_device(cell.device)
    mark("cell: device selected")
    host = hardware.host_tags()  # probed here: the parent's may be a sweep old (power source)
    mark("cell: hardware probed")
    label = hardware.label(backend, host)
    task = cell.task
    log.tags(
        {
            **host,
            "mlflow.runName": task.run_name(cell, backend) + name_suffix,
            "trainbench.backend": backend,
            "hw.label": label,
            "trainbench.framework_version": framework.version(),
            # which GPUs the cell's process could see (set per cell when cells share a machine: runner/slots.py)
            "trainbench.visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
            **framework.versions(),
            **framework.flags(),
        }
    )
    devices = framework.num_devices()  # the count that ran (device.count=all resolved), and how they are linked
    log.tags({"trainbench.num_devices": devices, **hardware_links(backend, framework.device_indices())})
    summary = task.run(framework, cell, log, DeviceInfo(backend, label, host, devices))
    summary["peak_device_memory_mb"] = framework.peak_device_memory_mb()
    summary["peak_host_memory_mb"] = peak_host_memory_mb()
    log.tags(framework.closing_tags())
    log.metrics(summary)
    return {
        "backend": backend,
        "samples_per_s": summary.get("samples_per_s"),
        "peak_tflops": summary.get("peak_tflops"),
        "num_devices": devices,
        "hw_label": label,
        "framework_version": framework.version(),
    }


def hardware_links(backend: str, gpu_indices: list[int]) -> dict[str, str]:
    """hw.gpu_interconnect and hw.gpu_links of the cell's GPUs (NVIDIA: nvidia-smi topo -m)."""
    from trainbench import topology

    if backend not in ("cuda", "gpu") or len(gpu_indices) < 2:
        return {}
    return topology.interconnect_tags(gpu_indices)


def traceback_path(result_path: Path) -> Path:
    """Where the cell's process leaves the traceback of an expected failure (out of memory), beside its result:
    the parent adds it to the run's stderr_tail.txt, and prints one line instead."""
    return result_path.with_name("traceback.txt")


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


def _raise_stops() -> None:
    """Stops raise from now on (SIGINT: KeyboardInterrupt; SIGTERM, SIGHUP: Terminated; PARENT_DIED: ParentDied),
    each remembered first, and the first stop that came while the process was starting is raised now."""
    for stop in _STOPS:
        signal.signal(stop, _raise_stop)
    if _stops:
        _raise_stop(_stops.pop(0), None)


def _raise_stop(signum: int, frame: Any) -> NoReturn:
    _stops.append(signum)
    if signum == PARENT_DIED:
        raise ParentDied()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt()
    raise Terminated()


def _stop_listening() -> None:
    """Once stopping, stay stopping: the parent-death signal and the watch thread each send PARENT_DIED, and a
    second one must not interrupt the recording of the first (closing the run imports MLflow: seconds)."""
    for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, PARENT_DIED):
        signal.signal(stop, signal.SIG_IGN)


def _silence_output() -> None:
    """The launcher held the reading end of this process's stderr: point stdout and stderr at /dev/null, or
    a write on the way to closing the run would raise BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (1, 2):
        os.dup2(devnull, stream)
    os.close(devnull)


def _die_with_parent(parent_pid: int) -> None:
    """Get PARENT_DIED when the parent dies: the kernel's parent-death signal on Linux, and on every system a
    thread that notices the parent pid change (the process was re-parented). Its default action ends the
    process, as in the ranks (runner/ranks.py), which install no handler."""
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


def _close_own_run(spec: dict[str, Any], result: dict[str, Any]) -> None:
    """The launcher died: this process closes its run itself (the one time it imports MLflow)."""
    try:
        from trainbench.tracking import client, close

        close(client(spec["tracking_uri"]), spec["run_id"], result["outcome"], result.get("reason"))
    except Exception as error:  # the store may be gone too; `lost` handling closes the run later
        sys.stderr.write(f"trainbench: could not close the run: {one_line(error)}\n")


def _limit_memory(limit_mb: int | None) -> None:
    """cell.memory_limit_mb: cap this process's data segment (heap and anonymous mappings), so a cell that
    needs more fails with an out-of-memory error instead of taking the machine down. Linux only."""
    if not limit_mb:
        return
    import resource

    limit = int(limit_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def one_line(error: BaseException) -> str:
    """'ExceptionClass: first line of the message', short enough for a tag."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _inject_fault(fault: str | None) -> None:
    """Test-only ways for a cell to go wrong, so the tests can prove the sweep survives them."""
    if fault == "abort":
        sys.stderr.write("trainbench: debug.inject_fault=abort: calling os.abort()\n")
        sys.stderr.flush()
        os.abort()
    if fault == "raise":
        raise RuntimeError("debug.inject_fault=raise: a deliberate failure")
    if fault == "sleep":
        time.sleep(3600)
    if fault == "exit":
        os._exit(3)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
