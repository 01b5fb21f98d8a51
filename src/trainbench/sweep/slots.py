"""Which GPUs (and cores) a cell may use when cells run side by side on one machine.

With a parallel launcher (hydra/launcher=joblib, submitit_local) several cells run on one host at once.
Each cell takes `device.count` GPUs from those visible to the sweep (CUDA_VISIBLE_DEVICES, else every GPU
NVML sees) by locking one file per GPU in the machine's temporary folder, and its process sees only those
(CUDA_VISIBLE_DEVICES); `cell.cpus` does the same for cores. The locks are the operating system's: a cell
that dies releases its slots, and two sweeps on one machine never share a GPU.
On a cluster launcher (Slurm, Ray) the scheduler already gives each job its own GPUs; the locks then only
coordinate cells that land on the same node.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOCK_FOLDER = Path(tempfile.gettempdir()) / "trainbench-slots"
POLL_S = 0.5


def visible_gpus() -> list[str]:
    """The NVIDIA GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU: nothing to pin
        return []


@contextlib.contextmanager
def take(kind: str, wanted: int | None, available: list[str]) -> Iterator[list[str] | None]:
    """Hold `wanted` of `available` (GPU names or core numbers) for the block; None when there is nothing to
    pin (no such devices, or none wanted). Waits while other cells hold them."""
    if not wanted or not available:
        yield None
        return
    wanted = min(wanted, len(available))
    LOCK_FOLDER.mkdir(parents=True, exist_ok=True)
    held: list[tuple[str, Any]] = []
    try:
        while len(held) < wanted:
            for name in available:
                if len(held) == wanted:
                    break
                if any(name == taken for taken, _ in held):
                    continue
                handle = _try_lock(LOCK_FOLDER / f"{kind}-{name.replace('/', '_')}.lock")
                if handle is not None:
                    held.append((name, handle))
            if len(held) < wanted:  # all-or-nothing: give back what we have, so two cells never deadlock
                for _, handle in held:
                    handle.close()
                held = []
                time.sleep(POLL_S)
        yield [name for name, _ in held]
    finally:
        for _, handle in held:
            handle.close()


def _try_lock(path: Path) -> Any:
    import fcntl

    handle = open(path, "a")  # noqa: SIM115  (kept open: the lock lives as long as the file handle)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
