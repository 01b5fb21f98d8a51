"""This machine's hw.* tags, probed once per process from every source that answers (host, macOS, NVIDIA, AMD)."""

from __future__ import annotations

import functools
import platform
from typing import Any

import psutil

from trainbench.measure.hardware.amd import amd_tags
from trainbench.measure.hardware.host import cpu_name, linux_power_source, os_name, virtualization
from trainbench.measure.hardware.mac import mac_tags
from trainbench.measure.hardware.nvidia import nvidia_tags


@functools.lru_cache(maxsize=1)
def _probe() -> dict[str, str]:
    tags: dict[str, Any] = {
        "hw.os": os_name(),
        "hw.machine": platform.machine(),
        "hw.cpu": cpu_name(),
        "hw.cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "hw.cpu_logical": psutil.cpu_count(),  # a VM's vCPUs: what its label counts (labels.label)
        "hw.memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    if platform.system() == "Darwin":
        tags.update(mac_tags())
    else:
        tags["hw.power_source"] = linux_power_source()
    tags["hw.virtualized"] = tags.get("hw.virtualized") or virtualization()
    tags.update(nvidia_tags() or amd_tags())
    return {k: str(v) for k, v in tags.items() if v not in (None, "")}


def host_tags() -> dict[str, str]:
    """hw.* (and sw.cuda_driver / sw.rocm) tags of this machine, probed once per process."""
    return dict(_probe())
