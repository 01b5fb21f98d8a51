"""Numbers you can trust: FLOPs and MFU, energy only from real counters, stability, OOM, batch_size=max."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from conftest import Invocation, invoke, metric_history
from trainbench.runner.batch_search import Probe, find_max_batch

QUIET = "tracking.system_metrics_interval_s=0"


def analytic_training_flops_resnet18(image_size: int, classes: int) -> float:
    """2 x multiply-accumulates of every conv and linear layer (from the layer shapes, not a FLOP counter),
    times 3 for forward + backward (the backward pass computes two products per forward one)."""
    import torch
    import torchvision

    with torch.device("meta"):  # shapes only: no weights drawn, no arithmetic done
        model = torchvision.models.resnet18(weights=None, num_classes=classes).eval()
        image = torch.zeros(1, 3, image_size, image_size)
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
        model(image)
    return 3 * 2 * macs


def only_cell(result: Invocation) -> Any:
    (cell,) = result.runs()
    return cell


def cell_runs(result: Invocation) -> list[Any]:
    """The cells of a sweep, in sweep order."""
    cells = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    return sorted(cells, key=lambda r: int(r.data.tags["trainbench.cell_index"]))


def test_resnet50_forward_is_the_published_4_1_gmacs() -> None:
    """The known figure the FLOP counts are checked against: ResNet-50 at 224 px, ~4.1 GMACs forward."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.device("meta"):
        model, image = torchvision.models.resnet50(weights=None).eval(), torch.zeros(1, 3, 224, 224)
    with counter, torch.no_grad():
        model(image)
    assert counter.get_total_flops() / 2 / 1e9 == pytest.approx(4.1, rel=0.03)


@pytest.mark.parametrize("model", ["distilbert", "bert_base"])
def test_pytorch_counts_a_transformers_attention_whichever_kernel_runs_it(model: str) -> None:
    """The PyTorch adapter's training FLOPs of a text model are the analytic count the Keras frameworks use,
    attention included: on a CPU in eval mode torch 2.14 runs a flash kernel its counter has no formula for,
    which dropped attention from the count (3% of BERT-base's at 128 tokens, more at longer sequences)."""
    from hydra import compose, initialize_config_dir

    from trainbench import data as datasets
    from trainbench import frameworks
    from trainbench.config import CONF_DIR, validate
    from trainbench.flops import transformer_flops_per_sample

    tiny = ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=128"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        overrides = [f"model={model}", "data=synthetic_text", "device=cpu", "model.seq_len=256", *tiny]
        cell = validate(compose("config", overrides=[*overrides, "data.num_samples=4", "data.num_val_samples=0"]))
    framework = frameworks.load(cell)
    framework.select_device(cell.device)
    data = datasets.load(cell.data, cell.seed)
    counted = framework.flops_per_sample(framework.build_model(cell.model, data), data)
    analytic = transformer_flops_per_sample(cell.model, 256, data.num_classes)
    assert counted == analytic, f"counted {counted:,.0f}, analytic {analytic:,.0f}"


@pytest.fixture(scope="module")
def resnet18_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """One benchmark cell, with MLflow's system metrics sampled every second."""
    return invoke(
        tmp_path_factory.mktemp("resnet18"),
        "model=resnet18",
        "task=benchmark",
        "device=cpu",
        "batch_size=4",
        "task.steps=20",
        "task.warmup_steps=1",
        "tracking.system_metrics_interval_s=1",
    )


@pytest.mark.slow
def test_resnet18_flops_and_mfu_on_cpu(resnet18_benchmark: Invocation) -> None:
    assert resnet18_benchmark.returncode == 0, resnet18_benchmark.stderr[-2000:]
    cell = only_cell(resnet18_benchmark)
    metrics, tags = cell.data.metrics, cell.data.tags
    # flop_counter counts no gradient for the input image: a little under 3 x forward
    assert metrics["flops_per_sample"] == pytest.approx(analytic_training_flops_resnet18(32, 10), rel=0.05)
    assert metrics["flops_per_sample"] < analytic_training_flops_resnet18(32, 10)
    assert metrics["achieved_tflops"] == pytest.approx(metrics["flops_per_sample"] * metrics["samples_per_s"] / 1e12)
    assert 0 < metrics["mfu"] < 1
    assert metrics["mfu"] == pytest.approx(metrics["achieved_tflops"] / metrics["device_peak_tflops"])
    assert tags["mfu.peak_source"].startswith("estimated")


@pytest.mark.slow
def test_no_energy_counter_here_means_no_energy_figures(resnet18_benchmark: Invocation) -> None:
    cell = only_cell(resnet18_benchmark)
    assert cell.data.tags["energy.source"] == "none"
    assert cell.data.tags["energy.reason"]
    assert not {"energy_j", "avg_power_w", "samples_per_j"} & set(cell.data.metrics)
    # MLflow's system metrics, sampled every second while the cell ran
    assert "system/cpu_utilization_percentage" in cell.data.metrics
    assert "system/system_memory_usage_megabytes" in cell.data.metrics


@pytest.mark.slow
def test_repeats_give_a_confidence_interval_and_settling_warmup_is_recorded(tmp_path: Path) -> None:
    result = invoke(
        tmp_path,
        "model=mlp",
        "task=benchmark",
        "device=cpu",
        "batch_size=16",
        "task.repeats=3",
        "task.steps=10",
        "task.warmup_steps=2",
        "task.settle_cv_pct=50",
        "task.max_warmup_steps=30",
        QUIET,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics, tags = only_cell(result).data.metrics, only_cell(result).data.tags
    # three blocks never run at exactly one rate: a real interval around their mean (one block gives none)
    assert metrics["samples_per_s_ci95"] > 0 and math.isfinite(metrics["samples_per_s_ci95"])
    # settling needs a full window of five step times, so warm-up runs at least five steps, and at most the cap
    assert 5 <= metrics["warmup_steps_run"] <= 30
    # 3 x 10 timed steps are enough to compare the last tenth with the first; the tag follows the 5% threshold
    assert tags["trainbench.drift"] == str(metrics["drift_pct"] > 5.0).lower()


@pytest.mark.slow
def test_a_forced_oom_is_failed_oom_and_the_next_cell_runs(tmp_path: Path) -> None:
    result = invoke(
        tmp_path,
        "cell.memory_limit_mb=2000",
        "device=cpu",
        "task=benchmark",
        "model=resnet18",
        "data.image_size=64",
        "batch_size=2048,4",
        "task.steps=1",
        "task.warmup_steps=1",
        QUIET,
    )
    assert result.returncode == 1
    too_big, small = cell_runs(result)
    assert too_big.info.run_name == "pytorch-resnet18-cpu-bs2048"
    assert too_big.data.tags["trainbench.outcome"] == "failed"
    assert too_big.data.tags["trainbench.failure"] == "oom"
    assert "cell.memory_limit_mb=2000" in too_big.data.tags["trainbench.reason"]
    assert small.data.tags["trainbench.outcome"] == "finished"
    assert small.data.metrics["samples_per_s"] > 0


@pytest.fixture(scope="module")
def batch_size_max(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """batch_size=max twice under a 1.6 GB cap (PyTorch's floor is 1536 MB): an MLP at 32 px, where everything up to the limit of 16 fits
    (the search doubles to it; the bisection at an out-of-memory edge is covered by the search tests below,
    a real edge costs minutes of probes on a CPU), and at 224 px, where 150528 x 3000 weights alone are 1.8 GB."""
    return invoke(
        tmp_path_factory.mktemp("max"),
        "model=mlp",
        "device=cpu",
        "task=benchmark",
        "batch_size=max",
        "cell.max_batch_size=16",
        "cell.memory_limit_mb=1600",
        "data.image_size=32,224",
        "task.steps=2",
        "task.warmup_steps=1",
        QUIET,
    )


@pytest.mark.slow
def test_batch_size_max_probes_in_processes_records_and_runs_the_result(batch_size_max: Invocation) -> None:
    cell = cell_runs(batch_size_max)[0]
    assert cell.data.tags["trainbench.outcome"] == "finished", cell.data.tags.get("trainbench.reason")
    probes = {
        int(m.step): m.value for m in metric_history(batch_size_max.uri, cell.info.run_id, "batch_size_probe_fits")
    }
    assert probes == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}
    assert cell.data.metrics["max_batch_size"] == 16 and cell.data.metrics["batch_size_probes"] == 5
    assert cell.data.tags["trainbench.batch_size"] == "16" and cell.data.params["batch_size"] == "max"
    # named after the batch it ran, plus what tells it apart from its sibling in this sweep
    assert cell.info.run_name == "pytorch-mlp-cpu-bs16 image_size=32"
    assert cell.data.metrics["samples_per_s"] > 0


@pytest.mark.slow
def test_batch_size_max_fails_oom_when_not_even_one_fits(batch_size_max: Invocation) -> None:
    assert batch_size_max.returncode == 1
    cell = cell_runs(batch_size_max)[1]
    assert cell.data.tags["trainbench.outcome"] == "failed"
    assert cell.data.tags["trainbench.failure"] == "oom"
    assert "not even batch 1 fits" in cell.data.tags["trainbench.reason"]
    assert "samples_per_s" not in cell.data.metrics
    assert metric_history(batch_size_max.uri, cell.info.run_id, "batch_size_probe_fits")[0].value == 0.0


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
