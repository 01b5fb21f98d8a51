"""Closing the run of a cell whose launcher died: `python -m trainbench.cell.orphan ARGS.json-text`.

A cell's process that loses the process that launched it (SIGKILL, the OOM killer) must stop at once: computing on,
or taking seconds to import MLflow and close its run, would keep cores and memory from whatever runs next. So it
starts this small process, detached in a session of its own, and exits; this process records the run `killed` with
the reason the cell gave, then removes the cell's scratch folder, which its dead launcher can no longer remove.
It computes nothing and ends once the run is closed (or the store refuses: the next invocation then closes the run
as `lost`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRATCH_PREFIX = "trainbench-cell-"


def scratch_prefix(pid: int | None = None) -> str:
    """A cell's scratch folder is named for the process that made it (its launcher), so that folders whose maker is
    gone can be told from those in use and removed by the next cell launched on the machine."""
    return f"{SCRATCH_PREFIX}{pid or os.getpid()}-"


def remove_abandoned_scratch(folder: str | None = None) -> list[Path]:
    """Remove the cell scratch folders in the temporary folder whose launcher process is gone (SIGKILLed together
    with its cell, say); return them. A folder whose maker lives, or cannot be told, is left alone."""
    import psutil

    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid_text = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or psutil.pid_exists(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


# What joblib's launcher (loky) leaves in shared memory when the sweep is SIGKILLed together with loky's resource
# tracker, which would have removed them: named semaphores and memmapping folders, named for the process that made
# them. No process can use them once that process is gone (loky's workers end with it).
_SHARED_MEMORY_LEFTOVERS = (
    re.compile(r"sem\.loky-(\d+)-\w+"),
    re.compile(r"joblib_memmapping_folder_(\d+)_\w+"),
)


def remove_abandoned_shared_memory(folder: str = "/dev/shm") -> list[Path]:
    """Remove joblib's semaphores and memmapping folders in `folder` whose maker process is gone; return them. What
    a live process made, or other programs' files, are left alone."""
    import psutil

    removed = []
    with contextlib.suppress(OSError):
        for path in Path(folder).iterdir():
            match = next((m for pattern in _SHARED_MEMORY_LEFTOVERS if (m := pattern.fullmatch(path.name))), None)
            if match is None or psutil.pid_exists(int(match.group(1))):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            if not path.exists():
                removed.append(path)
    return removed


def hand_over(tracking_uri: str | None, run_id: str | None, outcome: str, reason: str | None, scratch: Path) -> None:
    """From the orphaned cell: start this module, detached, to close the run and remove `scratch`."""
    from trainbench.locations import module_command

    arguments = {"tracking_uri": tracking_uri, "run_id": run_id, "outcome": outcome, "reason": reason,
                 "scratch": str(scratch)}  # fmt: skip
    with contextlib.suppress(OSError):
        subprocess.Popen(
            module_command("trainbench.cell.orphan", json.dumps(arguments)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # neither a terminal's Ctrl-C nor a kill of the cell's group ends it
            close_fds=True,
        )


# How long this process tries to close the run: a busy store is waited out by the client itself; this bounds what
# else can fail on the way (a store still starting, a machine loaded enough that MLflow's import takes seconds).
CLOSING_TRIES = 5
CLOSING_PAUSE_S = 3.0


def main(arguments: dict[str, Any]) -> int:
    try:
        if arguments.get("run_id") and arguments.get("tracking_uri"):
            from trainbench.store.tracking import client, close, quiet_logs

            quiet_logs()
            for attempt in range(CLOSING_TRIES):
                try:
                    tracking = client(arguments["tracking_uri"])
                    close(tracking, arguments["run_id"], arguments["outcome"], arguments["reason"])
                    break
                except Exception:  # noqa: BLE001  (the store may be gone too: the next invocation closes the run as `lost`)
                    if attempt + 1 < CLOSING_TRIES:
                        time.sleep(CLOSING_PAUSE_S)
    finally:
        scratch = Path(arguments.get("scratch") or "")
        if scratch.name.startswith(SCRATCH_PREFIX):
            shutil.rmtree(scratch, ignore_errors=True)
            remove_abandoned_scratch(str(scratch.parent))  # the dead sweep's own (trainbench.sweep.job_states)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
