"""FLOPs counted the way torch.utils.flop_counter counts the PyTorch adapter's models, for the frameworks
that have no counter of their own, so that one model has one figure (and one MFU) in every framework.
Framework-free: matrix products and convolutions only, 2 FLOPs per multiply-add."""

from __future__ import annotations

from trainbench.config.schema import TransformerModel, VitModel


def transformer_flops_per_sample(model: TransformerModel, seq_len: int, classes: int, training: bool = True) -> float:
    """FLOPs per sequence of a BERT-family classifier: every Linear (training: 3x its forward: forward,
    input and weight gradients) and attention as scaled_dot_product_attention (forward 2 products,
    backward 5: the scores are recomputed); embeddings, softmax and normalisation are not counted."""
    hidden, intermediate, depth = model.hidden_size, model.intermediate_size, model.num_layers
    linear = depth * 2.0 * seq_len * (4 * hidden * hidden + 2 * hidden * intermediate)
    linear += 2.0 * hidden * hidden + 2.0 * hidden * classes  # pooler / pre-classifier and classifier (one token)
    attention = depth * 2 * 2.0 * seq_len * seq_len * hidden
    return 3 * linear + 3.5 * attention if training else linear + attention


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


def dense_and_conv_flops(layers: list[tuple[int, int]], training: bool) -> float:
    """`layers`: (output positions, kernel size incl. input and output channels) of each matrix product or
    convolution in forward order. Backward = the weight gradient of every layer plus the input gradient of
    every one but the first (nothing upstream needs it)."""
    flops = 0.0
    for position, (outputs, kernel) in enumerate(layers):
        forward = 2.0 * outputs * kernel
        flops += forward * ((2 if position == 0 else 3) if training else 1)
    return flops
