"""The model group: one schema per kind of network (an MLP, a vision model, a ViT, a transformer encoder), each the
description every framework builds the same network from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from omegaconf import MISSING

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema.base import MAX_IMAGE_SIZE, MAX_LAYER_UNITS, MAX_SEQ_LEN, Choice, need_count, whole
from trainbench.measure import flops

ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
OUTPUT_ACTIVATIONS = (None, "sigmoid")


def need_encoder_sizes(model: Any, at: str, feed_forward: str) -> None:
    """A transformer encoder's sizes (a ViT's, a BERT's): layers, heads that divide the hidden size, and the
    feed-forward width, named `feed_forward` in its config."""
    for key in ("num_layers", "num_heads"):
        need_count(getattr(model, key), f"{at}.{key}", 1, 1024, "")
    for key in ("hidden_size", feed_forward):
        need_count(getattr(model, key), f"{at}.{key}", 1, MAX_LAYER_UNITS, "")
    need(
        model.hidden_size % model.num_heads == 0,
        f"{at}.num_heads",
        model.num_heads,
        f"must divide model.hidden_size ({model.hidden_size})",
    )


class SampleShape(Protocol):
    """What one sample gives a model (trainbench.data.Dataset has these)."""

    image_size: int  # pixels per side, after any resize (image data)
    channels: int
    seq_len: int  # tokens per sequence (text data)
    num_classes: int


@dataclass
class ModelConfig(Choice):
    """A network, described once. Which framework builds it, and how, is the framework's business: each keys
    its builders by `architecture()` (FrameworkConfig.builders)."""

    input: ClassVar[str] = "image"  # what the model consumes: image | text

    def architecture(self) -> str:
        """What a framework's builders are keyed by: the model's name, unless one builder takes its sizes."""
        return self.name

    def describe(self) -> str:
        return f"model `{self.name}` ({self.schema_kind} model)"  # type: ignore[attr-defined]

    # A model counts itself where its sizes say it all, so every framework records one figure for it (and
    # one MFU); None leaves the count to the framework's counter on the network it built.
    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        """FLOPs per sample (training: forward + backward), as trainbench.measure.flops counts them."""
        return None

    def num_parameters(self, sample: SampleShape) -> int | None:
        """Trainable parameters of the network every framework builds for this sample shape."""
        return None


@schema("model", "mlp")
@dataclass
class MlpModel(ModelConfig):
    """A multilayer perceptron built by trainbench (no library ships the seed blog's MLP)."""

    hidden_sizes: list[int] = field(default_factory=list)
    depth: int | None = None  # when set, `depth` hidden layers of `width` units replace hidden_sizes
    width: int | None = None
    activation: str = "relu"
    output_activation: str | None = None  # null: logits + softmax cross-entropy; sigmoid: the seed blog's head
    init: str = "torch"  # torch: PyTorch's default Linear init in every framework; glorot: Keras' default

    def architecture(self) -> str:
        return "mlp"  # one builder for every depth and width

    def layers(self) -> list[int]:
        return [self.width or 0] * self.depth if self.depth is not None else list(self.hidden_sizes)

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.mlp_flops_per_sample(self, _features(sample), sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.mlp_parameters(self, _features(sample), sample.num_classes)

    def check(self, at: str) -> None:
        super().check(at)
        if self.depth is not None:
            need_count(self.depth, f"{at}.depth", 1, 1000, "e.g. model.depth=5")
            need(
                self.width is not None,
                f"{at}.depth",
                self.depth,
                "builds depth x width layers: set model.width too (e.g. model.width=1024), or use model=mlp_deep",
            )
        if self.depth is not None or self.width is not None:  # a width model.depth would take later
            need_count(self.width, f"{at}.width", 1, MAX_LAYER_UNITS, "e.g. model.width=1024")
        need(
            all(whole(units) and 1 <= units <= MAX_LAYER_UNITS for units in self.hidden_sizes),
            f"{at}.hidden_sizes",
            self.hidden_sizes,
            f"every layer needs 1 to {MAX_LAYER_UNITS:,} units, e.g. [3000,1000]",
        )
        need(
            self.activation in ACTIVATIONS,
            f"{at}.activation",
            self.activation,
            f"choose one of {', '.join(ACTIVATIONS)}",
        )
        need(
            self.output_activation in OUTPUT_ACTIVATIONS,
            f"{at}.output_activation",
            self.output_activation,
            "null (logits) or sigmoid",
        )
        need(self.init in ("torch", "glorot"), f"{at}.init", self.init, "torch or glorot")


def _features(sample: SampleShape) -> int:
    """An image flattened: what an MLP's first layer takes."""
    return sample.channels * sample.image_size * sample.image_size


@schema("model", "vision")
@dataclass
class VisionModel(ModelConfig):
    """A library image classifier, named as torchvision names it (the reference architecture), rebuilt to
    match in each framework."""

    channels: int = 3  # input channels the architecture takes
    min_image_size: int = 1  # smaller inputs pool away to nothing
    pretrained: bool = False  # torchvision's ImageNet weights from the local torch hub cache (PyTorch only)
    weights_file: str | None = None  # the weights' file name in $TORCH_HOME/hub/checkpoints (pretrained=true)
    head: str | None = None  # path of the last Linear layer, replaced when fine-tuning on other classes

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.channels, f"{at}.channels", 1, 3, "")
        need_count(self.min_image_size, f"{at}.min_image_size", 1, MAX_IMAGE_SIZE, "")
        need(
            not self.pretrained or (self.weights_file is not None and self.head is not None),
            f"{at}.pretrained",
            self.pretrained,
            f"model `{self.name}` has no pretrained weights file or classifier head in its YAML: "
            "use model.pretrained=false",
        )


@schema("model", "vit")
@dataclass
class VitModel(VisionModel):
    """A Vision Transformer (Dosovitskiy et al. 2020) as torchvision builds it: non-overlapping patches embedded
    by a convolution, a class token, learned position embeddings, pre-norm encoder blocks (LayerNorm eps 1e-6,
    GELU MLP), a final LayerNorm and one Linear head on the class token. One builder per framework at any size."""

    patch_size: int = MISSING  # pixels per patch side; data.image_size must be a multiple of it
    num_layers: int = MISSING
    num_heads: int = MISSING
    hidden_size: int = MISSING
    mlp_size: int = MISSING  # the MLP's inner width

    def architecture(self) -> str:
        return "vit"

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.patch_size, f"{at}.patch_size", 1, MAX_IMAGE_SIZE, "e.g. model.patch_size=16")
        need_encoder_sizes(self, at, "mlp_size")

    def patches(self, image_size: int) -> int:
        return (image_size // self.patch_size) ** 2

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.vit_flops_per_sample(self, sample.image_size, sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.vit_parameters(self, sample.image_size, sample.num_classes)


@schema("model", "transformer")
@dataclass
class TransformerModel(ModelConfig):
    """A BERT-family encoder for sequence classification, randomly initialised (no hub access)."""

    input: ClassVar[str] = "text"
    family: str = MISSING  # the transformers architecture (distilbert | bert) each framework rebuilds
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    seq_len: int = 128  # tokens per sequence; the text data follows it
    num_labels: int = 2  # classes; the synthetic text data follows it

    def architecture(self) -> str:
        return self.family  # one builder per family, at any size

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.transformer_flops_per_sample(self, sample.seq_len, sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.transformer_parameters(self, sample.num_classes)

    def check(self, at: str) -> None:
        super().check(at)
        need_encoder_sizes(self, at, "intermediate_size")
        need_count(self.vocab_size, f"{at}.vocab_size", 1100, 10**7, "(ids below 1000 are BERT's special tokens)")
        need_count(self.max_position_embeddings, f"{at}.max_position_embeddings", 2, MAX_SEQ_LEN, "")
        need_count(
            self.seq_len,
            f"{at}.seq_len",
            2,
            self.max_position_embeddings,
            "(a [CLS] token and at least one more, at most model.max_position_embeddings)",
        )
        need_count(self.num_labels, f"{at}.num_labels", 2, 100_000, "")
