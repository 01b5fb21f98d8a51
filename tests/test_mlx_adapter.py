"""framework=mlx behind the same contract as the others, in this process on the CPU: its optimizers update weights
as torch's do, mixed precision computes in half precision (token ids untouched), fp16 skips overflowing steps as
torch's GradScaler does, a compiled step is the eager step, and fp32 means fp32 on CUDA too.

The end-to-end cells (through the real entry point) are in tests/test_inference_cells.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
torch = pytest.importorskip("torch")

from hydra import compose, initialize_config_dir  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

import trainbench.config.plugins  # noqa: E402, F401  (the schemas a composed cell names)
from trainbench import data as datasets  # noqa: E402
from trainbench.config import CONF_DIR, validate  # noqa: E402
from trainbench.frameworks.base import DeviceUnavailable  # noqa: E402
from trainbench.frameworks.mlx.adapter import Adapter, MlxDevice, Trainer  # noqa: E402

SMALL_MLP = [
    "model=mlp",
    "model.hidden_sizes=[16]",
    "data=digits",
    "data.num_samples=64",
    "data.num_val_samples=16",
    "batch_size=32",
]
TINY_TEXT = [
    "model=distilbert",
    "data=synthetic_text",
    "model.num_layers=1",
    # Narrow: at DistilBERT's width of 768 drawing and casting the 30k-token embedding took seconds. The vocabulary
    # stays: ids above 256 are what a bf16 cast would no longer keep whole.
    "model.hidden_size=64",
    "model.num_heads=2",
    "model.intermediate_size=128",
    "model.seq_len=16",
    "data.num_samples=16",
    "data.num_val_samples=8",
    "batch_size=8",
]
SMALL_CNN = ["data=synthetic", "data.num_samples=8", "data.num_val_samples=0", "batch_size=4"]


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLX_ENABLE_TF32", raising=False)  # the adapter sets it; put it back afterwards


def trainer(*overrides: str) -> tuple[Adapter, MlxDevice, Trainer]:
    """The MLX adapter, the CPU it bound and its trainer, for a cell composed as the sweep composes it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["framework=mlx", "device=cpu", *overrides]))
    adapter = Adapter(cell)
    device = adapter.bind(cell.device)
    dataset = datasets.load(cell.data, cell.seed)
    return adapter, device, adapter.trainer(adapter.build(cell.model, dataset).network, dataset, cell)


def weights(model) -> dict[str, np.ndarray]:
    return {name: np.array(value) for name, value in tree_flatten(model.parameters())}


@pytest.mark.parametrize(
    ("optim", "torch_optimizer"),
    [
        (
            ["optim=sgd", "optim.weight_decay=0.01"],
            lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, weight_decay=0.01),
        ),
        (["optim=adam", "optim.weight_decay=0.01"], lambda p: torch.optim.Adam(p, lr=0.001, weight_decay=0.01)),
        (["optim=adamw"], lambda p: torch.optim.AdamW(p, lr=0.001, weight_decay=0.01)),
    ],
    ids=["sgd", "adam", "adamw"],
)
def test_training_steps_change_the_weights_as_torch_does(optim: list[str], torch_optimizer) -> None:
    """The same weights, batch and optimizer settings: three MLX steps land where three torch steps land
    (Adam's bias correction and its L2 weight decay included, which MLX's own Adam does not do)."""
    adapter, device, mlx_trainer = trainer(*SMALL_MLP, *optim)
    assert mlx_trainer.cell.optim.lr == (0.01 if "optim=sgd" in optim else 0.001)
    start = weights(mlx_trainer.model)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    with torch.no_grad():
        for index, layer in ((1, 0), (3, 2)):  # digits are one-channel: NHWC and NCHW flatten alike
            net[index].weight.copy_(torch.from_numpy(start[f"layers.layers.{layer}.weight"]))
            net[index].bias.copy_(torch.from_numpy(start[f"layers.layers.{layer}.bias"]))
    optimizer = torch_optimizer(net.parameters())
    x = torch.from_numpy(np.array(mlx_trainer.inputs[:32]))
    y = torch.from_numpy(np.array(mlx_trainer.labels[:32])).long()
    step = mlx_trainer.resident_step()
    for _ in range(3):
        step()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    device.synchronize()
    ours = weights(mlx_trainer.model)
    np.testing.assert_allclose(ours["layers.layers.0.weight"], net[1].weight.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours["layers.layers.2.bias"], net[3].bias.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert not np.allclose(ours["layers.layers.0.weight"], start["layers.layers.0.weight"])


@pytest.mark.parametrize(
    "model", [SMALL_CNN + ["model=resnet18", "data.image_size=32"], TINY_TEXT], ids=["resnet18", "distilbert"]
)
def test_mixed_precision_computes_in_bf16_and_keeps_fp32_master_weights(model: list[str]) -> None:
    """BatchNorm statistics would promote a bf16 forward pass back to fp32, and token ids cast to bf16 are no
    longer ids: inference runs in bf16 end to end, training runs, and the weights kept are fp32."""
    adapter, device, mlx_trainer = trainer(*model, "precision=mixed_bf16")
    mlx_trainer.resident_step()()
    served = mlx_trainer.inference_step(2)
    served()
    device.synchronize()
    assert adapter.pending.dtype == mx.bfloat16
    assert np.isfinite(np.array(adapter.pending.astype(mx.float32))).all()
    assert {value.dtype for _, value in tree_flatten(mlx_trainer.model.parameters())} == {mx.float32}


def test_fp16_skips_a_step_whose_gradients_overflow_and_halves_the_loss_scale() -> None:
    adapter, device, mlx_trainer = trainer(*SMALL_MLP, "precision=mixed_fp16")
    assert adapter.describe().tags["mlx.loss_scale"] == "dynamic"
    step = mlx_trainer.resident_step()
    step()  # the optimizer's state exists from here on
    device.synchronize()
    before = weights(mlx_trainer.model)
    mlx_trainer.loss_scale["scale"] = mx.array(2.0**40)  # fp16 gradients of a loss this large are inf
    step()
    device.synchronize()
    assert mlx_trainer.loss_scale["scale"].item() == 2.0**39
    assert all(np.array_equal(value, before[name]) for name, value in weights(mlx_trainer.model).items())
    step()  # 2^39 still overflows; the scale keeps halving until the gradients are finite
    device.synchronize()
    assert mlx_trainer.loss_scale["scale"].item() == 2.0**38


@pytest.mark.slow  # ~45 s the first time: MLX's CPU backend compiles its fused kernels with the C++ compiler
def test_a_compiled_step_is_the_eager_step_batchnorm_statistics_and_dropout_included() -> None:
    """MobileNetV2 has both: mx.compile must carry the running statistics and the random state through."""
    results = []
    for compiled in ("false", "true"):
        adapter, device, mlx_trainer = trainer(
            *SMALL_CNN, "model=mobilenet_v2", "data.image_size=32", f"optimize.compile={compiled}"
        )
        mlx_trainer.begin_epoch(1)
        for index in range(mlx_trainer.steps_per_epoch):
            mlx_trainer.step(index)
        device.synchronize()
        results.append((mlx_trainer.end_epoch().train_loss, weights(mlx_trainer.model)))
    (eager_loss, eager), (compiled_loss, compiled) = results
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-4)
    for name in ("features.layers.1.conv.layers.0.layers.1.running_mean", "classifier.layers.1.weight"):
        np.testing.assert_allclose(compiled[name], eager[name], rtol=1e-3, atol=1e-5)


def test_fp32_means_fp32_and_tf32_needs_an_nvidia_gpu() -> None:
    adapter, _, _ = trainer(*SMALL_MLP)
    assert os.environ["MLX_ENABLE_TF32"] == "0"  # MLX's default on CUDA is TF32 for fp32 products
    assert adapter.describe().tags["trainbench.tf32"] == "false"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["framework=mlx", "device=auto", "precision=tf32"]))
    tf32 = Adapter(cell)
    assert os.environ["MLX_ENABLE_TF32"] == "1"
    if not (tf32.mx.metal.is_available() or tf32.mx.cuda.is_available()):
        with pytest.raises(DeviceUnavailable, match="precision=tf32 needs an NVIDIA GPU.*use precision=fp32"):
            tf32.bind(cell.device)


def test_glorot_init_is_keras_default_as_in_the_other_frameworks() -> None:
    _, _, mlx_trainer = trainer(*SMALL_MLP, "model.init=glorot", "model.hidden_sizes=[1024]")
    first = weights(mlx_trainer.model)
    bound = (6 / (64 + 1024)) ** 0.5  # 0.074; torch's default U(+-1/sqrt(64)) reaches 0.125
    assert 0.9 * bound < np.abs(first["layers.layers.0.weight"]).max() <= bound
    assert not first["layers.layers.0.bias"].any()


def test_the_epochs_shuffle_is_computed_before_its_timed_block(tmp_path: Path) -> None:
    """MLX is lazy and synchronize waits only for queued work: a permutation left as a graph would be drawn by
    the epoch's first step, inside the timed block (CUDA and MPS draw theirs before it). After begin_epoch the
    order is a computed array: its graph (mx.export_to_dot) holds no operation left to run."""
    adapter, device, train = trainer(*SMALL_MLP)
    for epoch in (1, 2):
        train.begin_epoch(epoch)
        graph = tmp_path / f"order-{epoch}.dot"
        mx.export_to_dot(str(graph), train.order)
        assert "label" not in graph.read_text(), graph.read_text()  # operations are the labelled nodes
        for index in range(train.steps_per_epoch):
            train.step(index)
        device.synchronize()
        train.end_epoch()


def test_per_product_matmul_operands_are_drawn_for_every_product() -> None:
    """task.operands=per_product (the Hackintosh blog's timeit of "draw, multiply"): each product multiplies
    operands drawn for it; resident products multiply the same operands every time."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["framework=mlx", "device=cpu", "task=matmul"]))
    adapter = Adapter(cell)
    adapter.bind(cell.device)

    def two_products(fresh: bool) -> list[np.ndarray]:
        multiply = adapter.matmul(4, "square", fresh_operands=fresh).step
        found = []
        for _ in range(2):
            multiply()
            found.append(np.array(adapter.pending))
        return found

    first, again = two_products(fresh=False)
    np.testing.assert_array_equal(first, again)
    first, again = two_products(fresh=True)
    assert not np.array_equal(first, again)
