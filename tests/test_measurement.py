"""Numbers you can trust: FLOPs and MFU, energy only from real counters, stability, OOM, batch_size=max."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from conftest import Invocation, invoke, metric_history
from trainbench.cell.batch_search import HEADROOM, TOLERANCE, Probe, find_max_batch, next_batch

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

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data as datasets
    from trainbench import frameworks
    from trainbench.config import CONF_DIR, validate
    from trainbench.measure.flops import transformer_flops_per_sample

    tiny = ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=128"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        overrides = [f"model={model}", "data=synthetic_text", "device=cpu", "model.seq_len=256", *tiny]
        cell = validate(compose("config", overrides=[*overrides, "data.num_samples=4", "data.num_val_samples=0"]))
    framework = frameworks.load(cell)
    framework.bind(cell.device)
    data = datasets.load(cell.data, cell.seed)
    counted = framework.build(cell.model, data).flops_per_sample(True)
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
    """batch_size=max twice under a 1.6 GB cap (PyTorch's floor is 1536 MB): an MLP at 32 px, where everything up
    to the limit of 16 fits, and at 224 px, where 150528 x 3000 weights alone are 1.8 GB. On a CPU each probe is
    a process of its own, and the MLP's resident memory does not grow enough with the batch for a memory line:
    the search doubles to the limit (its estimate and its bisection are covered by the search tests below; a
    real edge costs minutes of probes on a CPU)."""
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
    assert probes == {2: 1.0, 8: 1.0, 16: 1.0}
    metrics = cell.data.metrics
    assert metrics["max_batch_size"] == 16 and metrics["batch_size_probes"] == 3
    assert metrics["batch_size_search_processes"] == 3  # a CPU: one process per probe
    assert 0 < metrics["batch_size_search_s"] < 120
    assert cell.data.tags["trainbench.batch_size"] == "16" and cell.data.params["batch_size"] == "max"
    # named after the batch it ran, plus what tells it apart from its sibling in this sweep
    assert cell.info.run_name == "pytorch-mlp-cpu-bs16 image_size=32"
    assert cell.data.metrics["samples_per_s"] > 0
    assert "batch_size=max: 16 (the limit, cell.max_batch_size=16), 3 probes" in batch_size_max.stdout
    # the search and each probe say themselves as they begin, each probe's outcome as it ends
    said = batch_size_max.stdout.splitlines()
    search = next(i for i, line in enumerate(said) if line.startswith("  batch_size=max: searching the largest batch"))
    probes = [said.index(f"  batch_size=max: trying batch {batch} ...") for batch in (2, 8, 16)]
    first_outcome = next(i for i, line in enumerate(said) if line.startswith("  batch_size=max: 2 fits"))
    assert search < probes[0] < first_outcome < probes[1] < probes[2]
    # the chosen batch's peak, recorded with the headroom it had to leave (the probes' resident memory, of the cap)
    assert metrics["batch_size_capacity_mb"] == 1600 and metrics["batch_size_headroom"] == HEADROOM
    assert 0 < metrics["batch_size_peak_mb"] <= (1 - HEADROOM) * 1600
    # the probes turn cudnn.benchmark off (FrameworkConfig.for_probes); the cell runs with the user's setting
    assert cell.data.tags["torch.cudnn_benchmark"] == "true"


@pytest.mark.slow
def test_batch_size_max_fails_oom_when_not_even_one_fits(batch_size_max: Invocation) -> None:
    assert batch_size_max.returncode == 1
    cell = cell_runs(batch_size_max)[1]
    assert cell.data.tags["trainbench.outcome"] == "failed"
    assert cell.data.tags["trainbench.failure"] == "oom"
    assert "not even batch 1 fits" in cell.data.tags["trainbench.reason"]
    assert "samples_per_s" not in cell.data.metrics
    history = metric_history(batch_size_max.uri, cell.info.run_id, "batch_size_probe_fits")
    assert [(m.step, m.value) for m in history] == [(1, 0.0), (2, 0.0)]
    # one line on the terminal says so; out-of-memory probes print no traceback
    (line,) = [x for x in batch_size_max.stderr.splitlines() if "image_size=224 ran out of" in x]
    assert line.startswith("trainbench: pytorch-mlp-cpu-bsmax image_size=224 ran out of host memory (not even ")
    assert "Traceback" not in batch_size_max.stderr + batch_size_max.stdout


GIB = 1024.0


def linear_memory(
    fixed_mb: float,
    per_sample_mb: float,
    capacity_mb: float,
    fits_under_mb: float | None = None,
    small_batch_floor_mb: float = 0.0,
) -> tuple[list[int], Any]:
    """A fake device: a batch's peak is fixed + per-sample x batch, and at least `small_batch_floor_mb` (small
    batches' flatness: workspaces and allocator rounding that do not grow with the batch); it fits under
    `fits_under_mb` (the capacity it reports, unless the allocator's fragmentation leaves less). Returns (the
    batches asked, the probe)."""
    asked: list[int] = []

    def probe(batch: int) -> Probe:
        asked.append(batch)
        peak = max(small_batch_floor_mb, fixed_mb + per_sample_mb * batch)
        if peak > (fits_under_mb or capacity_mb):
            return Probe(batch, False, "OutOfMemoryError: CUDA out of memory. Tried to allocate 3.06 GiB.")
        return Probe(batch, True, None, peak, capacity_mb)

    return asked, probe


def largest_acceptable(fixed_mb: float, per_sample_mb: float, capacity_mb: float, fits_under_mb: float) -> int:
    """The largest batch that fits with its peak within the headroom."""
    return math.floor((min(fits_under_mb, (1 - HEADROOM) * capacity_mb) - fixed_mb) / per_sample_mb)


def within_tolerance(best: int, largest: int) -> bool:
    return largest / (1 + TOLERANCE) <= best <= largest


# Fitted to two H100 searches (torch 2.11, 78.4 GiB free to PyTorch), peaks in GiB by batch.
# BERT-Large: 2 -> 4.0, 8 -> 4.3, 39 -> 10.5, 139 -> 30.4, 317 -> 65.5, 361 -> 74.2, 383 -> 78.4; 394 and 406 did
# not fit: 2.82 GiB + 0.197 GiB a sample, at least 4.0. The old search estimated 1355 from batches 2 and 8, walked
# down in six failed probes, answered 383 after 15, and the cell at 383 then ran out of memory.
# ResNet-50: 2 -> 4.7, 8 -> 5.3, 744 -> 75.1: 4.54 GiB + 0.0948 GiB a sample, at least 4.7.
H100_TRACES = {"bert_large": (2.82, 0.197, 4.0), "resnet50": (4.54, 0.0948, 4.7)}


@pytest.mark.parametrize("model", H100_TRACES)
def test_search_reproduces_the_h100_traces_in_few_probes_with_headroom(model: str) -> None:
    fixed, per_sample, floor = (GIB * x for x in H100_TRACES[model])
    capacity = 78.4 * GIB
    asked, probe = linear_memory(fixed, per_sample, capacity, small_batch_floor_mb=floor)
    search = find_max_batch(probe, limit=65536)
    largest = largest_acceptable(fixed, per_sample, capacity, capacity)
    assert within_tolerance(search.best, largest), (search.best, largest, asked)
    assert search.chosen is not None and search.chosen.peak_mb is not None
    assert search.chosen.peak_mb <= (1 - HEADROOM) * capacity  # room left for the cell's own run
    assert len(asked) <= 8, asked  # the old search: 15 probes for BERT-Large
    # every probe past the first estimate stays within 10% of the edge: no walk down from an over-estimate
    assert all(b <= 1.1 * largest for b in asked), asked


@pytest.mark.parametrize(
    ("fixed_mb", "per_sample_mb"),
    [(5_400, 75.0), (400, 100.0), (1_000, 20.0), (2_000, 900.0)],  # BERT-Large, ResNet-50, small, long sequences
)
def test_search_finds_the_largest_batch_within_the_headroom(fixed_mb, per_sample_mb) -> None:
    asked, probe = linear_memory(fixed_mb, per_sample_mb, 80_000)
    search = find_max_batch(probe, limit=65536)
    largest = largest_acceptable(fixed_mb, per_sample_mb, 80_000, 80_000)
    assert within_tolerance(search.best, largest), (search.best, largest, asked)
    assert asked[:2] == [2, 8] and search.estimate is not None
    assert search.estimate <= largest  # the line, drawn once the peak grew clearly, is on the safe side
    assert len(asked) <= 6, asked  # doubling, then bisecting to within 5%, takes 13 or more


def test_search_jumps_until_the_peak_has_grown_enough_for_a_line() -> None:
    """A model whose samples take little next to its weights: from batch 2 to 8 its peak grows by noise, so the
    search jumps (each jump at most to the headroom's edge) until the peak has grown by LINE_SPREAD, then aims."""
    asked, probe = linear_memory(20_000, 3.0, 80_000)
    search = find_max_batch(probe, limit=65536)
    assert within_tolerance(search.best, largest_acceptable(20_000, 3.0, 80_000, 80_000)), asked
    assert asked[:3] == [2, 8, 30] and search.estimate is not None  # 8 x 76 GB / 20.02 GB
    assert len(asked) <= 10, asked


def test_search_recovers_when_fragmentation_leaves_less_than_the_capacity_reported() -> None:
    for fits_under_mb in (76_000, 72_000, 56_000):  # 5, 10, 30% less than reported
        asked, probe = linear_memory(5_400, 75.0, 80_000, fits_under_mb)
        search = find_max_batch(probe, limit=65536)
        assert within_tolerance(search.best, largest_acceptable(5_400, 75.0, 80_000, fits_under_mb)), asked
        assert len(asked) <= 10, asked


def test_search_without_a_memory_counter_doubles_then_bisects_to_the_tolerance() -> None:
    for largest in (1, 5, 19, 37, 777, 5000):
        search = find_max_batch(lambda batch, largest=largest: Probe(batch, batch <= largest), limit=65536)
        asked = [p.batch_size for p in search.probes]
        assert within_tolerance(search.best, largest), (largest, asked)
        if largest < 1 / TOLERANCE:
            assert search.best == largest  # small batches: exact
        assert search.estimate is None and len(asked) <= 2 * math.log2(largest + 1) + 6, asked


def test_search_stops_at_the_limit_and_reports_zero_when_nothing_fits() -> None:
    asked, probe = linear_memory(5_400, 75.0, 80_000)
    search = find_max_batch(probe, limit=100)
    assert search.best == 100 and max(asked) == 100
    assert find_max_batch(lambda b: Probe(b, True), limit=100).best == 100
    nothing = find_max_batch(lambda b: Probe(b, False, "OutOfMemoryError"), limit=100)
    assert (nothing.best, [p.batch_size for p in nothing.probes]) == (0, [2, 1])
    # batch 1 fits, though over the headroom: the cell runs at 1 rather than failing
    asked, probe = linear_memory(77_000, 1_000, 80_000)
    assert find_max_batch(probe, limit=100).best == 1 and asked == [2, 1]


def test_a_later_process_goes_on_where_the_probes_so_far_leave_the_search() -> None:
    """What the parent relies on to start the next probing process (or to blame a process that died)."""
    asked, probe = linear_memory(5_400, 75.0, 80_000, 72_000)
    search = find_max_batch(probe, limit=65536)
    for made in range(len(search.probes)):
        assert next_batch(search.probes[:made], 65536) == asked[made]
    assert next_batch(search.probes, 65536) is None


def fake_gpu_cell(recovers: bool) -> Any:
    """An MLP cell on the fake CUDA device of tests/fake_gpu.py, at a small image size (probes load real data)."""
    from hydra import compose, initialize_config_dir

    import fake_gpu
    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    fake_gpu.Adapter.made.clear()
    fake_gpu.Adapter.RECOVERS = recovers
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["model=mlp", "batch_size=max", "data.image_size=8", "device=gpu"]))
    # the framework's adapter is its own, never a setting: a subclass of its config names the fake one
    on_fake_gpu = type("OnFakeGpu", (type(cell.framework),), {"adapter": "fake_gpu"})
    kept = {f.name: getattr(cell.framework, f.name) for f in dataclasses.fields(cell.framework) if f.init}
    return dataclasses.replace(cell, framework=on_fake_gpu(**kept))


def test_a_probing_process_probes_every_batch_where_the_framework_recovers_from_running_out(tmp_path) -> None:
    import fake_gpu
    from trainbench.cell import batch_probes

    progress = tmp_path / "probes.json"
    found = batch_probes.search(fake_gpu_cell(True), {"limit": 65536, "known": [], "progress_path": str(progress)})
    (device,) = fake_gpu.Adapter.made  # one process, one framework, one model for every probe
    assert device.cell.framework.cudnn_benchmark is False  # no autotuning at each new batch size
    assert device.models_built == 1 and device.resets == len(found["probes"])
    assert within_tolerance(found["best"], fake_gpu.largest_batch())
    probes = [Probe(**p) for p in found["probes"]]
    asked = [p.batch_size for p in probes]
    assert asked[:2] == [2, 8] and found["estimate"] in asked and len(probes) <= 8, asked
    oom = [p for p in probes if not p.fits]
    assert oom and oom[0].reason.startswith("OutOfMemoryError: CUDA out of memory")  # caught, and the next ran
    assert [p["batch_size"] for p in json.loads(progress.read_text())] == [p.batch_size for p in probes]
    assert device.steps.count(found["best"]) == batch_probes.PROBE_WARMUP_STEPS + 1


def test_where_it_does_not_recover_each_process_probes_once_and_the_next_goes_on(tmp_path) -> None:
    """What the launcher's loop does with TensorFlow, JAX or a CPU: a process per probe, each told the probes so
    far, the last one returning the result."""
    import fake_gpu
    from trainbench.cell import batch_probes

    cell, known, processes = fake_gpu_cell(False), [], 0
    while True:
        processes += 1
        found = batch_probes.search(cell, {"limit": 65536, "known": known, "progress_path": str(tmp_path / "p")})
        assert len(found["probes"]) == len(known) + 1  # one new probe each
        known = found["probes"]
        if found["best"] is not None:
            break
    assert processes == len(known) == len(fake_gpu.Adapter.made) and len(known) <= 8
    assert within_tolerance(found["best"], fake_gpu.largest_batch())
