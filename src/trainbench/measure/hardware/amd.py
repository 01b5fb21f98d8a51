"""AMD GPUs: amdsmi, else amd-smi's or rocm-smi's JSON, the GPUs ROCm leaves visible, and ROCm's version."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from trainbench.measure.hardware.reading import quietly, read_file, run_command

AMD_SMI_STATIC = ("amd-smi", "static", "--asic", "--vram", "--driver", "--limit", "--json")
ROCM_SMI_QUERY = ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json")


def amd_tags(kfd: str | Path = "/dev/kfd") -> dict[str, Any]:
    """hw.gpu* and sw.rocm of a ROCm machine, from amdsmi (ROCm's Python library) when it imports, else from
    `amd-smi static` or `rocm-smi` output; nothing without /dev/kfd (the ROCm compute driver's device)."""
    if not Path(kfd).exists():
        return {}
    gpus = amdsmi_gpus()
    if not gpus and shutil.which("amd-smi"):
        gpus = parse_amd_smi_static(run_command(*AMD_SMI_STATIC))
    if not gpus and shutil.which("rocm-smi"):
        gpus = parse_rocm_smi(run_command(*ROCM_SMI_QUERY))
    return amd_tags_from_gpus(amd_visible(gpus, os.environ), rocm_version())


def amdsmi_gpus() -> list[dict[str, Any]]:
    """One dict per AMD GPU (name, memory_mib, driver, power_limit_w) from the amdsmi library; [] when it is
    not installed or cannot initialise (no driver, a library from another ROCm release)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # amdsmi prints to stdout when libamd_smi.so is missing
            import amdsmi
    except Exception:  # ImportError, OSError, AttributeError and KeyError are all seen in the wild
        return []
    try:
        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception:
        return []
    try:
        return [_amdsmi_gpu(amdsmi, handle) for handle in amdsmi.amdsmi_get_processor_handles()]
    except Exception:
        return []
    finally:
        quietly(amdsmi.amdsmi_shut_down)


def _amdsmi_gpu(amdsmi: Any, handle: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "name": amd_gpu_name(quietly(lambda: amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"]) or ""),
        "driver": quietly(lambda: amdsmi.amdsmi_get_gpu_driver_info(handle)["driver_version"]) or "",
    }
    memory_mib = quietly(lambda: amdsmi.amdsmi_get_gpu_vram_info(handle)["vram_size"])  # "MB" (MiB)
    if isinstance(memory_mib, int | float) and memory_mib > 0:
        gpu["memory_mib"] = float(memory_mib)
    power_cap = quietly(lambda: amdsmi.amdsmi_get_power_cap_info(handle)["power_cap"])  # microwatts
    if isinstance(power_cap, int | float) and power_cap > 0:
        gpu["power_limit_w"] = power_cap / 1e6 if power_cap > 100_000 else float(power_cap)
    return gpu


def parse_amd_smi_static(json_text: str) -> list[dict[str, Any]]:
    """`amd-smi static --json` (any of --asic --vram --driver --limit) -> one dict per GPU: name, driver,
    memory_mib, power_limit_w. Reads both layouts: a bare list of GPUs (ROCm 6.0-6.3) and {"gpu_data": [...]}
    (later releases); values are {"value": v, "unit": u} objects or "N/A"."""
    try:
        data = json.loads(json_text)
    except ValueError:
        return []
    entries = data.get("gpu_data", []) if isinstance(data, dict) else data
    gpus = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "gpu" not in entry:
            continue
        asic, vram, driver, limit = (_section(entry, key) for key in ("asic", "vram", "driver", "limit"))
        name = amd_gpu_name(str(asic.get("market_name", "")))
        if not name:
            continue
        gpu: dict[str, Any] = {"name": name, "driver": _known(driver.get("version"))}
        size = _quantity(vram.get("size"))
        if size:
            gpu["memory_mib"] = size * (1024 if _unit(vram.get("size")).upper() == "GB" else 1)
        power = _quantity(limit.get("socket_power"))
        if power:
            gpu["power_limit_w"] = power
        gpus.append(gpu)
    return gpus


def parse_rocm_smi(json_text: str) -> list[dict[str, Any]]:
    """`rocm-smi --showproductname --showmeminfo vram --showdriverversion --json` -> one dict per card: name,
    memory_mib, driver. rocm-smi spells its keys "Card series" or "Card Series" depending on the release."""
    try:
        data = json.loads(json_text)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    system = {k.lower(): v for k, v in (data.get("system") or {}).items()}
    cards = sorted((k for k in data if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:]))
    gpus = []
    for card in cards:
        fields = {k.lower(): v for k, v in data[card].items()}
        name = amd_gpu_name(str(fields.get("card series") or fields.get("card model") or ""))
        if not name:
            continue
        gpu: dict[str, Any] = {"name": name, "driver": _known(system.get("driver version"))}
        vram_bytes = str(fields.get("vram total memory (b)", ""))
        if vram_bytes.isdigit():
            gpu["memory_mib"] = int(vram_bytes) / 2**20
        gpus.append(gpu)
    return gpus


def amd_gpu_name(raw: str) -> str:
    """One spelling per product, whichever tool and release named it: "MI300X", "AMD Instinct MI300X",
    "AMD INSTINCT MI250 (MCM) OAM AC MBA" and "Aqua Vanjaram [Instinct MI300A]" (pci.ids style) become
    "AMD Instinct MI300X" ... "AMD Instinct MI300A"; Radeon names get their "AMD" prefix."""
    name = re.sub(r"\s+", " ", raw.replace("\u2122", "").replace("(TM)", "")).strip()
    if name.upper() in ("", "N/A"):
        return ""
    bracketed = re.search(r"\[([^\]]+)\]", name)
    if bracketed:
        name = bracketed.group(1).strip()
    instinct = re.search(r"\bMI\d{2,3}[A-Z]{0,2}\b", name, flags=re.IGNORECASE)
    if instinct and (re.search(r"instinct", name, flags=re.IGNORECASE) or name.upper().startswith("MI")):
        return f"AMD Instinct {instinct.group(0).upper()}"
    if name.lower().startswith("radeon"):
        return f"AMD {name}"
    return name


def amd_visible(gpus: list[dict[str, Any]], env: Any) -> list[dict[str, Any]]:
    """The GPUs this process's HIP runtime sees: HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (ROCm honours
    both), as indices; like CUDA, the list stops at the first entry that is not one."""
    visible = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    if visible is None:
        return gpus
    chosen = []
    for item in (v.strip() for v in visible.split(",")):
        if not (item.isdigit() and int(item) < len(gpus)):
            break
        chosen.append(gpus[int(item)])
    return chosen


def rocm_version(root: str | Path | None = None) -> str:
    """ROCm's release ("6.2.4") from <ROCM_PATH or /opt/rocm>/.info/version ("6.2.4-139"); "" when absent."""
    root = Path(root or os.environ.get("ROCM_PATH") or "/opt/rocm")
    match = re.match(r"\d+(\.\d+)+", read_file(root / ".info" / "version").strip())
    return match.group(0) if match else ""


def amd_tags_from_gpus(gpus: list[dict[str, Any]], rocm: str = "") -> dict[str, Any]:
    if not gpus:
        return {}
    first = gpus[0]
    tags: dict[str, Any] = {
        "hw.gpu": first["name"],
        "hw.gpu_vendor": "amd",
        "hw.gpu_count": len(gpus),
        "hw.gpu_driver": first.get("driver"),
        "sw.rocm": rocm,
    }
    if first.get("memory_mib"):
        tags["hw.gpu_memory_gb"] = round(first["memory_mib"] / 1024, 1)
    if first.get("power_limit_w"):
        tags["hw.gpu_power_limit_w"] = round(first["power_limit_w"])
    return tags


def _section(entry: dict[str, Any], key: str) -> dict[str, Any]:
    """One section of an amd-smi GPU entry ("asic", "vram", ...); {} when absent or "N/A"."""
    value = entry.get(key)
    return value if isinstance(value, dict) else {}


def _quantity(value: Any) -> float | None:
    """amd-smi's {"value": 750, "unit": "W"} (JSON) or "750 W" (text) -> 750.0; None for "N/A"."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, int | float):
        return float(value)
    match = re.match(r"\s*([\d.]+)", str(value or ""))
    return float(match.group(1)) if match else None


def _unit(value: Any) -> str:
    return value.get("unit", "") if isinstance(value, dict) else str(value or "").partition(" ")[2]


def _known(value: Any) -> str:
    return "" if value is None or str(value).strip().upper() == "N/A" else str(value).strip()
