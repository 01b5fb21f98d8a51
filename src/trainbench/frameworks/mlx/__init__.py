"""framework=mlx: Apple's MLX. gpu = Metal on Apple silicon, CUDA where an MLX CUDA build is installed,
else the CPU. Light (no mlx import); the adapter is .adapter, the model builders .models."""

from __future__ import annotations

from dataclasses import dataclass

from trainbench.config.registry import schema
from trainbench.config.schema import FrameworkConfig, MlpModel, ModelConfig, TransformerModel, VisionModel


@schema("framework", "mlx")
@dataclass
class MlxConfig(FrameworkConfig):
    adapter: str = "trainbench.frameworks.mlx.adapter"
    package: str = "mlx"

    def builds(self, model: ModelConfig) -> str | None:
        if isinstance(model, MlpModel):
            return "mlp"
        if isinstance(model, VisionModel):
            return model.mlx
        if isinstance(model, TransformerModel):
            return model.family
        return None

    def min_memory_mb(self) -> int:
        return 768
