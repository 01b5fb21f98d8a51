"""hw.label: the machine a figure was measured on, named by what changes its speed; pure functions of a run's tags."""

from __future__ import annotations

import math
import re

from trainbench.measure.hardware.host import short_cpu_name

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
