"""NVIDIA GPUs: NVML (the GPUs CUDA_VISIBLE_DEVICES leaves visible), else nvidia-smi's query output."""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from trainbench.measure.hardware.reading import as_text, quietly, run_command

NVIDIA_SMI_QUERY = "name,memory.total,driver_version,power.limit"


def nvidia_tags() -> dict[str, Any]:
    """hw.gpu* and sw.cuda_driver from NVML (the driver's own library; nvidia-ml-py), or from nvidia-smi
    when nvidia-ml-py is not installed; nothing at all without an NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return nvidia_smi_tags()
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded on machines without NVIDIA GPUs
        return {}
    try:
        handles = nvml_visible_handles(pynvml)
        if not handles:
            return {}
        first = handles[0]
        tags: dict[str, Any] = {
            "hw.gpu": as_text(pynvml.nvmlDeviceGetName(first)),
            "hw.gpu_vendor": "nvidia",
            "hw.gpu_count": len(handles),
            "hw.gpu_memory_gb": round(pynvml.nvmlDeviceGetMemoryInfo(first).total / 2**30, 1),
            "hw.gpu_driver": as_text(pynvml.nvmlSystemGetDriverVersion()),
        }
        tags["hw.gpu_power_limit_w"] = quietly(lambda: round(pynvml.nvmlDeviceGetEnforcedPowerLimit(first) / 1000))
        tags["sw.cuda_driver"] = quietly(lambda: cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion_v2()))
        return tags
    except Exception:
        return {}
    finally:
        quietly(pynvml.nvmlShutdown)


def nvml_visible_handles(pynvml: Any) -> list[Any]:
    """NVML handles of the GPUs this process's CUDA sees, in CUDA's order: NVML ignores CUDA_VISIBLE_DEVICES,
    so index 0 for CUDA may be physical GPU 3. Call between nvmlInit and nvmlShutdown."""
    count = pynvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    handles = []
    for item in (v.strip() for v in visible.split(",")):
        if item.isdigit() and int(item) < count:
            handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(item)))
        elif item.startswith("GPU-"):
            handle = quietly(lambda item=item: pynvml.nvmlDeviceGetHandleByUUID(item))
            if handle is None:
                break
            handles.append(handle)
        else:  # CUDA stops at the first entry it cannot use ("-1", "", a MIG id: not resolved here)
            break
    return handles


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version integer -> "12.4" (12040)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def nvidia_smi_tags() -> dict[str, Any]:
    if not shutil.which("nvidia-smi"):
        return {}
    return nvidia_tags_from_smi(
        parse_nvidia_smi_query(
            run_command("nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits")
        )
    )


def parse_nvidia_smi_query(csv_text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader,nounits`
    -> one dict per GPU: name, memory_mib, driver, power_limit_w (fields nvidia-smi could not read are left out)."""
    gpus = []
    for line in csv_text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0]:
            continue
        gpu: dict[str, Any] = {"name": fields[0], "driver": fields[2]}
        for key, value in (("memory_mib", fields[1]), ("power_limit_w", fields[3])):
            with contextlib.suppress(ValueError):  # "[N/A]", "[Not Supported]": left out
                gpu[key] = float(value)
        gpus.append(gpu)
    return gpus


def nvidia_tags_from_smi(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    if not gpus:
        return {}
    first = gpus[0]
    tags: dict[str, Any] = {
        "hw.gpu": first["name"],
        "hw.gpu_vendor": "nvidia",
        "hw.gpu_count": len(gpus),
        "hw.gpu_driver": first["driver"],
    }
    if "memory_mib" in first:
        tags["hw.gpu_memory_gb"] = round(first["memory_mib"] / 1024, 1)
    if "power_limit_w" in first:
        tags["hw.gpu_power_limit_w"] = round(first["power_limit_w"])
    return tags
