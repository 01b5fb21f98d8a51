"""What machine a cell ran on, as hw.* tags; probed without importing a deep-learning framework.

Each probe reads one source (platform, /proc, /sys, sysctl, ioreg, system_profiler, pmset, NVML, amdsmi) and
gives up quietly when it is not there: a missing fact is a missing tag, never a failed cell. Parsers are pure
functions of the text a command printed, so tests check them on captured outputs (tests/samples/) from
machines we do not have.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psutil

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
NVIDIA_SMI_QUERY = "name,memory.total,driver_version,power.limit"


@functools.lru_cache(maxsize=1)
def _probe() -> dict[str, str]:
    tags: dict[str, Any] = {
        "hw.os": os_name(),
        "hw.machine": platform.machine(),
        "hw.cpu": cpu_name(),
        "hw.cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "hw.cpu_logical": psutil.cpu_count(),  # a VM's vCPUs: what its label counts (hardware.identity)
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


# What frameworks call a discrete GPU: PyTorch says "cuda" on ROCm too (HIP stands in for CUDA), JAX says "gpu"
# or "rocm". Whose GPU it is comes from the probed tags (hw.gpu_vendor), never from this string.
GPU_BACKENDS = ("cuda", "rocm", "hip", "gpu")
# Metal, through PyTorch (mps) or tensorflow-metal / MLX (metal): Apple silicon's GPU, or an Intel Mac's AMD GPU.
METAL_BACKENDS = ("mps", "metal")
VENDOR_GPU = {"nvidia": "NVIDIA GPU", "amd": "AMD GPU", "intel": "Intel GPU"}


def label(backend: str, tags: dict[str, str]) -> str:
    """The machine a figure was measured on, named by what changes its speed: the GPU model with its memory
    ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090 (24 GB)", an Intel Mac's "AMD Radeon Pro 5500M (8 GB)"
    under Metal), the Apple chip with its GPU or CPU cores ("Apple M1 Max GPU (32 cores)", "Apple M1 Max CPU
    (10 cores)"), the CPU model with its physical cores, or its vCPUs in a virtual machine ("AMD EPYC 7763 CPU
    (64 cores)", "Intel Xeon CPU (2 vCPUs)"). A count the tags do not have is said to be unknown, so two
    machines that may differ (a 24-core and a 32-core M1 Max) are never one column. Pure: the report,
    `trainbench results`, sweep.resume and scaling baselines apply it to any run's tags, old ones included, and
    a cell records it as hw.label."""
    chip = tags.get("hw.chip")
    if backend in GPU_BACKENDS or (backend in METAL_BACKENDS and not _apple_gpu(tags)):
        return _gpu_label(tags)
    if backend in METAL_BACKENDS:
        name = f"{chip} GPU" if chip else tags.get("hw.gpu", "Apple GPU")
        return f"{name} ({_count(tags.get('hw.gpu_cores'), 'cores')})"
    name = f"{chip} CPU" if chip else short_cpu_name(tags.get("hw.cpu", "unknown"))
    if in_virtual_machine(tags):
        return f"{name} ({_count(tags.get('hw.cpu_logical'), 'vCPUs')})"
    return f"{name} ({_count(tags.get('hw.cpu_cores'), 'cores')})"


def _apple_gpu(tags: dict[str, str]) -> bool:
    """Whether a Metal run's GPU is Apple's: hw.gpu_vendor says so, or is absent (published references name
    only the chip). An Intel Mac's AMD or Intel GPU is named as other GPUs are, by model and memory."""
    return tags.get("hw.gpu_vendor", "apple") in ("", "apple")


def _gpu_label(tags: dict[str, str]) -> str:
    """A GPU that is not Apple's: its model with its memory, rounded up as sold; an Intel Mac's integrated GPU
    has none of its own."""
    vendor = tags.get("hw.gpu_vendor", "nvidia")  # runs recorded before hw.gpu_vendor existed are NVIDIA's
    name = tags.get("hw.gpu") or VENDOR_GPU.get(vendor, "GPU")
    if GB_IN_NAME.search(name):
        return name
    if vendor == "intel":
        return f"{name} (shared memory)"
    return f"{name} ({_gigabytes(tags.get('hw.gpu_memory_gb'))})"


def run_label(tags: dict[str, str]) -> str:
    """label() of a recorded run (a cell, a reference, an imported run), from its own tags."""
    return label(tags.get("trainbench.backend", "cpu"), tags)


GB_IN_NAME = re.compile(r"\d+\s*GB\b", re.IGNORECASE)  # "NVIDIA A100-SXM4-80GB": the name says its memory
# What hw.virtualized may name that is only a container: the CPUs are the host's, so physical cores count.
CONTAINERS = ("docker", "podman", "kubernetes", "lxc", "containerd", "systemd-nspawn", "openvz", "rkt", "proot")


def in_virtual_machine(tags: dict[str, str]) -> bool:
    """Whether hw.virtualized names a hypervisor (kvm, amazon, vm on a Mac ...), not only containers."""
    kinds = [k.strip() for k in tags.get("hw.virtualized", "").split(",") if k.strip()]
    return any(kind not in CONTAINERS and kind != "none" for kind in kinds)


def _count(value: str | None, unit: str) -> str:
    text = str(value or "").strip()
    return f"{int(float(text))} {unit}" if re.fullmatch(r"\d+(\.0+)?", text) and float(text) > 0 else f"{unit} unknown"


def _gigabytes(value: str | None) -> str:
    """NVML's total in GiB as sold: 79.6 (an H100 80GB), 11.2 (a K80's 12 GB), 140.4 (an H200) -> 80, 12, 141.
    The driver keeps a little back (more with ECC on), so the figure is rounded up, never down."""
    try:
        gib = float(str(value))
    except ValueError:
        return "memory unknown"
    return f"{math.ceil(gib - 0.02)} GB" if gib > 0 else "memory unknown"


def labels_for(device: str, tags: dict[str, str]) -> set[str]:
    """The hw.label a cell asking for `device` (cpu, gpu, auto) gets on the machine `tags` describe; known
    before the cell runs, from the probes alone (resume compares it with earlier runs)."""
    gpus = set()
    if tags.get("hw.gpu") and tags.get("hw.gpu_vendor") != "apple":  # NVIDIA, AMD, or an Intel Mac's GPU
        gpus.add(_gpu_label(tags))
    if tags.get("hw.chip"):
        gpus.add(label("mps", tags))
    if device == "gpu":
        return gpus
    if device == "cpu" or not gpus:
        return {label("cpu", tags)}
    return gpus


# ----------------------------------------------------------------------------------------------- CPU, OS


def os_name() -> str:
    if platform.system() == "Darwin":
        return f"macOS {platform.mac_ver()[0]}"
    if platform.system() == "Linux":
        return f"Linux {platform.release().split('-')[0]}"
    return f"{platform.system()} {platform.release()}"


def cpu_name() -> str:
    if platform.system() == "Darwin":
        return _run("sysctl", "-n", "machdep.cpu.brand_string") or platform.processor()
    return parse_proc_cpuinfo(_read("/proc/cpuinfo")) or platform.processor()


# Arm Ltd. cores by "CPU part" (implementer 0x41), for Arm Linux where /proc/cpuinfo has no model name:
# Grace and Graviton 4 are Neoverse-V2, Graviton 3 is V1, Graviton 2 and Ampere Altra are N1.
ARM_PARTS = {
    "0xd03": "Cortex-A53",
    "0xd08": "Cortex-A72",
    "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1",
    "0xd40": "Neoverse-V1",
    "0xd49": "Neoverse-N2",
    "0xd4f": "Neoverse-V2",
    "0xd84": "Neoverse-V3",
    "0xd8e": "Neoverse-N3",
}


def parse_proc_cpuinfo(text: str) -> str:
    """The CPU model from /proc/cpuinfo: "model name" (x86), the Arm core from "CPU part", else "Model"."""
    found = _cpuinfo_field(text, "model name")
    if found:
        return found
    if _cpuinfo_field(text, "CPU implementer").lower() == "0x41":
        part = ARM_PARTS.get(_cpuinfo_field(text, "CPU part").lower())
        if part:
            return f"ARM {part}"
    return _cpuinfo_field(text, "Model") or _cpuinfo_field(text, "Hardware")


def parse_proc_cpuinfo_cores(text: str) -> int | None:
    """Physical cores in /proc/cpuinfo: distinct (physical id, core id) pairs; None where not listed."""
    cores = set()
    for block in text.split("\n\n"):
        package, core = _cpuinfo_field(block, "physical id"), _cpuinfo_field(block, "core id")
        if package and core:
            cores.add((package, core))
    return len(cores) or None


def _cpuinfo_field(text: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else ""


def short_cpu_name(cpu: str) -> str:
    """ "Intel(R) Xeon(R) Platinum 8480+" -> "Intel Xeon Platinum 8480+ CPU"; "AMD EPYC 7763 64-Core Processor"
    -> "AMD EPYC 7763 CPU"; a VM's "Intel(R) Xeon(R) Processor" -> "Intel Xeon CPU"."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", cpu)
    name = re.sub(r"\s*@.*$", "", name)
    name = re.sub(r"\b(\d+-Core )?Processor\b", "", name)
    name = re.sub(r"\s+", " ", name).strip()
    return name if name.endswith("CPU") else f"{name} CPU"


# ----------------------------------------------------------------------------------------------- macOS


def mac_tags() -> dict[str, Any]:
    """Chip, P/E cores, memory, GPU, power and VM facts of a Mac: sysctl, ioreg, pmset (each < 0.1 s);
    system_profiler (about a second) only when ioreg did not give the GPU (an Intel Mac, a VM)."""
    ioreg = _run(*MAC_AGX_IOREG)
    return mac_tags_from_outputs(
        sysctl=_run(*MAC_SYSCTL),
        ioreg=ioreg,
        system_profiler="" if "cores" in parse_ioreg_gpu(ioreg) else _run(*MAC_DISPLAYS),
        pmset_batt=_run("pmset", "-g", "batt"),
        pmset_settings=_run("pmset", "-g"),
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


# ----------------------------------------------------------------------------------------------- Linux


def linux_power_source(root: str | Path = "/sys/class/power_supply") -> str | None:
    """ "ac" or "battery" from the kernel's power-supply class; None when nothing there is readable
    (servers and most VMs list no supply: no tag rather than a guess)."""
    mains_online = None
    discharging = False
    try:
        supplies = sorted(Path(root).iterdir())
    except OSError:
        return None
    for supply in supplies:
        kind = _read(supply / "type").strip()
        if kind in ("Mains", "USB", "USB_C", "USB_PD"):
            online = _read(supply / "online").strip()
            if online in ("0", "1"):
                mains_online = bool(mains_online) or online == "1"
        elif kind == "Battery":
            status = _read(supply / "status").strip()
            discharging = discharging or status == "Discharging"
    if mains_online is None and not discharging:
        return None
    return "battery" if discharging and not mains_online else "ac"


# ------------------------------------------------------------------------------------- VMs and containers

HYPERVISORS = (  # DMI product_name / sys_vendor text -> what to call it
    ("kvm", "kvm"),
    ("qemu", "qemu"),
    ("vmware", "vmware"),
    ("virtualbox", "oracle"),
    ("amazon ec2", "amazon"),
    ("google", "google"),
    ("microsoft", "microsoft"),
    ("xen", "xen"),
    ("parallels", "parallels"),
)


def virtualization(root: str | Path = "/", detect_virt: str | None = None) -> str | None:
    """Container and hypervisor this runs under, e.g. "docker", "kvm", "docker,amazon"; "none" only when
    systemd-detect-virt says so and nothing else points to one; None when nothing can tell.

    `root` and `detect_virt` (systemd-detect-virt's output) let tests describe another machine."""
    root = Path(root)
    found: list[str] = []
    if (root / ".dockerenv").exists():
        found.append("docker")
    if (root / "run/.containerenv").exists():
        found.append("podman")
    found.append(parse_cgroup_container(_read(root / "proc/1/cgroup")) or "")
    found.append(
        parse_dmi_hypervisor(_read(root / "sys/class/dmi/id/product_name"), _read(root / "sys/class/dmi/id/sys_vendor"))
        or ""
    )
    if detect_virt is None and str(root) == "/" and shutil.which("systemd-detect-virt"):
        detect_virt = _run("systemd-detect-virt")
    detect_virt = (detect_virt or "").strip()
    if detect_virt and detect_virt != "none":
        found.append(detect_virt)
    kinds = list(dict.fromkeys(k for k in found if k))  # ordered, unique
    if kinds:
        return ",".join(kinds)
    return "none" if detect_virt == "none" else None


def parse_cgroup_container(text: str) -> str | None:
    """Container runtime named in /proc/1/cgroup (cgroup v1 paths like /docker/<id>, /kubepods/...)."""
    for pattern, name in (
        (r"kubepods", "kubernetes"),
        (r"/docker[/-]", "docker"),
        (r"libpod", "podman"),
        (r"/lxc[/.]", "lxc"),
        (r"containerd", "containerd"),
    ):
        if re.search(pattern, text):
            return name
    return None


def parse_dmi_hypervisor(product_name: str, sys_vendor: str) -> str | None:
    text = f"{product_name} {sys_vendor}".lower()
    for needle, name in HYPERVISORS:
        if needle in text:
            return name
    return None


# ----------------------------------------------------------------------------------------------- NVIDIA


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
            "hw.gpu": _text(pynvml.nvmlDeviceGetName(first)),
            "hw.gpu_vendor": "nvidia",
            "hw.gpu_count": len(handles),
            "hw.gpu_memory_gb": round(pynvml.nvmlDeviceGetMemoryInfo(first).total / 2**30, 1),
            "hw.gpu_driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        }
        tags["hw.gpu_power_limit_w"] = _quietly(lambda: round(pynvml.nvmlDeviceGetEnforcedPowerLimit(first) / 1000))
        tags["sw.cuda_driver"] = _quietly(lambda: cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion_v2()))
        return tags
    except Exception:
        return {}
    finally:
        _quietly(pynvml.nvmlShutdown)


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
            handle = _quietly(lambda item=item: pynvml.nvmlDeviceGetHandleByUUID(item))
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
        parse_nvidia_smi_query(_run("nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"))
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


# ----------------------------------------------------------------------------------------------- AMD

AMD_SMI_STATIC = ("amd-smi", "static", "--asic", "--vram", "--driver", "--limit", "--json")
ROCM_SMI_QUERY = ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json")


def amd_tags(kfd: str | Path = "/dev/kfd") -> dict[str, Any]:
    """hw.gpu* and sw.rocm of a ROCm machine, from amdsmi (ROCm's Python library) when it imports, else from
    `amd-smi static` or `rocm-smi` output; nothing without /dev/kfd (the ROCm compute driver's device)."""
    if not Path(kfd).exists():
        return {}
    gpus = amdsmi_gpus()
    if not gpus and shutil.which("amd-smi"):
        gpus = parse_amd_smi_static(_run(*AMD_SMI_STATIC))
    if not gpus and shutil.which("rocm-smi"):
        gpus = parse_rocm_smi(_run(*ROCM_SMI_QUERY))
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
        _quietly(amdsmi.amdsmi_shut_down)


def _amdsmi_gpu(amdsmi: Any, handle: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "name": amd_gpu_name(_quietly(lambda: amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"]) or ""),
        "driver": _quietly(lambda: amdsmi.amdsmi_get_gpu_driver_info(handle)["driver_version"]) or "",
    }
    memory_mib = _quietly(lambda: amdsmi.amdsmi_get_gpu_vram_info(handle)["vram_size"])  # "MB" (MiB)
    if isinstance(memory_mib, int | float) and memory_mib > 0:
        gpu["memory_mib"] = float(memory_mib)
    power_cap = _quietly(lambda: amdsmi.amdsmi_get_power_cap_info(handle)["power_cap"])  # microwatts
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
    match = re.match(r"\d+(\.\d+)+", _read(root / ".info" / "version").strip())
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


# ----------------------------------------------------------------------------------------------- helpers


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _quietly(call: Any) -> Any:
    try:
        return call()
    except Exception:
        return None


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
