"""What machine a cell ran on, as hw.* tags; probed without importing a deep-learning framework.

Each probe reads one source (platform, /proc, sysctl, NVML) and gives up quietly when it is not there:
a missing fact is a missing tag, never a failed cell. Parsers take the text a command printed, so the
tests check them on outputs captured from real machines.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
from typing import Any

import psutil


@functools.lru_cache(maxsize=1)
def host_tags() -> dict[str, str]:
    """hw.* tags of this machine (probed once per process)."""
    tags: dict[str, Any] = {
        "hw.os": os_name(),
        "hw.machine": platform.machine(),
        "hw.cpu": cpu_name(),
        "hw.cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "hw.memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    if platform.system() == "Darwin":
        tags["hw.chip"] = _run("sysctl", "-n", "machdep.cpu.brand_string")
    tags.update(nvidia_tags())
    return {k: str(v) for k, v in tags.items() if v not in (None, "")}


def label(backend: str, tags: dict[str, str]) -> str:
    """The short name charts group by: "NVIDIA H100 80GB HBM3", "Apple M1 Max GPU", "Intel Xeon CPU"."""
    if backend == "cuda" and "hw.gpu" in tags:
        return tags["hw.gpu"]
    if backend in ("mps", "metal"):
        return f"{tags.get('hw.chip', 'Apple')} GPU"
    chip = tags.get("hw.chip")
    return f"{chip} CPU" if chip else short_cpu_name(tags.get("hw.cpu", "unknown"))


def os_name() -> str:
    if platform.system() == "Darwin":
        return f"macOS {platform.mac_ver()[0]}"
    if platform.system() == "Linux":
        return f"Linux {platform.release().split('-')[0]}"
    return f"{platform.system()} {platform.release()}"


def cpu_name() -> str:
    if platform.system() == "Darwin":
        return _run("sysctl", "-n", "machdep.cpu.brand_string") or platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return parse_proc_cpuinfo(cpuinfo.read()) or platform.processor()
    except OSError:
        return platform.processor()


def parse_proc_cpuinfo(text: str) -> str:
    """The CPU model from /proc/cpuinfo ("model name" on x86, "Model"/"CPU part" fallbacks on Arm)."""
    for key in ("model name", "Model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, flags=re.MULTILINE)
        if match:
            return match.group(1).strip()
    return ""


def short_cpu_name(cpu: str) -> str:
    """ "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz" -> "Intel Xeon Platinum 8480+ CPU"."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", cpu)
    name = re.sub(r"\s*@.*$", "", name)
    name = re.sub(r"\b\d+-Core Processor\b", "", name)
    name = re.sub(r"\s+", " ", name).strip()
    return name if name.endswith("CPU") else f"{name} CPU"


def nvidia_tags() -> dict[str, Any]:
    """hw.gpu* from NVML (the driver's own library): nothing at all when there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded on machines without NVIDIA GPUs
        return {}
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return {}
        first = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(first)
        return {
            "hw.gpu": name.decode() if isinstance(name, bytes) else name,
            "hw.gpu_count": count,
            "hw.gpu_memory_gb": round(pynvml.nvmlDeviceGetMemoryInfo(first).total / 2**30, 1),
            "hw.gpu_driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        }
    except Exception:
        return {}
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
