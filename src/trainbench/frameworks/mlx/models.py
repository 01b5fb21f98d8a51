"""MLX builds of the models in conf/model/, layer for layer the networks torchvision and transformers build.

The only module besides the MLX adapter that imports mlx. Image models take NHWC float32 input (MLX
convolutions are channels-last), already normalised, and return logits; text models take (N, L) token ids
and return logits. Modules start in training mode: BatchNorm normalises with batch statistics and updates
its running statistics (momentum 0.1, unbiased variance, as torch), Dropout is active.

Configs read (trainbench.config.schema, from conf/model/*.yaml): MlpModel (`hidden_sizes`, or `depth` x
`width`, `activation` and `init`; `output_activation` is the loss's business, as elsewhere: the MLP returns
logits); VisionModel named resnet18 | resnet50 | mobilenet_v2, or a VitModel at any size
(trainbench.frameworks.mlx.BUILDERS; `pretrained` must be false: no MLX checkpoints); TransformerModel with `family: distilbert | bert` and its dimensions.

Parameter counts equal torchvision's and transformers' exactly, and torch's weights loaded into these models
give torch's logits (tests/test_mlx_models.py; parameter names follow torchvision's). Initialisation
follows torchvision and transformers: Kaiming-normal (fan_out) convolutions, BatchNorm 1/0, torch's default
U(+-1/sqrt(fan_in)) for the MLP and the ResNet fc (MLX's nn.Linear default is the same), normal(0, 0.01)
for MobileNetV2's classifier; normal(0, 0.02) Linear/Embedding weights, zero biases and a zero padding row
for the text models. Where the MLX build differs from torch (no parameter count changes):
- The MLP flattens NHWC, torch NCHW: the same layer sizes, the first layer's inputs in another order.
- Image models take `input_shape`'s channels (torchvision fixes 3; the same model for 3-channel data).
- Attention is mx.fast.scaled_dot_product_attention (MLX's fused kernel, as PyTorch's SDPA on the torch
  side). It has no dropout, so transformers' dropout on the attention probabilities (p=0.1) is left out;
  every other dropout (embeddings, residual branches, classifier head) is there with transformers' rates.
- MLX's nn.Embedding has no padding_idx: the padding row starts at zero as in transformers but, unlike
  torch, receives gradients. Token-type ids are all zero (transformers' default), so BERT adds row 0.

Libraries checked before writing these (PyPI releases current in 2026-10); none is used:
- mlx-image 0.1.10 (2025-11; torchvision ports of ResNet and MobileNetV2, exact counts, weights=False builds
  offline): pins exact versions (mlx==0.24.2, numpy==1.26.2, huggingface_hub==0.24.0, Pillow, opencv,
  albumentations, pandas), which cannot install beside this project's mlx 0.32 / numpy 2 / transformers 5.
- mlx-transformers 0.3.0 (2026-07; BertForSequenceClassification from a transformers BertConfig, exact
  count): no DistilBERT, and its attention is unfused matmul + softmax behind an additive mask built even
  when nothing is padded, so it would time that library's choice rather than MLX's attention kernel.
- mlx-embeddings 0.1.0: BERT encoders for embeddings only (no classification head, no DistilBERT); needs
  mlx-vlm. mlx-lm: decoder LLMs only. mlx-vision 0.1.0: preprocessing, no models. mlxformers 0.1.3: last
  release 2024-08. mlx-raclate 0.1.0b1: Python >= 3.13 only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from trainbench.config.schema import MlpModel, ModelConfig, TransformerModel, VisionModel, VitModel
from trainbench.frameworks.mlx import BUILDERS

# LayerNorm epsilon of BERT and DistilBERT in transformers (layer_norm_eps / the hard-coded 1e-12).
TRANSFORMERS_LAYER_NORM_EPS = 1e-12
TRANSFORMERS_INIT_STD = 0.02  # initializer_range
_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}


def build(model: ModelConfig, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The image model for NHWC `input_shape` (H, W, C) and `num_classes` logits."""
    if isinstance(model, MlpModel):
        return mlp(model, input_shape, num_classes)
    if isinstance(model, TransformerModel):
        raise ValueError(f"model `{model.name}` is a text model: build it with text_classifier")
    assert isinstance(model, VisionModel)
    name = BUILDERS.get(model.architecture())
    if name not in IMAGE_BUILDERS and name not in SIZED_IMAGE_BUILDERS:
        known = ", ".join(sorted([*IMAGE_BUILDERS, *SIZED_IMAGE_BUILDERS]))
        raise ValueError(f"model `{model.name}` has no MLX build: use one of {known}")
    if model.pretrained:
        raise ValueError(
            f"model.pretrained=true is PyTorch-only (torchvision checkpoints); {name} on MLX starts "
            "from random weights: set model.pretrained=false"
        )
    if name in SIZED_IMAGE_BUILDERS:
        assert isinstance(model, VitModel)
        return SIZED_IMAGE_BUILDERS[name](model, input_shape, num_classes)
    return IMAGE_BUILDERS[str(name)](input_shape[2], num_classes)


def num_parameters(model: nn.Module) -> int:
    """Trainable parameters, counted as torch counts them (BatchNorm running statistics are not)."""
    return sum(value.size for _, value in tree_flatten(model.trainable_parameters()))


# -- MLP -----------------------------------------------------------------------------------------
class MLP(nn.Module):
    """Flatten -> (Linear + activation) per hidden layer -> Linear to the classes (logits)."""

    def __init__(self, in_features: int, hidden: list[int], num_classes: int, activation: str) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r}: use one of {', '.join(_ACTIVATIONS)}")
        layers: list[nn.Module] = []
        width = in_features
        for units in hidden:
            layers += [nn.Linear(width, units), _ACTIVATIONS[activation]()]
            width = units
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def __call__(self, x: mx.array) -> mx.array:
        return self.layers(x.reshape(x.shape[0], -1))


def mlp(model: MlpModel, input_shape: tuple[int, int, int], num_classes: int) -> MLP:
    network = MLP(math.prod(input_shape), model.layers(), num_classes, model.activation)
    if model.init == "glorot":  # Keras' default: Glorot-uniform kernels, zero biases (the M1 blog's model)
        glorot = nn.init.glorot_uniform()
        for layer in network.layers.layers:
            if isinstance(layer, nn.Linear):
                layer.weight = glorot(layer.weight)
                layer.bias = mx.zeros_like(layer.bias)
    return network


# -- convolution helpers as torchvision builds them ----------------------------------------------
def _conv(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """Bias-free 'same'-padded convolution with torchvision's kaiming_normal_(mode="fan_out", relu gain)."""
    conv = nn.Conv2d(
        in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2, groups=groups, bias=False
    )
    # MLX weights are (out, kh, kw, in / groups): fan_out = out * kh * kw, as torch computes it.
    fan_out = out_channels * kernel_size * kernel_size
    conv.weight = mx.random.normal(conv.weight.shape) * math.sqrt(2.0 / fan_out)
    return conv


def _global_average_pool(x: mx.array) -> mx.array:
    """AdaptiveAvgPool2d(1) + flatten: (N, H, W, C) -> (N, C)."""
    return mx.mean(x, axis=(1, 2))


# -- ResNet (torchvision; ResNet-50 is "v1.5": the stride sits on the 3x3 convolution) ----------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(in_channels, planes, 3, stride), nn.BatchNorm(planes)
        self.conv2, self.bn2 = _conv(planes, planes, 3), nn.BatchNorm(planes)
        self.downsample = _downsample(in_channels, planes * self.expansion, stride)

    def __call__(self, x: mx.array) -> mx.array:
        out = nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return nn.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(in_channels, planes, 1), nn.BatchNorm(planes)
        self.conv2, self.bn2 = _conv(planes, planes, 3, stride), nn.BatchNorm(planes)
        self.conv3, self.bn3 = _conv(planes, planes * self.expansion, 1), nn.BatchNorm(planes * self.expansion)
        self.downsample = _downsample(in_channels, planes * self.expansion, stride)

    def __call__(self, x: mx.array) -> mx.array:
        out = nn.relu(self.bn1(self.conv1(x)))
        out = nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return nn.relu(out + (self.downsample(x) if self.downsample is not None else x))


def _downsample(in_channels: int, out_channels: int, stride: int) -> nn.Sequential | None:
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(_conv(in_channels, out_channels, 1, stride), nn.BatchNorm(out_channels))


class ResNet(nn.Module):
    def __init__(
        self, block: type[BasicBlock | Bottleneck], blocks_per_stage: list[int], in_channels: int, num_classes: int
    ) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(in_channels, 64, 7, 2), nn.BatchNorm(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)  # pads with -inf, as torch
        channels = 64
        stages = []
        for index, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks_per_stage, strict=True)):
            stage = []
            for block_index in range(count):
                stage.append(block(channels, planes, 2 if index > 0 and block_index == 0 else 1))
                channels = planes * block.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(channels, num_classes)  # torch's default init, which MLX's Linear shares

    def __call__(self, x: mx.array) -> mx.array:
        x = self.maxpool(nn.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(_global_average_pool(x))


def resnet18(in_channels: int, num_classes: int) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], in_channels, num_classes)


def resnet50(in_channels: int, num_classes: int) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], in_channels, num_classes)


# -- MobileNetV2 (torchvision, width 1.0) ---------------------------------------------------------
def _make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: nearest multiple of `divisor`, never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn_relu6(
    in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    return nn.Sequential(
        _conv(in_channels, out_channels, kernel_size, stride, groups), nn.BatchNorm(out_channels), nn.ReLU6()
    )


class InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(in_channels * expand_ratio))
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(in_channels, hidden, 1))
        layers += [
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),  # depthwise
            _conv(hidden, out_channels, 1),
            nn.BatchNorm(out_channels),
        ]  # linear bottleneck
        self.conv = nn.Sequential(*layers)

    def __call__(self, x: mx.array) -> mx.array:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    # expansion t, output channels c, repeats n, first stride s (Sandler et al. 2018, Table 2)
    SETTINGS = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, in_channels: int, num_classes: int, dropout: float = 0.2) -> None:
        super().__init__()
        channels, last_channels = _make_divisible(32), _make_divisible(1280)
        features: list[nn.Module] = [_conv_bn_relu6(in_channels, channels, 3, stride=2)]
        for expansion, out, repeats, stride in self.SETTINGS:
            out = _make_divisible(out)
            for index in range(repeats):
                features.append(InvertedResidual(channels, out, stride if index == 0 else 1, expansion))
                channels = out
        features.append(_conv_bn_relu6(channels, last_channels, 1))
        self.features = nn.Sequential(*features)
        head = nn.Linear(last_channels, num_classes)
        head.weight = mx.random.normal(head.weight.shape) * 0.01
        head.bias = mx.zeros_like(head.bias)
        self.classifier = nn.Sequential(nn.Dropout(dropout), head)

    def __call__(self, x: mx.array) -> mx.array:
        return self.classifier(_global_average_pool(self.features(x)))


def mobilenet_v2(in_channels: int, num_classes: int) -> MobileNetV2:
    return MobileNetV2(in_channels, num_classes)


# Builders by the `torchvision:` name in the model YAML.
IMAGE_BUILDERS: dict[str, Callable[[int, int], nn.Module]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
}


# -- ViT (torchvision's VisionTransformer) -----------------------------------------------------------
class PackedSelfAttention(nn.Module):
    """torch.nn.MultiheadAttention as torchvision's ViT uses it: one packed query/key/value projection
    (in_proj_weight, in_proj_bias) and an output Linear, attention by MLX's fused kernel."""

    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        bound = math.sqrt(6.0 / (hidden + 3 * hidden))  # xavier_uniform over the packed (3h, h) weight, as torch
        self.in_proj_weight = mx.random.uniform(-bound, bound, (3 * hidden, hidden))
        self.in_proj_bias = mx.zeros((3 * hidden,))
        self.out_proj = nn.Linear(hidden, hidden)
        self.out_proj.bias = mx.zeros((hidden,))

    def __call__(self, x: mx.array) -> mx.array:
        batch, length, hidden = x.shape
        head_size = hidden // self.num_heads
        packed = x @ self.in_proj_weight.T + self.in_proj_bias
        query, key, value = (
            part.reshape(batch, length, self.num_heads, head_size).transpose(0, 2, 1, 3)
            for part in mx.split(packed, 3, axis=-1)
        )
        context = mx.fast.scaled_dot_product_attention(query, key, value, scale=1.0 / math.sqrt(head_size))
        return self.out_proj(context.transpose(0, 2, 1, 3).reshape(batch, length, hidden))


class ViTBlock(nn.Module):
    """torchvision's EncoderBlock: x + attention(LayerNorm(x)), then + MLP(LayerNorm(.)) (Linear, GELU, Linear;
    its dropouts, p=0, keep torchvision's indices: mlp.0 and mlp.3)."""

    def __init__(self, hidden: int, num_heads: int, mlp_size: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = PackedSelfAttention(hidden, num_heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp_size), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_size, hidden))
        for linear in (self.mlp.layers[0], self.mlp.layers[3]):  # torchvision: xavier_uniform, normal(1e-6) bias
            linear.weight = nn.init.glorot_uniform()(linear.weight)
            linear.bias = mx.random.normal(linear.bias.shape) * 1e-6

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViTEncoder(nn.Module):
    def __init__(self, tokens: int, hidden: int, model: VitModel) -> None:
        super().__init__()
        self.pos_embedding = mx.random.normal((1, tokens, hidden)) * 0.02
        self.layers = [ViTBlock(hidden, model.num_heads, model.mlp_size) for _ in range(model.num_layers)]
        self.ln = nn.LayerNorm(hidden, eps=1e-6)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


class ViTHead(nn.Module):
    def __init__(self, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(hidden, num_classes)
        self.head.weight = mx.zeros_like(self.head.weight)  # torchvision zero-initialises the head
        self.head.bias = mx.zeros_like(self.head.bias)

    def __call__(self, x: mx.array) -> mx.array:
        return self.head(x)


class VisionTransformer(nn.Module):
    """torchvision's VisionTransformer at the YAML's sizes, with torchvision's parameter names (conv_proj,
    class_token, encoder.pos_embedding, encoder.layers.N, encoder.ln, heads.head): patches embedded by a strided
    convolution (NHWC here, so the patches come out in torch's row-major order), a class token in front, learned
    position embeddings, the blocks, a LayerNorm, and the head on the class token."""

    def __init__(self, model: VitModel, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        height, width, channels = input_shape
        hidden, patch = model.hidden_size, model.patch_size
        self.conv_proj = nn.Conv2d(channels, hidden, patch, stride=patch)
        fan_in = channels * patch * patch  # torchvision: truncated normal, std sqrt(1/fan_in), zero bias
        self.conv_proj.weight = mx.random.truncated_normal(-2.0, 2.0, self.conv_proj.weight.shape) / math.sqrt(fan_in)
        self.conv_proj.bias = mx.zeros((hidden,))
        self.class_token = mx.zeros((1, 1, hidden))
        self.encoder = ViTEncoder((height // patch) * (width // patch) + 1, hidden, model)
        self.heads = ViTHead(hidden, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        patches = self.conv_proj(x)
        batch = patches.shape[0]
        tokens = patches.reshape(batch, -1, patches.shape[-1])
        class_tokens = mx.broadcast_to(self.class_token, (batch, 1, tokens.shape[-1]))
        encoded = self.encoder(mx.concatenate([class_tokens, tokens], axis=1))
        return self.heads(encoded[:, 0])


# Image builders that take the model's sizes from its config, by their name in trainbench.frameworks.mlx.BUILDERS.
SIZED_IMAGE_BUILDERS: dict[str, Callable[[VitModel, tuple[int, int, int], int], nn.Module]] = {
    "vit": VisionTransformer,
}


# -- BERT family (transformers' BertForSequenceClassification / DistilBertForSequenceClassification) --
class EncoderLayer(nn.Module):
    """Post-LayerNorm transformer layer: self-attention and a GELU feed-forward, each added back and
    normalised. BERT drops out the attention projection's output; DistilBERT does not."""

    def __init__(
        self, hidden_size: int, num_heads: int, intermediate_size: int, dropout: float, attention_output_dropout: bool
    ) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"model.hidden_size={hidden_size} is not a multiple of model.num_heads={num_heads}")
        self.num_heads = num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.attention_output = nn.Linear(hidden_size, hidden_size)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=TRANSFORMERS_LAYER_NORM_EPS)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.output = nn.Linear(intermediate_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=TRANSFORMERS_LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout)
        self.attention_output_dropout = attention_output_dropout

    def __call__(self, x: mx.array, mask: mx.array | None) -> mx.array:
        batch, length, hidden = x.shape
        head_size = hidden // self.num_heads

        def heads(projected: mx.array) -> mx.array:
            return projected.reshape(batch, length, self.num_heads, head_size).transpose(0, 2, 1, 3)

        context = mx.fast.scaled_dot_product_attention(
            heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), scale=1.0 / math.sqrt(head_size), mask=mask
        )
        attended = self.attention_output(context.transpose(0, 2, 1, 3).reshape(batch, length, hidden))
        if self.attention_output_dropout:
            attended = self.dropout(attended)
        x = self.attention_norm(x + attended)
        return self.output_norm(x + self.dropout(self.output(nn.gelu(self.intermediate(x)))))


class TextEncoder(nn.Module):
    """Token + learned position (+ token-type) embeddings, LayerNorm, dropout, then the layers.

    Padding (id 0) is masked out of attention only when `mask_padding` is set, as the PyTorch adapter does:
    with nothing padded a mask changes nothing but the kernel the attention runs in."""

    def __init__(
        self,
        model_cfg: TransformerModel,
        token_types: int,
        attention_output_dropout: bool,
        mask_padding: bool,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        hidden = model_cfg.hidden_size
        self.word_embeddings = nn.Embedding(model_cfg.vocab_size, hidden)
        self.position_embeddings = nn.Embedding(model_cfg.max_position_embeddings, hidden)
        if token_types:
            self.token_type_embeddings = nn.Embedding(token_types, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=TRANSFORMERS_LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout)
        self.layers = [
            EncoderLayer(hidden, model_cfg.num_heads, model_cfg.intermediate_size, dropout, attention_output_dropout)
            for _ in range(model_cfg.num_layers)
        ]
        self.mask_padding = mask_padding

    def __call__(self, input_ids: mx.array) -> mx.array:
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[: input_ids.shape[1]]
        if "token_type_embeddings" in self:  # every token is segment 0: one row, added to all
            x = x + self.token_type_embeddings.weight[0]
        x = self.dropout(self.embedding_norm(x))
        mask = (input_ids != 0)[:, None, None, :] if self.mask_padding else None  # keys to attend to
        for layer in self.layers:
            x = layer(x, mask)
        return x


class BertClassifier(nn.Module):
    """BertForSequenceClassification: encoder, tanh pooler on the first token, dropout, Linear."""

    def __init__(self, model_cfg: TransformerModel, num_classes: int, mask_padding: bool) -> None:
        super().__init__()
        hidden = model_cfg.hidden_size
        self.encoder = TextEncoder(model_cfg, token_types=2, attention_output_dropout=True, mask_padding=mask_padding)
        self.pooler = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)  # hidden_dropout_prob (classifier_dropout unset)
        self.classifier = nn.Linear(hidden, num_classes)

    def __call__(self, input_ids: mx.array) -> mx.array:
        pooled = mx.tanh(self.pooler(self.encoder(input_ids)[:, 0]))
        return self.classifier(self.dropout(pooled))


class DistilBertClassifier(nn.Module):
    """DistilBertForSequenceClassification: encoder (no token types), Linear + ReLU pre-classifier on the
    first token, dropout 0.2 (seq_classif_dropout), Linear."""

    def __init__(self, model_cfg: TransformerModel, num_classes: int, mask_padding: bool) -> None:
        super().__init__()
        hidden = model_cfg.hidden_size
        self.encoder = TextEncoder(model_cfg, token_types=0, attention_output_dropout=False, mask_padding=mask_padding)
        self.pre_classifier = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(hidden, num_classes)

    def __call__(self, input_ids: mx.array) -> mx.array:
        first = nn.relu(self.pre_classifier(self.encoder(input_ids)[:, 0]))
        return self.classifier(self.dropout(first))


TEXT_BUILDERS: dict[str, type[BertClassifier | DistilBertClassifier]] = {
    "bert": BertClassifier,
    "distilbert": DistilBertClassifier,
}


def text_classifier(
    model_cfg: TransformerModel, seq_len: int, num_classes: int, mask_padding: bool = True
) -> nn.Module:
    """A randomly initialised sequence classifier: (N, seq_len) int token ids in, (N, num_classes) logits out."""
    family = BUILDERS.get(model_cfg.architecture())
    if family not in TEXT_BUILDERS:
        raise ValueError(f"model.family={model_cfg.family!r}: use one of {', '.join(TEXT_BUILDERS)}")
    if seq_len > model_cfg.max_position_embeddings:
        raise ValueError(
            f"model.seq_len={seq_len} exceeds model.max_position_embeddings="
            f"{model_cfg.max_position_embeddings}: no position embedding for the later tokens"
        )
    model = TEXT_BUILDERS[str(family)](model_cfg, num_classes, mask_padding)
    _init_like_transformers(model)
    return model


def _init_like_transformers(model: BertClassifier | DistilBertClassifier) -> None:
    """transformers' _init_weights: normal(0, 0.02) weights, zero biases, a zero padding row (id 0)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight = mx.random.normal(module.weight.shape) * TRANSFORMERS_INIT_STD
            module.bias = mx.zeros_like(module.bias)
        elif isinstance(module, nn.Embedding):
            module.weight = mx.random.normal(module.weight.shape) * TRANSFORMERS_INIT_STD
    model.encoder.word_embeddings.weight[0] = 0.0
