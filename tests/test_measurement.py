"""Numbers you can trust: FLOPs and MFU, energy only from real counters, stability, OOM, batch_size=max."""

from __future__ import annotations

import pytest

from conftest import metric_history
from trainbench.batch_search import Probe, find_max_batch

CAP = ["cell.memory_limit_mb=2000", "device=cpu", "task=benchmark", "model=resnet18"]


def analytic_training_flops_resnet18(image_size: int, classes: int) -> float:
    """2 x multiply-accumulates of every conv and linear layer (from the layer shapes, not a FLOP counter),
    times 3 for forward + backward (the backward pass computes two products per forward one)."""
    import torch
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=classes).eval()
    macs = 0

    def count(module, inputs, output) -> None:
        nonlocal macs
        if isinstance(module, torch.nn.Conv2d):
            kernel = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            macs += output.numel() * kernel
        elif isinstance(module, torch.nn.Linear):
            macs += module.in_features * module.out_features * output.shape[0]

    for layer in model.modules():
        if isinstance(layer, torch.nn.Conv2d | torch.nn.Linear):
            layer.register_forward_hook(count)
    with torch.no_grad():
        model(torch.zeros(1, 3, image_size, image_size))
    return 3 * 2 * macs


def test_resnet50_forward_is_the_published_4_1_gmacs() -> None:
    """The known figure the FLOP counts are checked against: ResNet-50 at 224 px, ~4.1 GMACs forward."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        torchvision.models.resnet50(weights=None).eval()(torch.zeros(1, 3, 224, 224))
    assert counter.get_total_flops() / 2 / 1e9 == pytest.approx(4.1, rel=0.03)


def test_resnet18_flops_and_mfu_on_cpu(trainbench) -> None:
    result = trainbench("model=resnet18", "task=benchmark", "device=cpu", "batch_size=4", "task.steps=3",
                        "task.warmup_steps=1")
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    metrics, tags = cell.data.metrics, cell.data.tags
    # flop_counter counts no gradient for the input image: a little under 3 x forward
    assert metrics["flops_per_sample"] == pytest.approx(analytic_training_flops_resnet18(32, 10), rel=0.05)
    assert metrics["achieved_tflops"] == pytest.approx(metrics["flops_per_sample"] * metrics["samples_per_s"] / 1e12)
    assert 0 < metrics["mfu"] < 1
    assert metrics["mfu"] == pytest.approx(metrics["achieved_tflops"] / metrics["device_peak_tflops"])
    assert tags["mfu.peak_source"].startswith("estimated")


def test_no_energy_counter_here_means_no_energy_figures(trainbench) -> None:
    result = trainbench("model=mlp", "device=cpu", "data.num_samples=256", "data.num_val_samples=32", "epochs=2")
    (cell,) = result.runs()
    assert cell.data.tags["energy.source"] == "none"
    assert cell.data.tags["energy.reason"]
    assert not {"energy_j", "avg_power_w", "samples_per_j"} & set(cell.data.metrics)
    # MLflow's system metrics, sampled every second while the cell ran
    assert "system/cpu_utilization_percentage" in cell.data.metrics
    assert "system/system_memory_usage_megabytes" in cell.data.metrics


def test_repeats_give_a_confidence_interval_and_settling_warmup_is_recorded(trainbench) -> None:
    result = trainbench("model=mlp", "task=benchmark", "device=cpu", "batch_size=16", "task.repeats=3",
                        "task.steps=10", "task.warmup_steps=2", "task.settle_cv_pct=50", "task.max_warmup_steps=30")
    (cell,) = result.runs()
    metrics = cell.data.metrics
    assert metrics["samples_per_s_ci95"] >= 0
    assert 2 <= metrics["warmup_steps_run"] <= 30
    assert "drift_pct" in metrics and cell.data.tags["trainbench.drift"] in ("true", "false")


def test_a_forced_oom_is_failed_oom_and_the_next_cell_runs(trainbench) -> None:
    result = trainbench("-m", *CAP, "data.image_size=64", "batch_size=2048,4", "task.steps=1", "task.warmup_steps=1")
    assert result.returncode == 1
    too_big, small = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    assert too_big.data.tags["trainbench.outcome"] == "failed"
    assert too_big.data.tags["trainbench.failure"] == "oom"
    assert small.data.tags["trainbench.outcome"] == "finished"


def test_batch_size_max_probes_in_processes_records_and_runs_the_result(trainbench) -> None:
    # Everything fits up to the limit here, so the search doubles to it (the bisection at an
    # out-of-memory edge is covered by the search tests below; a real edge costs minutes of probes on a CPU).
    result = trainbench("model=mlp", "device=cpu", "task=benchmark", "batch_size=max", "cell.max_batch_size=16",
                        "task.steps=2", "task.warmup_steps=1")
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    probes = {int(m.step): m.value for m in metric_history(result.uri, cell.info.run_id, "batch_size_probe_fits")}
    assert probes == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}
    assert cell.data.metrics["max_batch_size"] == 16
    assert cell.data.tags["trainbench.batch_size"] == "16" and cell.data.params["batch_size"] == "max"
    assert cell.info.run_name == "pytorch-mlp-cpu-bs16"
    assert cell.data.tags["trainbench.outcome"] == "finished"
    assert cell.data.metrics["samples_per_s"] > 0


def test_batch_size_max_fails_oom_when_not_even_one_fits(trainbench) -> None:
    # mlp at 224 px: 150528 x 3000 weights alone are 1.8 GB, over a 1.5 GB cap
    result = trainbench("model=mlp", "device=cpu", "task=benchmark", "batch_size=max", "data.image_size=224",
                        "cell.memory_limit_mb=1500")
    (cell,) = result.runs()
    assert cell.data.tags["trainbench.outcome"] == "failed"
    assert cell.data.tags["trainbench.failure"] == "oom"
    assert "not even batch 1 fits" in cell.data.tags["trainbench.reason"]


def test_search_doubles_then_bisects() -> None:
    asked: list[int] = []

    def probe(batch: int) -> Probe:
        asked.append(batch)
        return Probe(batch, batch <= 37)

    best, probes = find_max_batch(probe, limit=1024)
    assert best == 37
    assert asked == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert len(probes) == len(asked)


def test_search_stops_at_the_limit_and_reports_zero_when_nothing_fits() -> None:
    assert find_max_batch(lambda b: Probe(b, True), limit=100)[0] == 100
    assert find_max_batch(lambda b: Probe(b, False), limit=100) == (0, [Probe(1, False)])
