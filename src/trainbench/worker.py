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
    try:
        _inject_fault(cfg["debug"]["inject_fault"])
        from trainbench import frameworks, tasks
        from trainbench.tracking import RunLogger

        framework = frameworks.load(cfg)
        result.update(tasks.run(framework, cfg, RunLogger(spec["tracking_uri"], spec["run_id"])))
        result["outcome"] = "finished"
    except (KeyboardInterrupt, Terminated):
        result.update(outcome="killed", reason="interrupted by the user (Ctrl-C) or stopped by the parent")
    except Exception as error:
        from trainbench.frameworks.base import DeviceUnavailable

        if isinstance(error, DeviceUnavailable):
            result.update(outcome="unavailable", reason=str(error))
        else:
            traceback.print_exc()  # lands in the stderr tail the parent attaches to the run
            result.update(outcome="failed", reason=one_line(error))
    Path(spec["result_path"]).write_text(json.dumps(result))
    return 0


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
