"""framework=tensorflow: Keras 3 on TensorFlow. gpu = CUDA on Linux, Metal on Apple silicon (tensorflow-metal).
Light (no tensorflow import); the adapter is .adapter."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.registry import schema
from trainbench.config.schema import DoctorFacts
from trainbench.frameworks.keras import KerasConfig


@schema("framework", "tensorflow")
@dataclass
class TensorFlowConfig(KerasConfig):
    adapter: ClassVar[str] = "trainbench.frameworks.tensorflow.adapter"
    package: str = "tensorflow"
    version_tags: ClassVar[tuple[str, ...]] = ("sw.keras", "sw.tensorflow")
    doctor: ClassVar[DoctorFacts | None] = DoctorFacts(
        title="TensorFlow",
        module="tensorflow",
        install='pip install -e ".[tensorflow]" -c locks/constraints.txt (on a Mac with tensorflow-metal)',
        gpu_install={
            "apple": "tensorflow-metal 1.2 loads only with TensorFlow 2.18.1-2.19 on Python <= 3.12",
            "nvidia": "pip install 'tensorflow[and-cuda]==2.21.*'",
        },
        rank=1,
    )
    memory_growth: bool = True  # take GPU memory as the model needs it, so peak memory means something

    def cpu_only_on(self, gpu_vendor: str) -> tuple[str, str] | None:
        if gpu_vendor != "apple":
            return None
        try:
            importlib.metadata.version("tensorflow-metal")
        except importlib.metadata.PackageNotFoundError:
            return (
                "warn",
                "tensorflow-metal not installed: checked on the CPU only (pip install tensorflow-metal; it loads "
                "with TensorFlow 2.18.1-2.19 on Python <= 3.12)",
            )
        return None

    def max_devices(self) -> int | None:
        return None  # tf.distribute.MirroredStrategy over every GPU asked for

    def input_pipeline(self) -> str | None:
        return "tf.data"

    def min_memory_mb(self) -> int:
        return 1024  # the measured floor + 25% (results/2026-11-22-memory-floor.md)
