"""framework=tensorflow: Keras 3 on TensorFlow. gpu = CUDA on Linux, Metal on Apple silicon (tensorflow-metal).
Light (no tensorflow import); the adapter is .adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.registry import schema
from trainbench.frameworks.keras import KerasConfig


@schema("framework", "tensorflow")
@dataclass
class TensorFlowConfig(KerasConfig):
    adapter: str = "trainbench.frameworks.tensorflow.adapter"
    package: str = "tensorflow"
    version_tags: ClassVar[tuple[str, ...]] = ("sw.keras", "sw.tensorflow")
    memory_growth: bool = True  # take GPU memory as the model needs it, so peak memory means something

    def max_devices(self) -> int | None:
        return None  # tf.distribute.MirroredStrategy over every GPU asked for

    def input_pipeline(self) -> str | None:
        return "tf.data"

    def min_memory_mb(self) -> int:
        return 1024  # measured floor 814 MB + 25% (benchmarks/memory_floor.py, results/2026-11-22-memory-floor.md)
