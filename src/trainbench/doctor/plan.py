"""Which sweeps the doctor runs on this machine, and their tiny compute-bound cells."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainbench.doctor.checks import Finding
from trainbench.doctor.declared import facts, frameworks, title

# Every cell: timed training steps (task=benchmark) of a small MLP on one resident batch, with the timing
# check's extra figures; blocks paced to last 1.2 s together (an energy counter needs 1 s). Nine rounds of the
# check (16 steps each): the more rounds, the likelier each figure gets one that no other work slowed.
COMMON = [
    "task=benchmark",
    "model=mlp",
    "data=synthetic",
    "precision=fp32",
    "task.warmup_steps=10",
    "task.steps=4",
    "task.repeats=9",
    "task.min_time_s=1.2",
    "task.check_sync=true",
    "tracking.system_metrics_interval_s=0",
    "cell.timeout_s=150",
]
# The cell per device. It must be compute-bound: a block that times only the queueing must come out clearly
# faster than the device's events or its peak. On a GPU, the seed MLP with a batch that keeps the GPU busy well
# beyond the time PyTorch takes to launch a step: at batch 512 a data-centre GPU ends a step about as soon as it is
# launched, and a synchronize that waits for nothing does not stand out; at 4096 it does (H100 figures:
# results/2026-11-26-doctor-fastest-rounds). Apple GPUs are several times slower: 512 keeps them busy.
# On a CPU a narrow MLP at batch 16: steps of milliseconds in every framework. On Linux the CPU cells keep to one
# core: two threads on two busy cores wait on each other at every op, and their step times then swing by large
# factors on a machine running other work, which says nothing about the timing's soundness.
GPU_BATCH = {"apple": 512}  # other vendors: 4096
CPU_CELL = ["model.hidden_sizes=[256]", "batch_size=16", *(["cell.cpus=1"] if sys.platform == "linux" else [])]


@dataclass(frozen=True)
class Sweep:
    device: str  # cpu | gpu
    frameworks: list[str]
    gpu_vendor: str = ""  # apple | nvidia | amd: what the GPU cell's batch is sized for

    def overrides(self) -> list[str]:
        cell = CPU_CELL if self.device == "cpu" else [f"batch_size={GPU_BATCH.get(self.gpu_vendor, 4096)}"]
        return [*COMMON, *cell, f"framework={','.join(self.frameworks)}", f"device={self.device}"]


def plan(selected: Sequence[str], installed: set[str], host: Mapping[str, str]) -> tuple[list[Sweep], list[Finding]]:
    """The sweeps to run and the lines for what is not run: frameworks not installed, no GPU. On a machine
    with a GPU, every framework runs there and PyTorch on the CPU too (on a Mac, JAX, which trainbench runs on
    CUDA GPUs only, and TensorFlow without tensorflow-metal: on the CPU only); without one, all on the CPU."""
    known = frameworks()
    notes = [
        Finding("warn", title(name), "install", f"not installed, not checked: {facts(known[name]).install}")
        for name in selected
        if name not in installed
    ]
    runnable = [name for name in selected if name in installed]
    vendor = host.get("hw.gpu_vendor")
    if not vendor:
        notes.append(Finding("ok", "GPU", "device", "none on this machine (no NVIDIA, AMD or Apple GPU): CPU cells"))
        return ([Sweep("cpu", runnable)] if runnable else []), notes
    cpu_only = set()
    for name in runnable:
        why = known[name].cpu_only_on(vendor)
        if why:
            cpu_only.add(name)
            notes.append(Finding(why[0], title(name), "device", why[1]))
    gpu = [name for name in runnable if name not in cpu_only]
    cpu = [name for name in runnable if facts(known[name]).also_on_cpu or name in cpu_only]
    return [s for s in (Sweep("gpu", gpu, vendor), Sweep("cpu", cpu)) if s.frameworks], notes
