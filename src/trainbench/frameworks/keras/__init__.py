"""What the Keras 3 frameworks (tensorflow, jax) share: their config base and what Keras can build.
Light (no keras import); the shared adapter is .adapter, the model builders .models."""

from __future__ import annotations

from dataclasses import dataclass

from trainbench.config.schema import FrameworkConfig, MlpModel, ModelConfig, TransformerModel, VisionModel


@dataclass
class KerasConfig(FrameworkConfig):
    def builds(self, model: ModelConfig) -> str | None:
        if isinstance(model, MlpModel):
            return "mlp"
        if isinstance(model, VisionModel):
            return model.keras
        if isinstance(model, TransformerModel):
            return model.keras_hub
        return None

    def fit(self) -> str | None:
        return "model.fit"

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        return (self.package, "keras") + (("keras_hub",) if isinstance(model, TransformerModel) else ())
