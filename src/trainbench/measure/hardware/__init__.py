"""What machine a cell ran on, as hw.* tags; probed without importing a deep-learning framework.

Each probe reads one source (platform, /proc, /sys, sysctl, ioreg, system_profiler, pmset, NVML, amdsmi) and
gives up quietly when it is not there: a missing fact is a missing tag, never a failed cell. Parsers are pure
functions of the text a command printed, so tests check them on captured outputs (tests/samples/) from
machines we do not have.

The modules: `probe` (host_tags), `labels` (hw.label from tags), and one per source: `host` (OS, CPU, power, VMs and
containers), `mac`, `nvidia`, `amd`.
"""

from __future__ import annotations

from trainbench.measure.hardware.amd import (
    AMD_SMI_STATIC,
    ROCM_SMI_QUERY,
    amd_gpu_name,
    amd_tags,
    amd_tags_from_gpus,
    amd_visible,
    amdsmi_gpus,
    parse_amd_smi_static,
    parse_rocm_smi,
    rocm_version,
)
from trainbench.measure.hardware.host import (
    ARM_PARTS,
    HYPERVISORS,
    cpu_name,
    linux_power_source,
    os_name,
    parse_cgroup_container,
    parse_dmi_hypervisor,
    parse_proc_cpuinfo,
    parse_proc_cpuinfo_cores,
    short_cpu_name,
    virtualization,
)
from trainbench.measure.hardware.labels import (
    CONTAINERS,
    GB_IN_NAME,
    GPU_BACKENDS,
    METAL_BACKENDS,
    VENDOR_GPU,
    in_virtual_machine,
    label,
    labels_for,
    run_label,
)
from trainbench.measure.hardware.mac import (
    MAC_AGX_IOREG,
    MAC_DISPLAYS,
    MAC_GPU_MODELS,
    MAC_GPU_VENDORS,
    MAC_SYSCTL,
    MAC_SYSCTL_KEYS,
    mac_display_gpu,
    mac_gpu_tags,
    mac_gpu_vendor,
    mac_tags,
    mac_tags_from_outputs,
    mac_tags_from_sysctl,
    parse_ioreg_gpu,
    parse_ioreg_gpu_cores,
    parse_pmset_batt,
    parse_pmset_low_power_mode,
    parse_sysctl,
    parse_system_profiler_displays,
)
from trainbench.measure.hardware.nvidia import (
    NVIDIA_SMI_QUERY,
    cuda_version_text,
    nvidia_smi_tags,
    nvidia_tags,
    nvidia_tags_from_smi,
    nvml_visible_handles,
    parse_nvidia_smi_query,
)
from trainbench.measure.hardware.probe import host_tags

__all__ = [
    "AMD_SMI_STATIC",
    "ARM_PARTS",
    "CONTAINERS",
    "GB_IN_NAME",
    "GPU_BACKENDS",
    "HYPERVISORS",
    "MAC_AGX_IOREG",
    "MAC_DISPLAYS",
    "MAC_GPU_MODELS",
    "MAC_GPU_VENDORS",
    "MAC_SYSCTL",
    "MAC_SYSCTL_KEYS",
    "METAL_BACKENDS",
    "NVIDIA_SMI_QUERY",
    "ROCM_SMI_QUERY",
    "VENDOR_GPU",
    "amd_gpu_name",
    "amd_tags",
    "amd_tags_from_gpus",
    "amd_visible",
    "amdsmi_gpus",
    "cpu_name",
    "cuda_version_text",
    "host_tags",
    "in_virtual_machine",
    "label",
    "labels_for",
    "linux_power_source",
    "mac_display_gpu",
    "mac_gpu_tags",
    "mac_gpu_vendor",
    "mac_tags",
    "mac_tags_from_outputs",
    "mac_tags_from_sysctl",
    "nvidia_smi_tags",
    "nvidia_tags",
    "nvidia_tags_from_smi",
    "nvml_visible_handles",
    "os_name",
    "parse_amd_smi_static",
    "parse_cgroup_container",
    "parse_dmi_hypervisor",
    "parse_ioreg_gpu",
    "parse_ioreg_gpu_cores",
    "parse_nvidia_smi_query",
    "parse_pmset_batt",
    "parse_pmset_low_power_mode",
    "parse_proc_cpuinfo",
    "parse_proc_cpuinfo_cores",
    "parse_rocm_smi",
    "parse_sysctl",
    "parse_system_profiler_displays",
    "rocm_version",
    "run_label",
    "short_cpu_name",
    "virtualization",
]
