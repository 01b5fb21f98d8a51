"""Training and benchmarking really happen: learning on real data, timed steps, pretrained weights.
Every test here runs the real entry point (`python src/run.py`) against a SQLite store in a temp folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import QUIET, TINY, Invocation, assert_timed_steps, invoke, metric_history

pytestmark = pytest.mark.slow
RESNET18_PARAMETERS_10_CLASSES = 11_181_642  # torchvision's resnet18(num_classes=10)


@pytest.fixture(scope="module")
def digits_mlp(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """The MLP on scikit-learn's real digits, five epochs."""
    return invoke(
        tmp_path_factory.mktemp("digits"),
        "model=mlp",
        "data=digits",
        "device=cpu",
        "task.epochs=5",
        "batch_size=32",
        QUIET,
    )


def only_cell(result: Invocation) -> Any:
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = result.runs()  # a single cell has no parent run
    assert cell.data.tags["trainbench.kind"] == "cell" and "mlflow.parentRunId" not in cell.data.tags
    return cell


def test_mlp_learns_real_digits_on_cpu(digits_mlp: Invocation) -> None:
    cell = only_cell(digits_mlp)
    history = metric_history(digits_mlp.uri, cell.info.run_id, "val_accuracy")
    assert [m.step for m in history] == [1, 2, 3, 4, 5]
    assert history[-1].value >= 0.90
    assert cell.data.metrics["val_accuracy"] == history[-1].value  # the run's final value is the last epoch's
    losses = [m.value for m in metric_history(digits_mlp.uri, cell.info.run_id, "train_loss")]
    assert losses[-1] < losses[0] / 2
    assert cell.data.tags["trainbench.outcome"] == "finished"
    assert cell.info.run_name == "pytorch-mlp-cpu-bs32"


def test_throughput_leaves_out_the_first_epoch_and_validation(digits_mlp: Invocation) -> None:
    cell = only_cell(digits_mlp)
    metrics = cell.data.metrics
    epochs = [m.value for m in metric_history(digits_mlp.uri, cell.info.run_id, "epoch_time_s")]
    assert len(epochs) == 5 and all(t > 0 for t in epochs)
    # every training sample of the split, each epoch: the split's size as the cell recorded it
    samples = int(cell.data.tags["trainbench.samples_per_epoch"])
    assert samples == int(cell.data.params["data.num_samples"]) and samples > 1000
    rates = [m.value for m in metric_history(digits_mlp.uri, cell.info.run_id, "epoch_samples_per_s")]
    assert rates == pytest.approx([samples / t for t in epochs])
    assert metrics["first_epoch_time_s"] == epochs[0]
    steady_s_per_sample = sum(epochs[1:]) / (4 * samples)
    assert metrics["samples_per_s"] == pytest.approx(1 / steady_s_per_sample)
    assert metrics["compile_time_s"] == pytest.approx(max(0.0, epochs[0] - samples * steady_s_per_sample), abs=1e-9)
    # the epochs' training, each with its shuffle and read-back: validation is in neither (test_timed_regions)
    assert metrics["total_time_s"] > sum(epochs)


def test_random_labels_do_not_learn(tmp_path: Path) -> None:
    """The counterpart: accuracy is a real check only if noise stays at chance."""
    cell = only_cell(
        invoke(
            tmp_path,
            "data.learnable=false",
            "device=cpu",
            "data.num_samples=512",
            "data.num_val_samples=512",
            "task.epochs=2",
            QUIET,
        )
    )
    assert cell.data.metrics["val_accuracy"] < 0.25  # 10 classes: chance is 0.1


@pytest.fixture(scope="module")
def resnet18_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    return invoke(
        tmp_path_factory.mktemp("benchmark"),
        "task=benchmark",
        "model=resnet18",
        "device=cpu",
        "batch_size=4",
        "task.warmup_steps=2",
        "task.steps=6",
        QUIET,
    )


def test_benchmark_times_blocks_of_steps_after_warm_up(resnet18_benchmark: Invocation) -> None:
    cell = only_cell(resnet18_benchmark)
    m, tags = cell.data.metrics, cell.data.tags
    assert_timed_steps(m, warmup_steps=2)
    for key in ("num_parameters", "flops_per_sample", "peak_host_memory_mb", "total_time_s"):
        assert key in m, key
    # On a CPU, PyTorch's step times come from the host clock inside the timed block itself, so samples/s
    # (the block's batch over its seconds) is the batch over the mean step time, within rounding.
    assert tags["trainbench.step_time_source"].startswith("host clock")
    assert m["samples_per_s"] == pytest.approx(4 / (m["step_time_ms_mean"] / 1000), rel=0.01)
    assert m["total_time_s"] == pytest.approx(m["warmup_time_s"] + 6 * m["step_time_ms_mean"] / 1000, rel=0.05)
    assert m["num_parameters"] == RESNET18_PARAMETERS_10_CLASSES
    assert "epoch_time_s" not in m and "val_accuracy" not in m
    assert tags["trainbench.task"] == "benchmark" and tags["trainbench.timed_region"] == "steps"
    assert "samples_per_s_ci95" not in m  # one block: no interval to give


def test_epochs_zero_records_the_model_without_training(tmp_path: Path) -> None:
    cell = only_cell(invoke(tmp_path, "model=resnet18", "task.epochs=0", "device=cpu", *TINY[:2], QUIET))
    assert cell.data.metrics["num_parameters"] == RESNET18_PARAMETERS_10_CLASSES
    assert cell.data.metrics["flops_per_sample"] > 0
    assert not {"samples_per_s", "epoch_time_s", "val_accuracy"} & set(cell.data.metrics)
    assert cell.data.tags["trainbench.epochs"] == "0"


def test_pretrained_weights_come_only_from_the_local_cache(tmp_path: Path) -> None:
    import torch
    import torchvision

    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    empty = tmp_path / "empty"
    missing = invoke(
        tmp_path, "model=resnet18", "model.pretrained=true", "device=cpu", *TINY, env={"TORCH_HOME": str(empty)}
    )
    # Checked before any cell starts: one line naming the file and where it must be, nothing recorded.
    assert missing.returncode == 2, missing.stderr[-2000:]
    message = missing.stderr.strip().splitlines()[-1]
    assert "pretrained weights for resnet18 not found" in message
    assert Path(url).name in message and str(empty / "hub" / "checkpoints") in message
    assert missing.runs() == []

    checkpoint = tmp_path / "hub" / "hub" / "checkpoints" / Path(url).name
    checkpoint.parent.mkdir(parents=True)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), checkpoint)
    cached = invoke(
        tmp_path,
        "model=resnet18",
        "model.pretrained=true",
        "device=cpu",
        *TINY,
        env={"TORCH_HOME": str(tmp_path / "hub")},
    )
    cell = only_cell(cached)
    assert cell.data.params["model.pretrained"] == "True"
    # ImageNet head (1000 classes) replaced by a 10-class one for CIFAR-shaped data
    assert cell.data.metrics["num_parameters"] == RESNET18_PARAMETERS_10_CLASSES
    assert len(metric_history(cached.uri, cell.info.run_id, "epoch_time_s")) == 2  # and it trained


@pytest.mark.slow
def test_pretrained_weights_are_found_where_torch_looks_under_xdg_cache_home(tmp_path: Path) -> None:
    import os

    import torch
    import torchvision

    if "TORCH_HOME" in os.environ:
        pytest.skip("TORCH_HOME is set here: it overrides XDG_CACHE_HOME for torch")
    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    checkpoint = tmp_path / "xdg" / "torch" / "hub" / "checkpoints" / Path(url).name  # torch.hub.get_dir()/checkpoints
    checkpoint.parent.mkdir(parents=True)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), checkpoint)
    cell = only_cell(
        invoke(
            tmp_path,
            "model=resnet18",
            "model.pretrained=true",
            "device=cpu",
            "task.epochs=0",
            *TINY[:2],
            QUIET,
            env={"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        )
    )
    assert cell.data.metrics["num_parameters"] == RESNET18_PARAMETERS_10_CLASSES
