"""A cell's own process: `python -m trainbench.worker SPEC.json`.

The parent wrote SPEC (the validated config, the run to log into, where to put the result) and will
close the run whatever happens here. This process imports exactly one framework, logs metrics and tags
into the run, and writes RESULT (outcome, reason, samples/s) for the parent. If it dies without writing
one (abort, segfault, OOM killer), the parent works out the outcome from its exit status.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn


class Terminated(BaseException):
    """SIGTERM from the parent (Ctrl-C, timeout): unwinds like KeyboardInterrupt."""


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    cfg: dict[str, Any] = spec["config"]
    result: dict[str, Any] = {"outcome": "failed", "reason": None}
    signal.signal(signal.SIGTERM, _raise_terminated)
    _limit_memory(cfg["cell"]["memory_limit_mb"])
    monitor = None
    try:
        _inject_fault(cfg["debug"]["inject_fault"])
        from trainbench import frameworks, tasks
        from trainbench.tracking import RunLogger

        if spec.get("run_id"):
            monitor = _system_metrics(spec["run_id"], spec["tracking_uri"])
            log = RunLogger(spec["tracking_uri"], spec["run_id"])
        else:  # a probe (batch_size=max search): runs the cell, records nothing
            # ...but loads the same MLflow client, so that under cell.memory_limit_mb the probe's host
            # memory is the real cell's and "fits" means fits.
            RunLogger(spec["tracking_uri"], "probe")
            log = NullLogger()
        framework = frameworks.load(cfg)
        result.update(tasks.run(framework, cfg, log))
        result["outcome"] = "finished"
    except (KeyboardInterrupt, Terminated):
        result.update(outcome="killed", reason="interrupted by the user (Ctrl-C) or stopped by the parent")
    except Exception as error:
        from trainbench.frameworks.base import DeviceUnavailable

        if isinstance(error, DeviceUnavailable):
            result.update(outcome="unavailable", reason=str(error))
        else:
            traceback.print_exc()  # lands in the stderr tail the parent attaches to the run
            result.update(outcome="failed", reason=one_line(error), failure=failure_kind(error))
    finally:
        if monitor is not None:
            monitor.finish()
    Path(spec["result_path"]).write_text(json.dumps(result))
    return 0


# How each backend says it ran out of memory: CUDA and MPS (torch.OutOfMemoryError or "out of memory"),
# TensorFlow (ResourceExhaustedError), JAX/XLA (RESOURCE_EXHAUSTED), the host (MemoryError, allocators).
_OOM_TEXT = ("out of memory", "resource_exhausted", "resourceexhausted", "can't allocate memory",
             "cannot allocate memory", "failed to allocate", "oom when allocating")


def failure_kind(error: BaseException) -> str:
    """`oom` when the error is running out of (device or host) memory, else `error`."""
    text = str(error).lower()
    names = {cls.__name__ for cls in type(error).__mro__}
    if isinstance(error, MemoryError) or "OutOfMemoryError" in names or any(t in text for t in _OOM_TEXT):
        return "oom"
    return "error"


class NullLogger:
    """Logs nothing: for probe runs that only answer "does this fit?"."""

    def metrics(self, values: Any, step: int = 0) -> None: ...

    def tags(self, values: Any) -> None: ...

    def text(self, text: str, artifact_file: str) -> None: ...

    def figure(self, figure: Any, artifact_file: str) -> None: ...


def _limit_memory(limit_mb: int | None) -> None:
    """cell.memory_limit_mb: cap this process's data segment (heap and anonymous mappings), so a cell that
    needs more fails with an out-of-memory error instead of taking the machine down. Linux only."""
    if not limit_mb:
        return
    import resource

    limit = int(limit_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _system_metrics(run_id: str, tracking_uri: str) -> Any:
    """MLflow's own system metrics (CPU, memory, GPU via NVML) sampled every second into the cell's run."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(run_id, sampling_interval=1, samples_before_logging=1,
                                       tracking_uri=tracking_uri)
        monitor.start()
        return monitor
    except Exception as error:  # optional: a cell must not fail because monitoring could not start
        sys.stderr.write(f"trainbench: system metrics off: {one_line(error)}\n")
        return None


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


def _raise_terminated(signum: int, frame: Any) -> NoReturn:
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
