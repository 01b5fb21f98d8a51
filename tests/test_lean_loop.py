"""The timed epoch does what a careful hand-written loop does and no more: the PyTorch train step dispatches
no more operations than a bare step with the same shuffling and loss, except the two the epoch's metrics
need (the loss and the logits kept by detached views: no kernel; their sums are taken after the epoch)."""

from __future__ import annotations

from collections import Counter

import pytest
from hydra import compose, initialize_config_dir

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from trainbench.config import CONF_DIR, validate

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

METRICS_OPS = 2  # detach x 2: the loss and the logits (for accuracy), kept without their graph


class CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def trainer_for(*overrides: str, device: str = "cpu", samples: int = 256):
    from trainbench import data as datasets
    from trainbench import frameworks

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(
            compose(
                "config",
                overrides=[
                    f"device={device}",
                    "model=mlp",
                    "batch_size=32",
                    f"data.num_samples={samples}",
                    "data.num_val_samples=0",
                    *overrides,
                ],
            )
        )
    framework = frameworks.load(cell)
    framework.bind(cell.device)
    dataset = datasets.load(cell.data, cell.seed)
    model = framework.build(cell.model, dataset).network
    return framework.trainer(model, dataset, cell), model


def bare_step(model, inputs, labels, order, optimizer, index: int) -> None:
    positions = order[index * 32 : (index + 1) * 32]
    x, y = inputs[positions], labels[positions]
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()


def count(step) -> Counter[str]:
    counter = CountOps()
    with counter:
        step()
    return counter.ops


@pytest.mark.parametrize("precision", ["fp32", "mixed_bf16"])
def test_a_train_step_adds_only_the_ops_its_metrics_need(precision: str) -> None:
    trainer, model = trainer_for(f"precision={precision}")
    trainer.begin_epoch(1)
    trainer.step(0)  # first steps allocate optimizer state: count a steady one
    harness = count(lambda: trainer.step(1))

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    order = torch.randperm(trainer.samples_per_epoch)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "mixed_bf16" else None

    def bare() -> None:
        if autocast is None:
            bare_step(model, trainer.inputs, trainer.labels, order, optimizer, 1)
        else:
            with autocast:
                bare_step(model, trainer.inputs, trainer.labels, order, optimizer, 1)

    bare()
    reference = count(bare)
    extra = harness - reference
    assert sum(harness.values()) <= sum(reference.values()) + METRICS_OPS, (extra, harness - reference)
    assert set(extra) <= {"detach"}, extra  # views: no kernel runs for the metrics inside the timed epoch


def test_the_epoch_metrics_are_the_running_mean_loss_and_accuracy() -> None:
    """What the few extra ops buy: the epoch's loss and accuracy equal a recomputation over its batches."""
    trainer, model = trainer_for("precision=fp32")
    trainer.begin_epoch(1)
    losses, correct = [], 0
    for index in range(trainer.steps_per_epoch):
        trainer.step(index)
        losses.append(float(trainer._losses[-1]) * len(trainer._predictions[-1]))
        positions = trainer.order[index * 32 : (index + 1) * 32]
        correct += int((trainer._predictions[-1].argmax(1) == trainer.labels[positions]).sum())
    result = trainer.end_epoch()
    assert result.train_loss == pytest.approx(sum(losses) / trainer.samples_per_epoch, rel=1e-5)
    assert result.train_accuracy == pytest.approx(correct / trainer.samples_per_epoch)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="whole-step CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "mixed_bf16"])
def test_a_captured_epoch_records_the_loss_and_accuracy_of_an_eager_one(precision: str) -> None:
    """framework.capture=true runs an epoch's full batches as one CUDA graph that gathers its batch and keeps
    each sample's logits, from which the loss and accuracy are computed; the last partial batch runs eagerly.
    With the weights held still (lr 1e-12), an epoch's loss and accuracy do not depend on the order or the
    path, so both paths must agree: a stale or missed row, a wrong batch, or a tail counted twice would show."""
    recorded = {}
    for capture in ("true", "false"):
        torch.manual_seed(0)
        trainer, _ = trainer_for(
            f"precision={precision}", f"framework.capture={capture}", "optim.lr=1e-12", device="gpu", samples=1000
        )
        results = []
        for epoch in (1, 2):  # the second reuses the graph on a new permutation
            trainer.begin_epoch(epoch)
            assert (trainer._captured is not None) == (capture == "true")
            for index in range(trainer.steps_per_epoch):
                trainer.step(index)
            results.append(trainer.end_epoch())
        recorded[capture] = results
    assert 1000 % 32 != 0  # a partial last batch: the eager tail is part of the check
    for captured, eager in zip(recorded["true"], recorded["false"], strict=True):
        assert captured.train_loss == pytest.approx(eager.train_loss, rel=1e-3)
        assert captured.train_accuracy == pytest.approx(eager.train_accuracy, abs=1.5 / 1000)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="whole-step CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "mixed_bf16"])
def test_a_captured_step_adds_one_kernel_to_a_bare_graph_step(precision: str) -> None:
    """Inside the captured epoch's graph every op runs on each step, so the metrics may add only one: the
    logits copied to their samples' rows (the loss and accuracy are computed from them after the epoch). The
    bare side is the step of benchmarks/bare_loops.py's graph variant: a gather from a static index buffer
    (index_select, as the harness gathers), forward, loss, backward and a fused SGD step."""
    trainer, model = trainer_for(
        f"precision={precision}", "framework.capture=true", "framework.fused_optimizer=true", device="gpu"
    )
    trainer.begin_epoch(1)
    captured = trainer._captured
    assert captured is not None
    harness = count(captured._body)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "mixed_bf16", cache_enabled=False)
    positions = captured.positions

    def bare() -> None:
        with autocast:
            logits = model(trainer.inputs.index_select(0, positions))
        torch.nn.functional.cross_entropy(logits.float(), trainer.labels.index_select(0, positions)).backward()
        optimizer.step()

    bare()
    reference = count(bare)
    extra = harness - reference
    assert sum(harness.values()) <= sum(reference.values()) + 1 + METRICS_OPS, extra
    assert set(extra) <= {"index_copy_", "detach"}, extra  # one kernel; detach is a view
