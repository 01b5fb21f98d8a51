"""Whether a device a cell asks for can exist on this machine, known before any framework is imported.

A sweep names a device this machine cannot have before its first cell runs, and a cell on such a device is
recorded `unavailable` without starting a process that would import a framework only to find out. The probe
looks only at what every framework's GPU support needs from the operating system, and answers "absent" only
when it is sure: on Linux, a GPU cell needs a GPU driver's device files (NVIDIA: /proc/driver/nvidia and
/dev/nvidia*, AMD ROCm: /dev/kfd, WSL 2: /dev/dxg). Elsewhere (macOS, where Metal and MPS drive Apple, AMD
and Intel GPUs; Windows) each cell's framework looks for itself. TRAINBENCH_DEVICE_PROBE=off leaves every
device to the cell's framework (a driver whose files are somewhere else).
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

PROBE_ENV = "TRAINBENCH_DEVICE_PROBE"
# What a GPU on Linux shows, whichever framework drives it: a path that exists means "maybe here".
LINUX_GPU_FILES = ("/proc/driver/nvidia", "/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def absent(device: str, root: str = "/") -> str | None:
    """Why `device` (cpu, gpu, auto) cannot run on this machine, naming what was checked; None when it can,
    or may. `root`: where the file system's paths are looked up (tests)."""
    if device != "gpu" or os.environ.get(PROBE_ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    if not sys.platform.startswith("linux"):
        return None
    for pattern in LINUX_GPU_FILES:
        if glob.glob(str(Path(root) / pattern.lstrip("/"))):
            return None
    return (
        "no CUDA device on this machine: no GPU driver (no /proc/driver/nvidia or /dev/nvidia* for NVIDIA, "
        "no /dev/kfd for AMD ROCm, no /dev/dxg for WSL 2)"
    )


def notice(devices: list[str], will: str = "will", root: str = "/") -> list[str]:
    """One line per device of `devices` (one entry per cell) that cannot run here: the device, why, and what
    becomes of its cells and the others. `will`: "will", or "would" for a dry run."""
    lines = []
    for device in dict.fromkeys(devices):
        why = absent(device, root)
        if why is None:
            continue
        count = devices.count(device)
        cells = f"its {count} cells {will} be" if count > 1 else f"its cell {will} be"
        others = len(devices) - count
        rest = f", the other {others} run" if others > 1 else ", the other cell runs" if others else ""
        lines.append(
            f"trainbench: device={device}: {why}: {cells} recorded `unavailable` without starting{rest} "
            f"({PROBE_ENV}=off: let each cell's framework look)"
        )
    return lines
