"""What each job of a sweep got to, kept on this machine's disk beside the store: for a summary whose store stopped
answering mid-sweep. A parallel launcher (joblib) that one job's store fault stops discards every other job's
return, and the store that would say what they did cannot be read; without this, cells that ran would be listed
`not started`.

The sweep's owner makes a folder (named like a cell's scratch folder for its own process, so that one left by an
owner killed with SIGKILL is removed by the next cell launched on the machine) and names it to the processes its
launcher starts. A job on this machine writes `<index>.json` as it starts and again as it ends; a job on another
machine finds no such folder and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainbench.cell.orphan import scratch_prefix

JOB_STATES_ENV = "TRAINBENCH_JOB_STATES"


@contextlib.contextmanager
def kept() -> Iterator[Path]:
    """The folder for this sweep's jobs, named to the processes started while it is open; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=scratch_prefix()) as folder:
        os.environ[JOB_STATES_ENV] = folder
        try:
            yield Path(folder)
        finally:
            os.environ.pop(JOB_STATES_ENV, None)


def write(index: int, state: dict[str, Any]) -> None:
    """Job `index`'s state, where its sweep's owner reads it (nowhere when the owner is on another machine)."""
    folder = os.environ.get(JOB_STATES_ENV)
    if not folder or not Path(folder).is_dir():
        return
    path = Path(folder) / f"{index}.json"
    with contextlib.suppress(OSError):  # a convenience: losing it costs the summary's detail, not the cell
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(state))
        partial.replace(path)


def read(folder: Path | None, index: int) -> dict[str, Any] | None:
    """Job `index`'s last state, or None when it never started here (or wrote nothing readable)."""
    if folder is None:
        return None
    try:
        state = json.loads((folder / f"{index}.json").read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None
