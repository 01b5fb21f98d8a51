"""Training and benchmarking really happen: learning on real data, timed steps, pretrained weights."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY, metric_history


def test_mlp_learns_real_digits_on_cpu(trainbench) -> None:
    result = trainbench("model=mlp", "data=digits", "device=cpu", "epochs=5", "batch_size=32")
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    history = [m.value for m in metric_history(result.uri, cell.info.run_id, "val_accuracy")]
    assert len(history) == 5
    assert history[-1] >= 0.90
    assert cell.data.metrics["val_accuracy"] == history[-1]  # the run's final value is the last epoch's
    assert cell.data.metrics["first_epoch_time_s"] > 0 and cell.data.metrics["total_time_s"] > 0


def test_random_labels_do_not_learn(trainbench) -> None:
    """The counterpart: accuracy is a real check only if noise stays at chance."""
    result = trainbench("data.learnable=false", "device=cpu", "data.num_samples=512",
                        "data.num_val_samples=512", "epochs=2")
    (cell,) = result.runs()
    assert cell.data.metrics["val_accuracy"] < 0.25


def test_benchmark_times_synchronized_steps(trainbench) -> None:
    result = trainbench("task=benchmark", "model=resnet18", "device=cpu", "batch_size=4",
                        "task.warmup_steps=2", "task.steps=6")
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    m = cell.data.metrics
    for key in ("warmup_time_s", "step_time_ms_mean", "step_time_ms_p50", "step_time_ms_p90",
                "step_time_ms_p99", "step_time_cv_pct", "samples_per_s", "num_parameters",
                "peak_host_memory_mb", "total_time_s"):
        assert key in m, key
    assert m["step_time_ms_p50"] <= m["step_time_ms_p90"] <= m["step_time_ms_p99"]
    # samples/s is the batch over the mean step time, within rounding
    assert abs(m["samples_per_s"] - 4 / (m["step_time_ms_mean"] / 1000)) / m["samples_per_s"] < 0.01
    assert "epoch_time_s" not in m
    assert cell.data.tags["trainbench.task"] == "benchmark"


def test_epochs_zero_records_the_model_without_training(trainbench) -> None:
    result = trainbench("model=resnet18", "epochs=0", "device=cpu", *TINY[:2])
    assert result.returncode == 0
    (cell,) = result.runs()
    assert cell.data.metrics["num_parameters"] == 11_181_642  # torchvision resnet18, 10 classes
    assert "samples_per_s" not in cell.data.metrics


def test_pretrained_weights_come_only_from_the_local_cache(trainbench, tmp_path: Path) -> None:
    import torch
    import torchvision

    missing = trainbench("model=resnet18", "model.pretrained=true", "device=cpu", *TINY,
                         env={"TORCH_HOME": str(tmp_path / "empty")})
    (cell,) = missing.runs()
    assert cell.data.tags["trainbench.outcome"] == "failed"
    reason = cell.data.tags["trainbench.reason"]
    assert "not in the local cache" in reason and str(tmp_path / "empty") in reason

    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    checkpoint = tmp_path / "hub" / "hub" / "checkpoints" / Path(url).name
    checkpoint.parent.mkdir(parents=True)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), checkpoint)
    cached = trainbench("model=resnet18", "model.pretrained=true", "device=cpu", *TINY,
                        env={"TORCH_HOME": str(tmp_path / "hub")})
    assert cached.returncode == 0, cached.stderr[-2000:]
    cell = cached.runs()[-1]  # the same store holds the first attempt too
    # ImageNet head (1000 classes) replaced by a 10-class one for CIFAR-shaped data
    assert cell.data.metrics["num_parameters"] == 11_181_642
