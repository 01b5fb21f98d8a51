"""Keras builds of the models in conf/model/, shaped like their torchvision (or transformers) counterparts.

Imported only by the Keras adapters (trainbench.frameworks.keras.adapter), after they chose the Keras backend (KERAS_BACKEND must be
set before keras is first imported). Models take NHWC float input, already normalised, and return logits.

Parity with torchvision, checked by tests/test_keras_parity.py (trainable parameters, at 32 px / 10 classes
and 224 px / 1000 classes):
- mlp, resnet18, resnet50, alexnet: written here layer for layer, with torchvision's initialisation: exact.
- VGG16 (and VGG19): keras.applications' convolutions (the same as torchvision's) with torchvision's head:
  adaptive average pooling to 7x7, then 4096-4096-classes with dropout. keras.applications' own top
  flattens whatever the convolutions leave (1x1x512 at 32 px), so its count would change with the input.
- MobileNetV2: keras.applications' body with torchvision's head (dropout 0.2, then Linear); exact.
- EfficientNetB0: keras.applications' model without the Rescaling + Normalization layers it starts with
  (trainbench normalises the input itself, the same way for every framework); exact.
- resnet50: written here as torchvision's v1.5 (stride on the 3x3 convolution, no convolution biases): exact.
  keras.applications.ResNet50 is v1 (+0.1% parameters, 5.6% fewer FLOPs: 7.72 vs 8.18 GFLOPs forward at
  224 px, since v1 strides a downsampling block's first 1x1 convolution, which v1.5 runs at 4x the positions):
  another network, not used.
- distilbert, bert_base, bert_large: keras-hub backbones with transformers' heads; exact.
- vit_b16: keras-hub's ViTBackbone with torchvision's head; exact. It counts its own FLOPs, as text models do
  (ModelConfig.flops_per_sample): the graph reading below does not see inside keras-hub's attention layers.
Initialisation of keras.applications and keras-hub models is Keras' own (glorot/he as their authors chose), and
BatchNorm momentum/epsilon follow each library's model; neither changes a parameter count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import layers, ops

from trainbench.config.schema import MlpModel, ModelConfig, TransformerModel, VisionModel, VitModel
from trainbench.frameworks.keras import BUILDERS

# Builders written here, by their name in trainbench.frameworks.keras.BUILDERS (keras.applications has no such class).
OWN_BUILDERS: dict[str, Callable[[tuple[int, int, int], int], keras.Model]] = {}


def build(model: ModelConfig, input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """The model for NHWC `input_shape` and `classes` outputs (logits)."""
    if isinstance(model, MlpModel):
        return mlp(model, input_shape, classes)
    if isinstance(model, VitModel):
        return vision_transformer(model, input_shape, classes)
    assert isinstance(model, VisionModel)
    name = BUILDERS.get(model.architecture())
    if not name:
        raise ValueError(f"model `{model.name}` has no Keras builder (trainbench.frameworks.keras.BUILDERS)")
    if name in OWN_BUILDERS:
        return OWN_BUILDERS[name](input_shape, classes)
    if not hasattr(keras.applications, name):
        known = ", ".join(sorted(OWN_BUILDERS))
        raise ValueError(f"Keras builder {name!r} is neither a keras.applications class nor one of {known}")
    return applications_model(name, input_shape, classes)


# -- torch-style initialisation ------------------------------------------------------------------
# A new initializer for every layer: an unseeded Keras initializer fixes its seed when it is created,
# so one instance shared by layers of the same shape would give them identical weights.
def _torch_default_kernel() -> keras.initializers.Initializer:
    """torch.nn.Linear / Conv2d default: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in))."""
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def _torch_kaiming_fan_out() -> keras.initializers.Initializer:
    """torchvision ResNet convolutions: kaiming_normal(mode="fan_out", nonlinearity="relu")."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def _torch_classifier_kernel() -> keras.initializers.Initializer:
    """torchvision VGG / MobileNetV2 classifiers: normal(0, 0.01), zero bias."""
    return keras.initializers.RandomNormal(0.0, 0.01)


def _torch_bias(fan_in: int) -> keras.initializers.Initializer:
    """torch.nn.Linear / Conv2d default bias: U(+-1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def _linear(units: int, fan_in: int, activation: str | None = None, name: str | None = None) -> layers.Dense:
    """torch.nn.Linear(fan_in, units) with its default initialisation."""
    return layers.Dense(
        units,
        activation=activation,
        kernel_initializer=_torch_default_kernel(),
        bias_initializer=_torch_bias(fan_in),
        name=name,
    )


# -- MLP -----------------------------------------------------------------------------------------
def mlp(model: MlpModel, input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """Flatten -> (Dense + activation) per hidden layer -> Dense to the classes (logits), as the PyTorch MLP.
    init=glorot: Keras' own defaults (Glorot-uniform kernels, zero biases), as the seed blog's model had."""
    inputs = keras.Input(input_shape)
    x = layers.Flatten()(inputs)
    width = int(np.prod(input_shape))
    for units in model.layers():
        x = _dense(units, width, model.init, model.activation)(x)
        width = units
    outputs = _dense(classes, width, model.init)(x)  # logits; an output sigmoid is the loss's business
    return keras.Model(inputs, outputs, name=model.name)


def _dense(units: int, fan_in: int, init: str, activation: str | None = None) -> layers.Dense:
    if init == "glorot":
        return layers.Dense(units, activation=activation)
    return _linear(units, fan_in, activation)


# -- pooling as torchvision does it ----------------------------------------------------------------
class AdaptiveAveragePool2D(layers.Layer):
    """torch.nn.AdaptiveAvgPool2d for NHWC: output bin i of n averages input rows floor(i*h/n) to
    ceil((i+1)*h/n), the same split torch uses. Written as two small averaging matrices (no weights).

    Not keras.layers.AdaptiveAveragePooling2D: it exists only from Keras 3.13, and in Keras 3.15.1 on the
    JAX backend it returns NaN when the output size equals the input size (VGG16 at 224 px: 7x7 -> 7x7).
    """

    def __init__(self, output_size: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output_size = tuple(output_size)

    @staticmethod
    def _averaging(size: int, bins: int) -> np.ndarray:
        matrix = np.zeros((bins, size), dtype="float32")
        for i in range(bins):
            start, end = (i * size) // bins, -((-(i + 1) * size) // bins)
            matrix[i, start:end] = 1.0 / (end - start)
        return matrix

    def call(self, x: Any) -> Any:
        height, width = x.shape[1], x.shape[2]
        if (height, width) == self.output_size:
            return x
        rows = ops.convert_to_tensor(self._averaging(height, self.output_size[0]), dtype=x.dtype)
        cols = ops.convert_to_tensor(self._averaging(width, self.output_size[1]), dtype=x.dtype)
        return ops.einsum("ih,jw,nhwc->nijc", rows, cols, x)

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return (input_shape[0], *self.output_size, input_shape[-1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "output_size": self.output_size}


def _torchvision_vgg_head(x: Any, classes: int) -> Any:
    x = AdaptiveAveragePool2D((7, 7), name="avgpool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(4096, activation="relu", kernel_initializer=_torch_classifier_kernel(), name="fc1")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu", kernel_initializer=_torch_classifier_kernel(), name="fc2")(x)
    x = layers.Dropout(0.5)(x)
    return layers.Dense(classes, kernel_initializer=_torch_classifier_kernel(), name="predictions")(x)


def _torchvision_mobilenet_head(x: Any, classes: int) -> Any:
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    x = layers.Dropout(0.2)(x)
    return layers.Dense(classes, kernel_initializer=_torch_classifier_kernel(), name="predictions")(x)


# keras.applications models whose own top differs from torchvision's: built without it, plus this head.
TORCHVISION_HEADS: dict[str, Callable[[Any, int], Any]] = {
    "VGG16": _torchvision_vgg_head,
    "VGG19": _torchvision_vgg_head,
    "MobileNetV2": _torchvision_mobilenet_head,
}


def applications_model(name: str, input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    constructor = getattr(keras.applications, name)
    # An input tensor rather than input_shape: keras.applications refuses input_shape below 32 px even
    # with weights=None, where torchvision builds the same networks at any size that survives pooling.
    inputs = keras.Input(input_shape)
    options: dict[str, Any] = {"weights": None, "input_tensor": inputs}
    head = TORCHVISION_HEADS.get(name)
    if head is not None:
        base = constructor(include_top=False, **options)
        model = keras.Model(inputs, head(base.output, classes), name=name)
    else:
        model = constructor(include_top=True, classes=classes, classifier_activation=None, **options)
    return _without_input_scaling(model, inputs)


def _without_input_scaling(model: keras.Model, inputs: Any) -> keras.Model:
    """The model minus the Rescaling(1/255) / Normalization layers some keras.applications models
    (EfficientNet B0-B7) put first: trainbench has normalised the input already, the same way for every
    framework, and would otherwise be divided by 255 again. They hold no trainable weights."""
    scaling = (layers.Rescaling, layers.Normalization)
    first = [layer for layer in model.layers[1:4] if isinstance(layer, scaling)]
    if not first:
        return model
    body = keras.Model(first[-1].output, model.output, name=f"{model.name}_body")
    return keras.Model(inputs, body(inputs), name=model.name)


# -- torchvision's ResNet-18 -----------------------------------------------------------------------
def _conv(
    x: Any, filters: int, kernel: int, stride: int, name: str, *, bias: bool = False, activation: str | None = None
) -> Any:
    """nn.Conv2d(kernel, stride, padding=kernel // 2): torch pads both sides equally, which Keras'
    padding="same" does only at stride 1."""
    pad = kernel // 2
    if stride == 1:
        padding = "same"
    else:
        padding = "valid"
        if pad:
            x = layers.ZeroPadding2D(pad, name=f"{name}.pad")(x)
    fan_in = kernel * kernel * x.shape[-1]
    return layers.Conv2D(
        filters,
        kernel,
        stride,
        padding=padding,
        use_bias=bias,
        activation=activation,
        kernel_initializer=_torch_kaiming_fan_out(),
        bias_initializer=_torch_bias(fan_in) if bias else "zeros",
        name=name,
    )(x)


def _batchnorm(x: Any, name: str) -> Any:
    # torch momentum 0.1 weighs the new batch; Keras momentum weighs the running value.
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name)(x)


def _basic_block(x: Any, filters: int, stride: int, name: str) -> Any:
    shortcut = x
    out = _conv(x, filters, 3, stride, f"{name}.conv1")
    out = layers.ReLU()(_batchnorm(out, f"{name}.bn1"))
    out = _batchnorm(_conv(out, filters, 3, 1, f"{name}.conv2"), f"{name}.bn2")
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _batchnorm(_conv(x, filters, 1, stride, f"{name}.downsample.0"), f"{name}.downsample.1")
    return layers.ReLU()(layers.Add()([out, shortcut]))


def resnet18(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """torchvision.models.resnet18: same layers, padding, BatchNorm epsilon and initialisation."""
    inputs = keras.Input(input_shape)
    x = _conv(inputs, 64, 7, 2, "conv1")
    x = layers.ReLU()(_batchnorm(x, "bn1"))
    x = layers.ZeroPadding2D(1)(x)  # after ReLU, zero padding is the same as torch's -inf for max pooling
    x = layers.MaxPooling2D(3, 2, name="maxpool")(x)
    for stage, (filters, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        x = _basic_block(x, filters, stride, f"layer{stage}.0")
        x = _basic_block(x, filters, 1, f"layer{stage}.1")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    outputs = _linear(classes, x.shape[-1], name="fc")(x)
    return keras.Model(inputs, outputs, name="resnet18")


# -- torchvision's AlexNet -------------------------------------------------------------------------
def alexnet(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """torchvision.models.alexnet: same layers, padding, adaptive 6x6 pooling, dropout and initialisation."""
    inputs = keras.Input(input_shape)

    def conv(x: Any, filters: int, kernel: int, stride: int, pad: int, name: str) -> Any:
        if pad and stride != 1:
            x = layers.ZeroPadding2D(pad)(x)
        padding = "same" if pad and stride == 1 else "valid"
        fan_in = kernel * kernel * x.shape[-1]
        return layers.Conv2D(
            filters,
            kernel,
            stride,
            padding=padding,
            activation="relu",
            name=name,
            kernel_initializer=_torch_default_kernel(),
            bias_initializer=_torch_bias(fan_in),
        )(x)

    x = conv(inputs, 64, 11, 4, 2, "features.0")
    x = layers.MaxPooling2D(3, 2)(x)
    x = conv(x, 192, 5, 1, 2, "features.3")
    x = layers.MaxPooling2D(3, 2)(x)
    x = conv(x, 384, 3, 1, 1, "features.6")
    x = conv(x, 256, 3, 1, 1, "features.8")
    x = conv(x, 256, 3, 1, 1, "features.10")
    x = layers.MaxPooling2D(3, 2)(x)
    x = AdaptiveAveragePool2D((6, 6), name="avgpool")(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = _linear(4096, x.shape[-1], "relu", name="classifier.1")(x)
    x = layers.Dropout(0.5)(x)
    x = _linear(4096, 4096, "relu", name="classifier.4")(x)
    outputs = _linear(classes, 4096, name="classifier.6")(x)
    return keras.Model(inputs, outputs, name="alexnet")


# -- torchvision's ResNet-50 (v1.5) ------------------------------------------------------------------
def _bottleneck(x: Any, width: int, stride: int, name: str) -> Any:
    """torchvision's Bottleneck: 1x1 -> 3x3 (the stride is here: "v1.5") -> 1x1 to 4x width."""
    shortcut = x
    out = layers.ReLU()(_batchnorm(_conv(x, width, 1, 1, f"{name}.conv1"), f"{name}.bn1"))
    out = layers.ReLU()(_batchnorm(_conv(out, width, 3, stride, f"{name}.conv2"), f"{name}.bn2"))
    out = _batchnorm(_conv(out, width * 4, 1, 1, f"{name}.conv3"), f"{name}.bn3")
    if stride != 1 or x.shape[-1] != width * 4:
        shortcut = _batchnorm(_conv(x, width * 4, 1, stride, f"{name}.downsample.0"), f"{name}.downsample.1")
    return layers.ReLU()(layers.Add()([out, shortcut]))


def resnet50(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """torchvision.models.resnet50 (v1.5: stride on the 3x3 convolution, no convolution biases): the same
    layers, padding, BatchNorm epsilon and initialisation; keras.applications.ResNet50 is v1 (stride on the
    first 1x1, biases everywhere: +0.1% parameters, 5.6% fewer FLOPs) and would be another network."""
    inputs = keras.Input(input_shape)
    x = _conv(inputs, 64, 7, 2, "conv1")
    x = layers.ReLU()(_batchnorm(x, "bn1"))
    x = layers.ZeroPadding2D(1)(x)
    x = layers.MaxPooling2D(3, 2, name="maxpool")(x)
    for stage, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1):
        for block in range(blocks):
            x = _bottleneck(x, width, stride if block == 0 else 1, f"layer{stage}.{block}")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    outputs = _linear(classes, x.shape[-1], name="fc")(x)
    return keras.Model(inputs, outputs, name="resnet50")


OWN_BUILDERS.update({"resnet18": resnet18, "resnet50": resnet50, "alexnet": alexnet})


# -- ViT: keras-hub's backbone with torchvision's head ---------------------------------------------
def vision_transformer(model: VitModel, input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """keras-hub's ViTBackbone at the YAML's sizes (torchvision's layout: a convolution with bias embeds the
    patches, a class token, learned position embeddings, pre-norm blocks with biased attention and a GELU MLP,
    LayerNorm eps 1e-6, no dropout, a final LayerNorm) and torchvision's head: one Linear on the class token,
    zero-initialised as torchvision does. Parameter counts are exact."""
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=input_shape,
        patch_size=model.patch_size,
        num_layers=model.num_layers,
        num_heads=model.num_heads,
        hidden_dim=model.hidden_size,
        mlp_dim=model.mlp_size,
        layer_norm_epsilon=1e-6,
    )
    logits = layers.Dense(classes, kernel_initializer="zeros", name="head")(backbone.output[:, 0, :])
    return keras.Model(backbone.input, logits, name=model.name)


# -- text: keras-hub encoders with transformers' classification heads -----------------------------------
def text_classifier(model: TransformerModel, seq_len: int, classes: int, mask_padding: bool = True) -> keras.Model:
    """A randomly initialised keras-hub encoder (trainbench.frameworks.keras.BUILDERS) with the classification
    head of the transformers model the PyTorch adapter builds from the same dimensions; token ids in, logits
    out. Parameter counts are exact.

    The backbone's own layers and weights are called in the order its functional graph calls them
    (`_encode`), with two changes of form that leave the values and gradients as they are:
    - Padding (id 0) is masked out of attention only when `mask_padding` (the data has padding), as the
      PyTorch and MLX builds do. keras-hub's backbones always take a padding_mask input, and an all-true mask
      is not free: Keras' masked softmax then selects where(mask, scores, -1e9) over every layer's batch x
      heads x seq x seq attention scores (plus the mask's compare, casts and broadcasts: 21 more ops in a
      2-layer BERT's TensorFlow graph) where unmasked attention runs a plain softmax, with identical logits.
    - BERT's segment embedding is looked up by selection (`SegmentLookup`), not by a gather."""
    import keras_hub

    family = BUILDERS.get(model.architecture())
    hidden = model.hidden_size
    dimensions = {
        "vocabulary_size": model.vocab_size,
        "num_layers": model.num_layers,
        "num_heads": model.num_heads,
        "hidden_dim": hidden,
        "intermediate_dim": model.intermediate_size,
        "max_sequence_length": model.max_position_embeddings,
    }
    token_ids = keras.Input((seq_len,), dtype="int32", name="token_ids")
    padding_mask = ops.not_equal(token_ids, 0) if mask_padding else None
    if family == "BertBackbone":
        # BertForSequenceClassification: the pooler (in the backbone), dropout 0.1, Linear(hidden, classes).
        # transformers' type_vocab_size is 2 (keras-hub's default num_segments: 4).
        backbone = keras_hub.models.BertBackbone(num_segments=2, **dimensions)
        inputs = {"token_ids": token_ids, "segment_ids": ops.zeros_like(token_ids)}
        pooled = backbone.pooled_dense(_encode(backbone, inputs, padding_mask)[:, 0, :])
        x = layers.Dropout(0.1)(pooled)
    elif family == "DistilBertBackbone":
        # DistilBertForSequenceClassification: the first token, Linear(hidden, hidden) + ReLU, dropout 0.2.
        backbone = keras_hub.models.DistilBertBackbone(**dimensions)
        sequence = _encode(backbone, {"token_ids": token_ids}, padding_mask)
        x = layers.Dense(hidden, activation="relu", kernel_initializer=_transformers_kernel(), name="pre_classifier")(
            sequence[:, 0, :]
        )
        x = layers.Dropout(0.2)(x)
    else:
        raise ValueError(f"model.family={model.family!r}: trainbench builds BertBackbone and DistilBertBackbone")
    logits = layers.Dense(classes, kernel_initializer=_transformers_kernel(), name="classifier")(x)
    return keras.Model(token_ids, logits, name=model.name)


def _encode(backbone: keras.Model, inputs: dict[str, Any], padding_mask: Any) -> Any:
    """The backbone's sequence output: its embedding layers, embedding layer norm and dropout, then every
    transformer layer, called as keras-hub's own functional graph calls them (BertBackbone /
    DistilBertBackbone.__init__), with the padding mask only when there is one and BERT's segment embedding
    through `SegmentLookup`."""
    try:
        if hasattr(backbone, "segment_embedding"):  # BERT: token + position + segment embeddings
            tokens = backbone.token_embedding(inputs["token_ids"])
            segments = SegmentLookup(backbone.segment_embedding)(inputs["segment_ids"])
            x = backbone.embeddings_add((tokens, backbone.position_embedding(tokens), segments))
        else:  # DistilBERT: token and position embeddings in one layer
            x = backbone.embeddings(inputs["token_ids"])
        x = backbone.embeddings_dropout(backbone.embeddings_layer_norm(x))
        for layer in backbone.transformer_layers:
            x = layer(x) if padding_mask is None else layer(x, padding_mask=padding_mask)
    except AttributeError as error:
        raise RuntimeError(
            f"keras-hub's {type(backbone).__name__} no longer has the layer trainbench calls to run "
            f"it ({error}): update trainbench.frameworks.keras.models"
        ) from None
    return x


class SegmentLookup(layers.Layer):
    """BERT's segment (token type) embedding: row `id` of the Embedding layer's table for every token, picked
    by one select per segment instead of a gather. Values and gradients are the gather's. The form matters to
    the gradient: a gather's is a scatter-add of every token's row into the table, and with every token in
    segment 0 (trainbench's text data, and most fine-tuning data) all batch x seq rows collide on one row.
    Under XLA on an H100 that one kernel took 32.1 ms of Keras-on-JAX BERT-Large bs32's 63.6 ms step
    (see results/2026-11-24-h100); a select's gradient is a sum over the tokens. PyTorch's embedding
    backward sorts the ids first and is not slowed."""

    def __init__(self, embedding: layers.Embedding, **kwargs: Any) -> None:
        super().__init__(dtype=embedding.dtype_policy, **kwargs)
        self.embedding = embedding  # tracked: its table stays the model's one segment-embedding weight

    def call(self, segment_ids: Any) -> Any:
        # Selected in the table's dtype and cast after, as Embedding casts after its gather: under a mixed
        # policy the gradient then reaches the table through the same cast and is summed in float32.
        table = ops.convert_to_tensor(self.embedding.embeddings)
        ids = ops.expand_dims(segment_ids, -1)
        rows = ops.where(ids == 0, table[0], ops.zeros_like(table[0]))  # an id out of range gives zeros
        for segment in range(1, self.embedding.input_dim):
            rows = ops.where(ids == segment, table[segment], rows)
        return ops.cast(rows, self.compute_dtype)

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*input_shape, self.embedding.output_dim)


def _transformers_kernel() -> keras.initializers.Initializer:
    """transformers' Linear initialisation: normal(0, initializer_range=0.02), zero bias."""
    return keras.initializers.RandomNormal(0.0, 0.02)


def count_trainable(model: keras.Model) -> int:
    """Trainable parameters: BatchNorm's moving statistics and other non-trainable state excluded."""
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


class Preprocess(layers.Layer):
    """A uint8 (N, C, H, W) batch -> the model's normalised float NHWC input, on the device.

    The same steps in the same order as the PyTorch adapter (the PyTorch adapter's `prepare`): scale to [0, 1],
    bilinear resize (half-pixel centres, no antialiasing, like F.interpolate(align_corners=False)),
    gray -> RGB, subtract the mean and divide by the standard deviation; then NCHW -> NHWC. No weights,
    so the trained model is exactly the one counted. Always float32, also under a mixed policy: the
    model's first layer casts, as autocast does in PyTorch.
    """

    def __init__(self, image_size: int, channels: int, mean: list[float], std: list[float], **kwargs: Any) -> None:
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.image_size, self.channels = image_size, channels
        self.mean, self.std = list(mean), list(std)

    def call(self, images: Any) -> Any:
        x = ops.transpose(ops.cast(images, "float32") / 255.0, (0, 2, 3, 1))
        if (x.shape[1], x.shape[2]) != (self.image_size, self.image_size):
            x = ops.image.resize(
                x,
                (self.image_size, self.image_size),
                interpolation="bilinear",
                antialias=False,
                data_format="channels_last",
            )
        if x.shape[-1] != self.channels:
            x = ops.repeat(x, self.channels, axis=-1)
        mean = ops.convert_to_tensor(np.asarray(self.mean, dtype="float32"))
        std = ops.convert_to_tensor(np.asarray(self.std, dtype="float32"))
        return (x - mean) / std

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return (input_shape[0], self.image_size, self.image_size, self.channels)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "image_size": self.image_size,
            "channels": self.channels,
            "mean": self.mean,
            "std": self.std,
        }


def sigmoid_categorical_crossentropy(labels: Any, logits: Any) -> Any:
    """The seed blog's head, as pytorch._loss: sigmoid outputs fed to categorical cross-entropy, which
    first rescales them to sum to one."""
    probs = ops.sigmoid(ops.cast(logits, "float32"))
    probs = ops.maximum(probs / ops.sum(probs, axis=-1, keepdims=True), 1e-7)
    # Keras may hand the labels over as (N,) or (N, 1): gather with (N, 1) either way.
    picked = ops.take_along_axis(probs, ops.reshape(ops.cast(labels, "int32"), (-1, 1)), axis=-1)
    return -ops.log(ops.reshape(picked, (-1,)))


def flops_per_sample(model: keras.Model, training: bool = True) -> float | None:
    """Training FLOPs (forward + backward) per sample, counted as torch.utils.flop_counter counts the
    PyTorch adapter's models, so that one model has one figure (and one MFU) in every framework:
    matrix products and convolutions only, 2 FLOPs per multiply-add; backward = the weight gradient of
    every such layer plus the input gradient of every one but the first (nothing upstream needs it).
    Read off the built graph: None for a model whose layers are shared or have no static shapes."""
    flops, first = 0.0, True
    try:
        for layer in _flattened(model):
            kernel = getattr(layer, "kernel", None)
            if kernel is None or len(kernel.shape) < 2:
                continue
            # Dense: (in, out) per output position; ConvND / DepthwiseConv2D: (*window, in/groups, out).
            positions = int(np.prod(layer.output.shape[1:-1]))
            forward = 2.0 * positions * int(np.prod(kernel.shape))
            flops += forward * ((2 if first else 3) if training else 1)
            first = False
    except (AttributeError, ValueError, TypeError):
        return None
    return flops


def _flattened(model: keras.Model) -> Any:
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _flattened(layer)
        else:
            yield layer
