"""framework=jax: Keras 3 on JAX. The train step is always compiled by XLA. gpu = CUDA (a CUDA jaxlib).
Light (no jax import); the adapter is .adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import DoctorFacts
from trainbench.frameworks.keras import KerasConfig

# How a data-parallel cell's train step runs over its devices (framework.data_parallel_step):
# - per_device: trainbench's own jitted step, shard_map over the devices: each device runs the model on its slice
#   (BatchNorm statistics over that slice, as PyTorch's DDP computes them), the gradients are averaged across the
#   devices before the optimizer step, and the BatchNorm moving statistics after it.
# - keras: keras.distribution.DataParallel as XLA partitions Keras' own train step over the global batch: each
#   BatchNorm's statistics are reduced across the devices layer by layer (synchronised BatchNorm).
DATA_PARALLEL_STEPS = ("per_device", "keras")


@schema("framework", "jax")
@dataclass
class JaxConfig(KerasConfig):
    adapter: ClassVar[str] = "trainbench.frameworks.jax.adapter"
    package: str = "jax"
    node_joiner: ClassVar[str | None] = "trainbench.frameworks.jax.nodes"  # jax.distributed, a process per node
    version_tags: ClassVar[tuple[str, ...]] = ("sw.keras", "sw.jax")
    # its notes on platforms it could not start ("Unable to initialize backend 'cuda'"): the cell says what ran where
    quiet_loggers: ClassVar[tuple[str, ...]] = ("jax._src.xla_bridge",)
    doctor: ClassVar[DoctorFacts | None] = DoctorFacts(
        title="JAX",
        module="jax",
        install='pip install -e ".[jax]" -c locks/constraints.txt',
        gpu_install={"nvidia": "pip install 'jax[cuda12]'"},
        rank=3,
    )
    preallocate: bool = False  # false: take GPU memory as needed (XLA_PYTHON_CLIENT_PREALLOCATE), not 75% up front
    data_parallel_step: str = "per_device"  # DATA_PARALLEL_STEPS; Keras' model.fit (task.timed_region=fit) is keras

    def check(self, at: str) -> None:
        super().check(at)
        need(
            self.data_parallel_step in DATA_PARALLEL_STEPS,
            f"{at}.data_parallel_step",
            self.data_parallel_step,
            f"choose one of {', '.join(DATA_PARALLEL_STEPS)}",
        )

    def cpu_only_on(self, gpu_vendor: str) -> tuple[str, str] | None:
        if gpu_vendor == "apple":
            return ("ok", "trainbench runs JAX on CUDA GPUs only: checked on the CPU")
        return None

    def max_devices(self) -> int | None:
        return None  # one process over every device asked for

    def input_pipeline(self) -> str | None:
        return "host threads"  # JAX has no loader of its own: batches prepared by a thread pool, prefetched

    def min_memory_mb(self) -> int:
        return 1024  # the measured floor + 25% (results/2026-11-22-memory-floor.md)
