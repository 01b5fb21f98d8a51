"""PyTorch builds of the models in conf/model/: torchvision and transformers where they have the model,
trainbench's own MLP where no library has it. Imported only by the PyTorch adapter."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainbench.config.schema import MlpModel, ModelConfig, TransformerModel, VisionModel, VitModel
from trainbench.data import Dataset
from trainbench.frameworks.pytorch import BUILDERS

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def build(model: ModelConfig, data: Dataset) -> nn.Module:
    """`model` built by its builder in trainbench.frameworks.pytorch.BUILDERS."""
    if isinstance(model, MlpModel):
        return mlp(model, data)
    if isinstance(model, TransformerModel):
        return transformer_classifier(model, data.num_classes, data.padded)
    if isinstance(model, VisionModel) and model.architecture() in BUILDERS:
        return torchvision_model(model, data.num_classes, data.image_size)
    raise ValueError(f"model `{model.name}` has no PyTorch builder (trainbench.frameworks.pytorch.BUILDERS)")


def mlp(model: MlpModel, data: Dataset) -> nn.Sequential:
    """Flatten -> (Linear + activation) per hidden layer -> Linear to the classes (logits)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = data.channels * data.image_size * data.image_size
    for units in model.layers():
        layers += [nn.Linear(width, units), ACTIVATIONS[model.activation]()]
        width = units
    layers.append(nn.Linear(width, data.num_classes))
    network = nn.Sequential(*layers)
    if model.init == "glorot":  # Keras' default: Glorot-uniform kernels, zero biases (the M1 blog's model)
        for layer in network.modules():
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)
    return network


class LogitsOnly(nn.Module):
    """A transformers classifier behind the same interface as a vision model: token ids in, logits out.

    Padding (id 0) is masked out of attention only when the data has padding: an all-ones mask changes
    nothing in the result but makes scaled-dot-product attention leave its fastest (flash) kernel. The Keras
    and MLX builds follow the same rule, so every framework runs the same attention.
    """

    def __init__(self, classifier: nn.Module, mask_padding: bool) -> None:
        super().__init__()
        self.classifier = classifier
        self.mask_padding = mask_padding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != 0).long() if self.mask_padding else None
        return self.classifier(input_ids=input_ids, attention_mask=mask).logits


def transformer_classifier(model: TransformerModel, num_classes: int, mask_padding: bool = True) -> nn.Module:
    """A randomly initialised *ForSequenceClassification built from a config object (no hub access)."""
    import transformers

    common = {
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_position_embeddings,
        "num_labels": num_classes,
    }
    if model.family == "distilbert":
        config = transformers.DistilBertConfig(
            dim=model.hidden_size,
            n_layers=model.num_layers,
            n_heads=model.num_heads,
            hidden_dim=model.intermediate_size,
            **common,
        )
        return LogitsOnly(transformers.DistilBertForSequenceClassification(config), mask_padding)
    config = transformers.BertConfig(
        hidden_size=model.hidden_size,
        num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_heads,
        intermediate_size=model.intermediate_size,
        **common,
    )
    return LogitsOnly(transformers.BertForSequenceClassification(config), mask_padding)


def torchvision_model(model: VisionModel, num_classes: int, image_size: int) -> nn.Module:
    """torchvision's model for `num_classes` (randomly initialised, or its ImageNet weights with a new head);
    a ViT at the YAML's sizes for `image_size` px images (its position embeddings follow the size)."""
    import torchvision

    if isinstance(model, VitModel):
        constructor: Callable[..., nn.Module] = functools.partial(vision_transformer, model, image_size)
    else:
        constructor = getattr(torchvision.models, BUILDERS[model.architecture()])
    if not model.pretrained:
        return constructor(weights=None, num_classes=num_classes)
    cached = Path(torch.hub.get_dir()) / "checkpoints" / str(model.weights_file)
    if not cached.exists():
        raise FileNotFoundError(
            f"pretrained weights for {model.name} are not in the local cache: expected {cached} (download "
            f"https://download.pytorch.org/models/{model.weights_file} there once when online, or set "
            "model.pretrained=false)"
        )
    network = constructor(weights=None)
    network.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
    if num_classes != _num_outputs(network):
        replace_head(network, str(model.head), num_classes)
    return network


def vision_transformer(model: VitModel, image_size: int, weights: None = None, num_classes: int = 1000) -> nn.Module:
    """torchvision's VisionTransformer (what vit_b_16 and its siblings build) at the YAML's sizes."""
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        image_size=image_size,
        patch_size=model.patch_size,
        num_layers=model.num_layers,
        num_heads=model.num_heads,
        hidden_dim=model.hidden_size,
        mlp_dim=model.mlp_size,
        num_classes=num_classes,
    )


def _num_outputs(network: nn.Module) -> int:
    return [m for m in network.modules() if isinstance(m, nn.Linear)][-1].out_features


def replace_head(network: nn.Module, path: str, num_classes: int) -> None:
    """Swap the ImageNet classifier at `path` (e.g. `fc`, `classifier.1`) for a fresh one (fine-tuning)."""
    parent_path, _, last = path.rpartition(".")
    parent = network.get_submodule(parent_path) if parent_path else network
    old = parent[int(last)] if last.isdigit() else getattr(parent, last)
    if not isinstance(old, nn.Linear):
        raise ValueError(f"model.head={path!r} is a {type(old).__name__}, not the classifier's Linear layer")
    new = nn.Linear(old.in_features, num_classes)
    if last.isdigit():
        parent[int(last)] = new
    else:
        setattr(parent, last, new)


def convolution_backward_flops(
    grad_out_shape: Any,
    x_shape: Any,
    w_shape: Any,
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: Any,
    output_mask: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """FLOPs of a convolution's backward pass: each gradient asked for (input, weight) costs one forward
    convolution. torch's own formula ignores `groups` and overcounts depthwise convolutions (MobileNetV2,
    EfficientNet) by the channel count."""
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def attention_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any) -> int:
    """scaled_dot_product_attention's forward as torch counts it: two batched products."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def attention_backward_flops(
    grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any
) -> int:
    """Its backward as torch counts it: five products (the scores are recomputed)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# Attention kernels torch's FLOP counter has no formula for, counted as zero: CPU's flash kernel (torch 2.14 runs it
# for transformers' SDPA attention in eval mode, the mode the count runs in), MPS's math kernel and the kernel
# other backends override. They take query, key and value first (backward: the output's gradient, then those),
# as the kernels torch does count.
_UNCOUNTED_ATTENTION: dict[str, Callable[..., int]] = {
    "_scaled_dot_product_flash_attention_for_cpu": attention_flops,
    "_scaled_dot_product_flash_attention_for_cpu_backward": attention_backward_flops,
    "_scaled_dot_product_attention_math_for_mps": attention_flops,
    "_scaled_dot_product_fused_attention_overrideable": attention_flops,
    "_scaled_dot_product_fused_attention_overrideable_backward": attention_backward_flops,
}


def flop_formulas() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode's custom_mapping: convolution backward by groups, and every attention kernel counted as
    scaled_dot_product_attention is, whichever kernel the device runs."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {aten.convolution_backward: convolution_backward_flops}
    for name, formula in _UNCOUNTED_ATTENTION.items():
        kernel = getattr(aten, name, None)
        if kernel is not None and kernel not in flop_registry:
            formulas[kernel] = formula
    return formulas


def optimizer(params: list[nn.Parameter], optim: Any, fused: bool, capturable: bool) -> torch.optim.Optimizer:
    """The cell's optimizer; `fused`: one kernel per step (CUDA); `capturable`: may run inside a CUDA graph."""
    options: dict[str, Any] = {"lr": optim.lr, "weight_decay": optim.weight_decay}
    if fused:
        options["fused"] = True
    if optim.name == "sgd":
        return torch.optim.SGD(params, momentum=optim.momentum, **options)
    options.update(betas=(optim.beta1, optim.beta2), eps=optim.eps)
    if capturable and not fused:
        options["capturable"] = True
    if optim.name == "adam":
        return torch.optim.Adam(params, **options)
    return torch.optim.AdamW(params, **options)


def loss_function(model: ModelConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if getattr(model, "output_activation", None) == "sigmoid":
        return sigmoid_categorical
    return F.cross_entropy


def sigmoid_categorical(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The seed blog's head: sigmoid outputs fed to categorical cross-entropy, which (as in Keras) first
    rescales the outputs to sum to one."""
    probs = torch.sigmoid(logits)
    probs = (probs / probs.sum(dim=1, keepdim=True)).clamp_min(1e-7)
    return F.nll_loss(probs.log(), target)


def prepared_bytes(count: int, data: Dataset) -> int:
    return count * data.channels * data.image_size**2 * 4 if data.kind == "image" else 0


def ceil_div(a: int, b: int) -> int:
    return math.ceil(a / b)
