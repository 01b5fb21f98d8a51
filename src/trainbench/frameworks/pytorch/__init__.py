"""framework=pytorch: its config and what it can build, light (no torch import). The adapter is .adapter."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.registry import schema
from trainbench.config.schema import FrameworkConfig, MlpModel, ModelConfig, TransformerModel, VisionModel


@schema("framework", "pytorch")
@dataclass
class PyTorchConfig(FrameworkConfig):
    adapter: str = "trainbench.frameworks.pytorch.adapter"
    package: str = "torch"
    rank_launcher: ClassVar[str | None] = "trainbench.frameworks.pytorch.distributed"  # DDP: a process per device
    mps_fallback: bool = True  # ops MPS lacks run on the CPU instead of failing (PYTORCH_ENABLE_MPS_FALLBACK)
    cudnn_benchmark: bool = True  # fixed shapes every step: let cuDNN pick its fastest algorithms in warm-up

    def for_probes(self) -> PyTorchConfig:
        # cudnn.benchmark autotunes every convolution again for each new input shape, and each probe is a new
        # batch size: on an H100, ResNet-50's probes near the edge took tens of seconds each, nearly all of it
        # autotuning. Without it cuDNN's heuristics pick at once. The cell, with the user's setting, may then
        # autotune to algorithms with larger workspaces than the probes used; the autotuner skips those whose
        # workspace cannot be allocated, and batch_size=max's headroom leaves them room.
        return dataclasses.replace(self, cudnn_benchmark=False)

    def builds(self, model: ModelConfig) -> str | None:
        if isinstance(model, MlpModel):
            return "mlp"
        if isinstance(model, VisionModel):
            return model.torchvision
        if isinstance(model, TransformerModel):
            return model.family
        return None

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        return ("torch", "torchvision") + (("transformers",) if isinstance(model, TransformerModel) else ())

    def max_devices(self) -> int | None:
        return None  # DistributedDataParallel over every device asked for

    def input_pipeline(self) -> str | None:
        return "torch.utils.data.DataLoader"

    def fit(self) -> str | None:
        return "loop"  # PyTorch has no fit(): the closest equivalent is trainbench's own loop, timed as one block

    def min_memory_mb(self) -> int:
        return 1536  # measured floor 1136 MB + 25% (benchmarks/memory_floor.py, results/2026-11-22-memory-floor.md)
