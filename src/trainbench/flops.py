"""FLOPs and parameters counted from a model's sizes, the way torch.utils.flop_counter counts the PyTorch
adapter's models, so that one model has one figure (and one MFU) in every framework, whether or not the
framework has a counter of its own. Framework-free: matrix products and convolutions only, 2 FLOPs per
multiply-add. The model configs (trainbench.config.schema) answer with these; tests check each framework's
counter and its built network against them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainbench.config.schema import MlpModel, TransformerModel, VitModel


def transformer_flops_per_sample(model: TransformerModel, seq_len: int, classes: int, training: bool = True) -> float:
    """FLOPs per sequence of a BERT-family classifier: every Linear (training: 3x its forward: forward,
    input and weight gradients) and attention as scaled_dot_product_attention (forward 2 products,
    backward 5: the scores are recomputed); embeddings, softmax and normalisation are not counted."""
    hidden, intermediate, depth = model.hidden_size, model.intermediate_size, model.num_layers
    linear = depth * 2.0 * seq_len * (4 * hidden * hidden + 2 * hidden * intermediate)
    linear += 2.0 * hidden * hidden + 2.0 * hidden * classes  # pooler / pre-classifier and classifier (one token)
    attention = depth * 2 * 2.0 * seq_len * seq_len * hidden
    return 3 * linear + 3.5 * attention if training else linear + attention


def transformer_parameters(model: TransformerModel, classes: int) -> int:
    """Trainable parameters of transformers' *ForSequenceClassification: token and position embeddings (BERT:
    token types too), per layer the query/key/value/output projections, the feed-forward pair and two
    LayerNorms, then the pooler (BERT) or pre-classifier (DistilBERT) and the classifier."""
    hidden, intermediate = model.hidden_size, model.intermediate_size
    embeddings = (model.vocab_size + model.max_position_embeddings + (2 if model.family == "bert" else 0)) * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden + 2 * 2 * hidden
    head = hidden * hidden + hidden + hidden * classes + classes
    return embeddings + 2 * hidden + model.num_layers * layer + head


def vit_flops_per_sample(model: VitModel, image_size: int, classes: int, training: bool = True) -> float:
    """FLOPs per image of a ViT as torch.utils.flop_counter counts torchvision's: the patch convolution (training:
    2x its forward, no input gradient), every Linear (3x: the packed query/key/value projection, the attention
    output, the MLP; the head on the class token) and attention as scaled_dot_product_attention (forward 2
    products, backward 5); the class token, position embeddings, softmax and normalisation are not counted."""
    hidden, depth = model.hidden_size, model.num_layers
    patches = model.patches(image_size)
    tokens = patches + 1  # and the class token
    convolution = 2.0 * patches * model.patch_size**2 * model.channels * hidden
    linear = depth * 2.0 * tokens * (4 * hidden * hidden + 2 * hidden * model.mlp_size) + 2.0 * hidden * classes
    attention = depth * 2 * 2.0 * tokens * tokens * hidden
    if not training:
        return convolution + linear + attention
    return 2 * convolution + 3 * linear + 3.5 * attention


def vit_parameters(model: VitModel, image_size: int, classes: int) -> int:
    """Trainable parameters of torchvision's VisionTransformer: the patch convolution, the class token, one
    position embedding per token, per block two LayerNorms, the packed attention and the MLP, the final
    LayerNorm and the head."""
    hidden, mlp = model.hidden_size, model.mlp_size
    patch = model.channels * model.patch_size**2 * hidden + hidden
    tokens = model.patches(image_size) + 1
    block = 2 * 2 * hidden + 3 * hidden * hidden + 3 * hidden + hidden * hidden + hidden
    block += hidden * mlp + mlp + mlp * hidden + hidden
    return patch + hidden + tokens * hidden + model.num_layers * block + 2 * hidden + hidden * classes + classes


def mlp_widths(model: MlpModel, features: int, classes: int) -> list[int]:
    """The widths a sample passes through: its flattened features, each hidden layer, the classes."""
    return [features, *model.layers(), classes]


def mlp_flops_per_sample(model: MlpModel, features: int, classes: int, training: bool = True) -> float:
    widths = mlp_widths(model, features, classes)
    return dense_and_conv_flops([(1, a * b) for a, b in zip(widths, widths[1:], strict=False)], training)


def mlp_parameters(model: MlpModel, features: int, classes: int) -> int:
    widths = mlp_widths(model, features, classes)
    return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))


def dense_and_conv_flops(layers: list[tuple[int, int]], training: bool) -> float:
    """`layers`: (output positions, kernel size incl. input and output channels) of each matrix product or
    convolution in forward order. Backward = the weight gradient of every layer plus the input gradient of
    every one but the first (nothing upstream needs it)."""
    flops = 0.0
    for position, (outputs, kernel) in enumerate(layers):
        forward = 2.0 * outputs * kernel
        flops += forward * ((2 if position == 0 else 3) if training else 1)
    return flops
