"""MLX builds the networks torchvision and transformers build: the same parameters, the same numbers out of the
same weights, and they learn.

The references are the PyTorch adapter's own builders (trainbench.frameworks.pytorch.models: torchvision,
transformers and trainbench's MLP), built on torch's meta device (shapes only, no memory, no initialisation
time), so BERT-large costs nothing to count. MLX is lazy, so the MLX models are counted without their weights
being drawn either.

The tests compose the typed model config from conf/model/ as a cell does and hand it to the MLX builders
(trainbench.frameworks.mlx.models), as the MLX adapter does; each picks its builder by the model's name or
family (trainbench.frameworks.mlx.BUILDERS).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
from functools import cache
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
optim = pytest.importorskip("mlx.optimizers")
torch = pytest.importorskip("torch")
# The PyTorch builders import torchvision and transformers when a test builds a model: not at collection,
# where every test run would pay for them.
if importlib.util.find_spec("torchvision") is None or importlib.util.find_spec("transformers") is None:
    pytest.skip("needs torchvision and transformers", allow_module_level=True)

from hydra import compose, initialize_config_dir  # noqa: E402

import trainbench.config.plugins  # noqa: E402, F401  (the schemas a composed cell names)
from trainbench.config import CONF_DIR, validate  # noqa: E402
from trainbench.config.schema import MlpModel, ModelConfig, TransformerModel, VisionModel  # noqa: E402
from trainbench.data import Dataset, Split  # noqa: E402
from trainbench.frameworks.mlx import models as mlx_models  # noqa: E402
from trainbench.frameworks.pytorch import models as torch_models  # noqa: E402

IMAGE_MODELS = ["mlp", "mlp_deep", "resnet18", "resnet50", "mobilenet_v2", "vit_b16"]
# Full-size logits cost seconds each (random init of the embeddings): the slow tier's. The fast tier covers both
# families' code at small size below, and every full size's parameters.
TEXT_MODELS = [
    pytest.param("distilbert", marks=pytest.mark.slow),
    pytest.param("bert_base", marks=pytest.mark.slow),
    pytest.param("bert_large", marks=pytest.mark.slow),
]
SHAPES = {"32px-10": (32, 10), "224px-1000": (224, 1000)}


@cache
def model_config(name: str) -> ModelConfig:
    """conf/model/NAME.yaml as a cell sees it: composed by Hydra and validated (mlp_deep extends mlp)."""
    text = "/schema/model/transformer@" in (CONF_DIR / "model" / f"{name}.yaml").read_text()
    data = ["data=synthetic_text"] if text else []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=[f"model={name}", *data])).model


def torch_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def shaped_like(size: int, classes: int) -> Dataset:
    """A dataset's shape without its samples: what the PyTorch builders read."""
    nothing = Split(np.zeros((0, 3, size, size), np.uint8), np.zeros(0, np.int64))
    return Dataset("shape", nothing, nothing, classes, [0.5] * 3, [0.25] * 3, size, 3)


def torch_reference(cfg: ModelConfig, size: int, classes: int) -> int:
    """Trainable parameters of the PyTorch adapter's model for the same config and shape."""
    with torch.device("meta"):
        if isinstance(cfg, MlpModel):
            return torch_count(torch_models.mlp(cfg, shaped_like(size, classes)))
        assert isinstance(cfg, VisionModel)
        return torch_count(torch_models.torchvision_model(cfg, classes, size))


def transformers_classifier(cfg: TransformerModel, classes: int) -> torch.nn.Module:
    """The PyTorch adapter's text model: a transformers *ForSequenceClassification from the same config,
    padding (id 0) masked out of attention."""
    return torch_models.transformer_classifier(cfg, classes, mask_padding=True)


def assert_same(what: str, reference: int, ours: int) -> None:
    assert ours == reference, f"{what}: torch {reference:,} vs MLX {ours:,} ({(ours / reference - 1) * 100:+.3f}%)"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_image_model_parameters_match_torch(model: str, shape: str) -> None:
    size, classes = SHAPES[shape]
    cfg = model_config(model)
    ours = mlx_models.num_parameters(mlx_models.build(cfg, (size, size, 3), classes))
    assert_same(f"{model}@{shape}", torch_reference(cfg, size, classes), ours)


@pytest.mark.parametrize("model", ["distilbert", "bert_base", "bert_large"])
def test_text_model_parameters_match_transformers(model: str) -> None:
    cfg = model_config(model)
    with torch.device("meta"):
        reference = torch_count(transformers_classifier(cfg, cfg.num_labels))
    ours = mlx_models.num_parameters(mlx_models.text_classifier(cfg, cfg.seq_len, cfg.num_labels))
    assert_same(model, reference, ours)


@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_image_model_gives_logits_per_image(model: str) -> None:
    mx.random.seed(0)
    logits = mlx_models.build(model_config(model), (32, 32, 3), 10)(mx.random.normal((2, 32, 32, 3)))
    assert logits.shape == (2, 10)
    assert np.isfinite(np.array(logits)).all()


@pytest.mark.parametrize("model", TEXT_MODELS)
def test_text_model_gives_logits_per_sequence(model: str) -> None:
    cfg = model_config(model)
    ids = mx.array([[101, 7, 8, 9, 102, 0, 0, 0], [101, 5, 6, 7, 8, 9, 10, 102]])
    logits = mlx_models.text_classifier(cfg, cfg.seq_len, cfg.num_labels)(ids)
    assert logits.shape == (2, cfg.num_labels)
    assert np.isfinite(np.array(logits)).all()


# -- same weights, same numbers --------------------------------------------------------------------
def load_torch_weights(model: Any, state: dict[str, torch.Tensor], renames: list[tuple[str, str]]) -> None:
    """Copy a torch state dict into the MLX model: names rewritten by `renames`, NCHW kernels made NHWC."""
    weights = []
    for name, tensor in state.items():
        if name.endswith(("num_batches_tracked", "position_ids")):
            continue
        for pattern, replacement in renames:
            name = re.sub(pattern, replacement, name)
        array = tensor.detach().numpy()
        weights.append((name, mx.array(array.transpose(0, 2, 3, 1) if array.ndim == 4 else array)))
    model.load_weights(weights, strict=True)


# MLX's nn.Sequential keeps its modules in `layers`: features.layers.1.conv.layers.0 is torch's features.1.conv.0.
SEQUENTIAL_NAMES = [(r"\.(\d+)", r".layers.\1")]
BERT_NAMES = [
    (r"^bert\.embeddings\.LayerNorm", "encoder.embedding_norm"),
    (r"^bert\.embeddings", "encoder"),
    (r"^bert\.encoder\.layer", "encoder.layers"),
    (r"attention\.self\.", ""),
    (r"attention\.output\.dense", "attention_output"),
    (r"attention\.output\.LayerNorm", "attention_norm"),
    (r"intermediate\.dense", "intermediate"),
    (r"output\.dense", "output"),
    (r"output\.LayerNorm", "output_norm"),
    (r"^bert\.pooler\.dense", "pooler"),
]
DISTILBERT_NAMES = [
    (r"^distilbert\.embeddings\.LayerNorm", "encoder.embedding_norm"),
    (r"^distilbert\.embeddings", "encoder"),
    (r"^distilbert\.transformer\.layer", "encoder.layers"),
    (r"attention\.q_lin", "query"),
    (r"attention\.k_lin", "key"),
    (r"attention\.v_lin", "value"),
    (r"attention\.out_lin", "attention_output"),
    (r"sa_layer_norm", "attention_norm"),
    (r"ffn\.lin1", "intermediate"),
    (r"ffn\.lin2", "output"),
    (r"output_layer_norm", "output_norm"),
]


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "mobilenet_v2"])
def test_image_model_computes_what_torchvision_computes(model: str) -> None:
    """torchvision's weights (BatchNorm statistics included) in the MLX model give torchvision's logits."""
    torch.manual_seed(0)
    reference = torch_models.torchvision_model(model_config(model), 10, 32)
    with torch.no_grad():  # non-trivial BatchNorm statistics, so eval mode uses them
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
    ours = mlx_models.build(model_config(model), (32, 32, 3), 10)
    load_torch_weights(ours, reference.state_dict(), SEQUENTIAL_NAMES)
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype("float32")
    with torch.no_grad():
        expected = reference.eval()(torch.from_numpy(images)).numpy()
    got = np.array(ours.eval()(mx.array(images.transpose(0, 2, 3, 1))))
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


# torchvision's ViT names its blocks encoder_layer_N (an OrderedDict) where MLX keeps a list (after the
# Sequential renames, which would otherwise take the block's index for a Sequential's).
VIT_NAMES = [*SEQUENTIAL_NAMES, (r"encoder_layer_(\d+)", r"\1")]


def test_vit_computes_what_torchvision_computes() -> None:
    """torchvision's ViT weights (the packed attention projection included) in the MLX ViT give torchvision's
    logits. At small sizes (2 blocks of width 64), with a non-zero head: the code is the same at any size."""
    small = dataclasses.replace(model_config("vit_b16"), num_layers=2, hidden_size=64, num_heads=4, mlp_size=128)
    torch.manual_seed(0)
    reference = torch_models.torchvision_model(small, 10, 32)
    with torch.no_grad():
        reference.heads.head.weight.normal_(0, 0.1)  # torchvision's zero head would give zero logits
        reference.encoder.pos_embedding.normal_(0, 0.1)
    ours = mlx_models.build(small, (32, 32, 3), 10)
    load_torch_weights(ours, reference.state_dict(), VIT_NAMES)
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype("float32")
    with torch.no_grad():
        expected = reference.eval()(torch.from_numpy(images)).numpy()
    got = np.array(ours.eval()(mx.array(images.transpose(0, 2, 3, 1))))
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("family", ["distilbert", "bert"])
def test_text_model_computes_what_transformers_computes(family: str) -> None:
    """transformers' weights in the MLX model give transformers' logits, padding masked as the PyTorch adapter
    masks it (a small configuration of the same architecture)."""
    cfg = TransformerModel(
        name=family,
        family=family,
        num_layers=2,
        hidden_size=32,
        num_heads=4,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    reference = transformers_classifier(cfg, 3).eval()
    with torch.no_grad():  # transformers' 0.02 init leaves logits near 0: larger weights make differences show
        for parameter in reference.parameters():
            parameter.normal_(0.0, 0.5)
    ours = mlx_models.text_classifier(cfg, 8, 3)
    renames = [(r"^classifier\.", ""), *(BERT_NAMES if family == "bert" else DISTILBERT_NAMES)]
    load_torch_weights(ours, dict(reference.named_parameters()), renames)
    ids = np.array([[1, 7, 8, 9, 2, 0, 0, 0], [1, 5, 6, 7, 8, 9, 10, 2]])  # the first one padded
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids))
    got = np.array(ours.eval()(mx.array(ids)))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-3, atol=1e-4)


# -- they learn ------------------------------------------------------------------------------------
def sgd_losses(model: Any, images: Any, labels: Any, steps: int, lr: float) -> list[float]:
    optimizer = optim.SGD(learning_rate=lr, momentum=0.9)

    def loss_fn(module: Any, x: Any, y: Any) -> Any:
        return nn.losses.cross_entropy(module(x), y, reduction="mean")

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    losses = []
    for _ in range(steps):
        loss, grads = loss_and_grad(model, images, labels)
        optimizer.update(model, grads)
        mx.eval(model.state, optimizer.state)  # model.state holds BatchNorm's running statistics too
        losses.append(loss.item())
    return losses


# ResNet-18 takes ~0.5 s a step on MLX's CPU backend and halves its loss by its third: five steps.
@pytest.mark.parametrize(("model", "steps", "lr"), [("mlp", 10, 0.01), ("resnet18", 5, 0.05)])
def test_a_few_sgd_steps_reduce_the_loss(model: str, steps: int, lr: float) -> None:
    """Eight images of four noisy class prototypes, 16 px: the training loss falls within a few steps."""
    mx.random.seed(0)
    prototypes = mx.random.normal((4, 16, 16, 3))
    labels = mx.arange(8) % 4
    images = prototypes[labels] + 0.5 * mx.random.normal((8, 16, 16, 3))
    net = mlx_models.build(model_config(model), (16, 16, 3), 4)
    losses = sgd_losses(net, images, labels, steps, lr)
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < 0.5 * losses[0], losses


def test_a_model_mlx_cannot_build_is_refused_before_any_work_naming_who_can() -> None:
    from trainbench.config import ConfigError

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"), pytest.raises(ConfigError) as refused:
        validate(compose("config", overrides=["framework=mlx", "model=vgg16", "data.image_size=64"]))
    assert "cannot build model `vgg16`" in str(refused.value) and "framework=pytorch" in str(refused.value)
    with pytest.raises(
        ValueError, match=r"model `vgg16` has no MLX build: use one of mobilenet_v2, resnet18, resnet50"
    ):
        mlx_models.build(model_config("vgg16"), (32, 32, 3), 10)
    with pytest.raises(ValueError, match=r"model\.seq_len=1024 exceeds model\.max_position_embeddings=512"):
        mlx_models.text_classifier(model_config("distilbert"), 1024, 2)
