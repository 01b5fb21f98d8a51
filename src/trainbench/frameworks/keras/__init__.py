"""What the Keras 3 frameworks (tensorflow, jax) share: their config base and what Keras can build.
Light (no keras import); the shared adapter is .adapter, the model builders .models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from trainbench.config.errors import need
from trainbench.config.schema import FrameworkConfig
from trainbench.frameworks import always_nhwc

if TYPE_CHECKING:
    from trainbench.config.schema import ModelConfig

# Architecture (trainbench.config.schema.ModelConfig.architecture) -> builder: a keras.applications class, a
# builder written in .models (models.OWN_BUILDERS), a keras-hub backbone (text), or trainbench's MLP.
BUILDERS = {
    "mlp": "mlp",
    "alexnet": "alexnet",
    "efficientnet_b0": "EfficientNetB0",
    "mobilenet_v2": "MobileNetV2",
    "resnet18": "resnet18",
    "resnet50": "resnet50",
    "vgg16": "VGG16",
    "vit": "ViTBackbone",
    "bert": "BertBackbone",
    "distilbert": "DistilBertBackbone",
}


@dataclass
class KerasConfig(FrameworkConfig):
    builders: ClassVar[dict[str, str]] = BUILDERS
    version_tags: ClassVar[tuple[str, ...]] = ("sw.keras",)
    # Keras runs convolutions NHWC (its channels_last data format), always. The key exists so that a preset for
    # every framework (the scaling study) can ask for NHWC where PyTorch has the choice; settings ignore it here
    # (trainbench.setting.recorded), as there is nothing to choose.
    channels_last: bool = True
    fixed: ClassVar[tuple[str, ...]] = ("channels_last",)

    def check(self, at: str) -> None:
        need(self.channels_last is True, f"{at}.channels_last", self.channels_last, always_nhwc())

    def fit(self) -> str | None:
        return "model.fit"

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        hub = BUILDERS.get(model.architecture(), "").endswith("Backbone")  # keras-hub's
        return (self.package, "keras") + (("keras_hub",) if hub else ())
