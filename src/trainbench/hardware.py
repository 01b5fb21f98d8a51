"""What machine a cell ran on, as hw.* tags; probed without importing a deep-learning framework.

Each probe reads one source (platform, /proc, /sys, sysctl, ioreg, pmset, NVML) and gives up quietly when
it is not there: a missing fact is a missing tag, never a failed cell. Parsers are pure functions of the
text a command printed, so tests check them on captured outputs (tests/samples/) from machines we do not
have.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psutil

# One `sysctl` call answers every macOS question; keys absent on a machine are simply not printed.
MAC_SYSCTL_KEYS = (
    "hw.memsize",
    "hw.physicalcpu",
    "hw.perflevel0.name",
    "hw.perflevel0.physicalcpu",
    "hw.perflevel1.name",
    "hw.perflevel1.physicalcpu",
    "machdep.cpu.brand_string",
    "kern.hv_vmm_present",  # 1 inside a macOS virtual machine
    "sysctl.proc_translated",  # 1 when this Python is x86_64 under Rosetta: no MPS, slow everything
)
NVIDIA_SMI_QUERY = "name,memory.total,driver_version,power.limit"


@functools.lru_cache(maxsize=1)
def _probe() -> dict[str, str]:
    tags: dict[str, Any] = {
        "hw.os": os_name(),
        "hw.machine": platform.machine(),
        "hw.cpu": cpu_name(),
        "hw.cpu_cores": psutil.cpu_count(logical=False) or psutil.cpu_count(),
        "hw.memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    if platform.system() == "Darwin":
        tags.update(mac_tags())
    else:
        tags["hw.power_source"] = linux_power_source()
    tags["hw.virtualized"] = tags.get("hw.virtualized") or virtualization()
    tags.update(nvidia_tags())
    return {k: str(v) for k, v in tags.items() if v not in (None, "")}


def host_tags() -> dict[str, str]:
    """hw.* (and sw.cuda_driver) tags of this machine, probed once per process."""
    return dict(_probe())


def label(backend: str, tags: dict[str, str]) -> str:
    """The short name charts group by: "NVIDIA H100 80GB HBM3", "Apple M1 Max GPU", "Intel Xeon ... CPU"."""
    chip = tags.get("hw.chip")
    if backend == "cuda":
        return tags.get("hw.gpu", "NVIDIA GPU")
    if backend in ("mps", "metal"):
        return f"{chip} GPU" if chip else tags.get("hw.gpu", "Apple GPU")
    return f"{chip} CPU" if chip else short_cpu_name(tags.get("hw.cpu", "unknown"))


def labels_for(device: str, tags: dict[str, str]) -> set[str]:
    """The hw.label a cell asking for `device` (cpu, gpu, auto) gets on the machine `tags` describe; known
    before the cell runs, from the probes alone (resume compares it with earlier runs)."""
    gpus = set()
    if tags.get("hw.gpu"):
        gpus.add(label("cuda", tags))
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
    """Chip, P/E cores, memory, GPU cores, power and VM facts of a Mac: sysctl, ioreg, pmset (each < 0.1 s);
    system_profiler (about a second) only when ioreg did not give the GPU."""
    tags = mac_tags_from_sysctl(parse_sysctl(_run("sysctl", *MAC_SYSCTL_KEYS)))
    gpu = parse_ioreg_gpu(_run("ioreg", "-r", "-d", "1", "-c", "AGXAccelerator"))
    if "cores" not in gpu:
        gpu = parse_system_profiler_displays(_run("system_profiler", "SPDisplaysDataType", "-json")) or gpu
    if gpu.get("model"):
        tags["hw.gpu"] = gpu["model"]
        tags["hw.gpu_count"] = 1
    tags["hw.gpu_cores"] = gpu.get("cores")
    tags["hw.power_source"] = parse_pmset_batt(_run("pmset", "-g", "batt"))
    tags["hw.low_power_mode"] = parse_pmset_low_power_mode(_run("pmset", "-g"))
    return tags


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
    """`ioreg -r -d 1 -c AGXAccelerator` -> {"model": "Apple M1 Max", "cores": 32} (what it found)."""
    gpu: dict[str, Any] = {}
    cores = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text)
    if cores:
        gpu["cores"] = int(cores.group(1))
    model = re.search(r'"model"\s*=\s*"([^"]+)"', text)
    if model:
        gpu["model"] = model.group(1)
    return gpu


def parse_ioreg_gpu_cores(text: str) -> int | None:
    return parse_ioreg_gpu(text).get("cores")


def parse_system_profiler_displays(json_text: str) -> dict[str, Any]:
    """`system_profiler SPDisplaysDataType -json` -> {"model": ..., "cores": ...} of the first GPU listed."""
    try:
        gpus = json.loads(json_text)["SPDisplaysDataType"]
        first = gpus[0]
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
    gpu: dict[str, Any] = {}
    if first.get("sppci_model"):
        gpu["model"] = first["sppci_model"]
    if str(first.get("sppci_cores", "")).isdigit():
        gpu["cores"] = int(first["sppci_cores"])
    return gpu


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
    tags: dict[str, Any] = {"hw.gpu": first["name"], "hw.gpu_count": len(gpus), "hw.gpu_driver": first["driver"]}
    if "memory_mib" in first:
        tags["hw.gpu_memory_gb"] = round(first["memory_mib"] / 1024, 1)
    if "power_limit_w" in first:
        tags["hw.gpu_power_limit_w"] = round(first["power_limit_w"])
    return tags


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
