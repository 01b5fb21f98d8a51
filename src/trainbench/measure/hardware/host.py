"""The host itself: its OS, its CPU (from /proc/cpuinfo where the platform module says too little), whether it runs on
battery, and whether it is a virtual machine or a container.
"""

from __future__ import annotations

import platform
import re
import shutil
from pathlib import Path

from trainbench.measure.hardware.reading import read_file, run_command


def os_name() -> str:
    if platform.system() == "Darwin":
        return f"macOS {platform.mac_ver()[0]}"
    if platform.system() == "Linux":
        return f"Linux {platform.release().split('-')[0]}"
    return f"{platform.system()} {platform.release()}"


def cpu_name() -> str:
    if platform.system() == "Darwin":
        return run_command("sysctl", "-n", "machdep.cpu.brand_string") or platform.processor()
    return parse_proc_cpuinfo(read_file("/proc/cpuinfo")) or platform.processor()


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
        kind = read_file(supply / "type").strip()
        if kind in ("Mains", "USB", "USB_C", "USB_PD"):
            online = read_file(supply / "online").strip()
            if online in ("0", "1"):
                mains_online = bool(mains_online) or online == "1"
        elif kind == "Battery":
            status = read_file(supply / "status").strip()
            discharging = discharging or status == "Discharging"
    if mains_online is None and not discharging:
        return None
    return "battery" if discharging and not mains_online else "ac"


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
    found.append(parse_cgroup_container(read_file(root / "proc/1/cgroup")) or "")
    found.append(
        parse_dmi_hypervisor(
            read_file(root / "sys/class/dmi/id/product_name"), read_file(root / "sys/class/dmi/id/sys_vendor")
        )
        or ""
    )
    if detect_virt is None and str(root) == "/" and shutil.which("systemd-detect-virt"):
        detect_virt = run_command("systemd-detect-virt")
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
