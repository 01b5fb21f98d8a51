"""macOS: the chip, its CPU and GPU cores, memory, a discrete GPU, power, from one sysctl, ioreg, system_profiler and
pmset call each.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainbench.measure.hardware.amd import amd_gpu_name
from trainbench.measure.hardware.reading import run_command

# One `sysctl` call answers every macOS question. `-i`: macOS's sysctl stops at the first name it does not know
# (Intel Macs have no hw.perflevel*, names come and go between releases); with -i unknown names are skipped.
MAC_SYSCTL_KEYS = (
    "hw.model",  # "MacBookAir10,1": the same chip in a fanless Air slows down under sustained load
    "hw.memsize",
    "hw.physicalcpu",
    "hw.logicalcpu",
    "hw.perflevel0.name",
    "hw.perflevel0.physicalcpu",
    "hw.perflevel1.name",
    "hw.perflevel1.physicalcpu",
    "machdep.cpu.brand_string",
    "kern.hv_vmm_present",  # 1 inside a macOS virtual machine
    "sysctl.proc_translated",  # 1 when this Python is x86_64 under Rosetta: no MPS, slow everything
)
MAC_SYSCTL = ("sysctl", "-i", *MAC_SYSCTL_KEYS)
MAC_AGX_IOREG = ("ioreg", "-r", "-d", "1", "-c", "AGXAccelerator")  # Apple silicon's GPU; nothing on Intel Macs
MAC_DISPLAYS = ("system_profiler", "SPDisplaysDataType", "-json")


def mac_tags() -> dict[str, Any]:
    """Chip, P/E cores, memory, GPU, power and VM facts of a Mac: sysctl, ioreg, pmset (quick);
    system_profiler (far slower) only when ioreg did not give the GPU (an Intel Mac, a VM)."""
    ioreg = run_command(*MAC_AGX_IOREG)
    return mac_tags_from_outputs(
        sysctl=run_command(*MAC_SYSCTL),
        ioreg=ioreg,
        system_profiler="" if "cores" in parse_ioreg_gpu(ioreg) else run_command(*MAC_DISPLAYS),
        pmset_batt=run_command("pmset", "-g", "batt"),
        pmset_settings=run_command("pmset", "-g"),
    )


def mac_tags_from_outputs(
    sysctl: str, ioreg: str, system_profiler: str = "", pmset_batt: str = "", pmset_settings: str = ""
) -> dict[str, Any]:
    """mac_tags() from what its commands printed (MAC_SYSCTL, MAC_AGX_IOREG, MAC_DISPLAYS, `pmset -g batt`,
    `pmset -g`): tests give it outputs captured on Macs."""
    tags = mac_tags_from_sysctl(parse_sysctl(sysctl))
    gpu = parse_ioreg_gpu(ioreg)
    if "cores" not in gpu:
        gpu = parse_system_profiler_displays(system_profiler) or gpu
    tags.update(mac_gpu_tags(gpu))
    tags["hw.power_source"] = parse_pmset_batt(pmset_batt)
    tags["hw.low_power_mode"] = parse_pmset_low_power_mode(pmset_settings)
    return {k: v for k, v in tags.items() if v is not None}


def mac_gpu_tags(gpu: dict[str, Any]) -> dict[str, Any]:
    """hw.gpu* tags of the GPU Metal computes on (parse_ioreg_gpu / parse_system_profiler_displays)."""
    tags: dict[str, Any] = {"hw.gpu_cores": gpu.get("cores"), "hw.gpu_memory_gb": gpu.get("memory_gb")}
    if gpu.get("model"):
        tags.update({"hw.gpu": gpu["model"], "hw.gpu_vendor": gpu.get("vendor", "apple"), "hw.gpu_count": 1})
    return {k: v for k, v in tags.items() if v is not None}


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl a b c` output ("a: value" per line) -> {"a": "value", ...}."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and re.fullmatch(r"[\w.]+", key.strip()):
            values[key.strip()] = value.strip()
    return values


def mac_tags_from_sysctl(values: dict[str, str]) -> dict[str, Any]:
    """hw.* tags from parse_sysctl() of MAC_SYSCTL_KEYS."""
    tags: dict[str, Any] = {}
    brand = values.get("machdep.cpu.brand_string", "")
    if brand.startswith("Apple"):  # an Intel Mac's brand string is a CPU, not an Apple chip
        tags["hw.chip"] = brand
    if values.get("hw.memsize", "").isdigit():
        tags["hw.memory_gb"] = round(int(values["hw.memsize"]) / 2**30, 1)
    if values.get("hw.physicalcpu", "").isdigit():
        tags["hw.cpu_cores"] = int(values["hw.physicalcpu"])
    if values.get("hw.logicalcpu", "").isdigit():
        tags["hw.cpu_logical"] = int(values["hw.logicalcpu"])
    if values.get("hw.model"):
        tags["hw.mac_model"] = values["hw.model"]
    tags.update(_perf_levels(values))
    if values.get("kern.hv_vmm_present") in ("0", "1"):
        tags["hw.virtualized"] = "vm" if values["kern.hv_vmm_present"] == "1" else "none"
    if values.get("sysctl.proc_translated") == "1":
        tags["hw.rosetta"] = "true"
    return tags


def _perf_levels(values: dict[str, str]) -> dict[str, int]:
    """Performance and efficiency cores. perflevel0 is the fastest level; the names confirm which is which."""
    tags = {}
    for level, default in (("0", "Performance"), ("1", "Efficiency")):
        cores = values.get(f"hw.perflevel{level}.physicalcpu", "")
        kind = values.get(f"hw.perflevel{level}.name", default).lower()
        if cores.isdigit() and kind in ("performance", "efficiency"):
            tags[f"hw.cpu_{kind}_cores"] = int(cores)
    return tags


def parse_ioreg_gpu(text: str) -> dict[str, Any]:
    """`ioreg -r -d 1 -c AGXAccelerator` -> {"model": "Apple M1 Max", "vendor": "apple", "cores": 32} (what it
    found). AGXAccelerator is Apple silicon's GPU driver: an Intel Mac prints nothing."""
    gpu: dict[str, Any] = {}
    model = re.search(r'"model"\s*=\s*"([^"]+)"', text)
    if model:
        gpu.update(model=model.group(1), vendor="apple")
    cores = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text)
    if cores:
        gpu["cores"] = int(cores.group(1))
    return gpu


def parse_ioreg_gpu_cores(text: str) -> int | None:
    return parse_ioreg_gpu(text).get("cores")


def parse_system_profiler_displays(json_text: str) -> dict[str, Any]:
    """`system_profiler SPDisplaysDataType -json` -> the GPU Metal computes on: {"model", "vendor", "cores" (Apple
    silicon), "memory_gb" (a GPU with memory of its own)}. An Apple GPU if there is one; else the first that is
    not Intel's: PyTorch's MPS skips low-power (integrated) GPUs, so an Intel Mac with an AMD GPU (a MacBook Pro's
    Radeon Pro, a Hackintosh's or an eGPU's Radeon RX) computes on the AMD one, whatever order the list has."""
    try:
        entries = json.loads(json_text)["SPDisplaysDataType"]
    except (ValueError, KeyError, TypeError):
        return {}
    gpus = [mac_display_gpu(entry) for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
    gpus = [gpu for gpu in gpus if gpu.get("model")]
    apple = [gpu for gpu in gpus if gpu["vendor"] == "apple"]
    not_integrated = [gpu for gpu in gpus if gpu["vendor"] != "intel"]
    return (apple or not_integrated or gpus or [{}])[0]


def mac_display_gpu(entry: dict[str, Any]) -> dict[str, Any]:
    """One SPDisplaysDataType entry -> {"model", "vendor", "cores"?, "memory_gb"?}. system_profiler names the vendor
    "sppci_vendor_Apple", "sppci_vendor_amd", "Intel" or "AMD (0x1002)" depending on the GPU and the macOS release."""
    model = str(entry.get("sppci_model") or "").strip()
    vendor = mac_gpu_vendor(str(entry.get("spdisplays_vendor") or ""), model)
    gpu: dict[str, Any] = {"model": amd_gpu_name(model) if vendor == "amd" else model, "vendor": vendor}
    if str(entry.get("sppci_cores", "")).isdigit():
        gpu["cores"] = int(entry["sppci_cores"])
    memory = _size_gb(str(entry.get("spdisplays_vram") or entry.get("_spdisplays_vram") or ""))  # never "_shared"
    if memory:
        gpu["memory_gb"] = memory
    return gpu


MAC_GPU_VENDORS = {"apple": "apple", "amd": "amd", "ati": "amd", "intel": "intel", "nvidia": "nvidia"}
MAC_GPU_MODELS = (("apple", "apple"), ("radeon", "amd"), ("amd", "amd"), ("intel", "intel"), ("nvidia", "nvidia"))


def mac_gpu_vendor(raw: str, model: str) -> str:
    """system_profiler's vendor ("sppci_vendor_amd", "Intel", "AMD (0x1002)") -> apple, amd, intel, nvidia; from the
    model's name when the vendor field is missing or unfamiliar."""
    text = re.sub(r"^sppci_vendor_", "", raw.strip(), flags=re.I)
    text = re.sub(r"\s*\(0x[0-9a-f]+\)$", "", text, flags=re.I).lower()
    if text in MAC_GPU_VENDORS:
        return MAC_GPU_VENDORS[text]
    for needle, vendor in MAC_GPU_MODELS:
        if needle in model.lower():
            return vendor
    return text or "unknown"


def _size_gb(text: str) -> float | None:
    """ "8 GB" -> 8.0, "4096 MB" -> 4.0; None for anything else."""
    match = re.fullmatch(r"\s*([\d.]+)\s*(GB|MB)\s*", text, flags=re.I)
    if not match:
        return None
    size = float(match.group(1)) / (1024 if match.group(2).upper() == "MB" else 1)
    return round(size, 1) if size > 0 else None


def parse_pmset_batt(text: str) -> str | None:
    """`pmset -g batt` -> "ac", "battery" or "ups" (from "Now drawing from 'AC Power'")."""
    match = re.search(r"drawing from '([^']+)'", text)
    if not match:
        return None
    source = match.group(1).lower()
    for word, name in (("ac", "ac"), ("battery", "battery"), ("ups", "ups")):
        if source.startswith(word):
            return name
    return source


def parse_pmset_low_power_mode(text: str) -> str | None:
    """`pmset -g` -> "true"/"false" from its lowpowermode line (or powermode 1 = low power on newer macOS)."""
    match = re.search(r"^\s*lowpowermode\s+(\d)", text, flags=re.MULTILINE)
    if match:
        return "true" if match.group(1) == "1" else "false"
    match = re.search(r"^\s*powermode\s+(\d)", text, flags=re.MULTILINE)
    if match:
        return "true" if match.group(1) == "1" else "false"
    return None
