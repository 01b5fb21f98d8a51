"""task=inference for every framework, and framework=mlx next to PyTorch, through the real entry point on the CPU;
the one-line warning for a figure too noisy to quote; the inference study preset."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from trainbench.tasks.base import NOISY_CV_PCT, noise_tags, noisy_warning

QUIET = "tracking.system_metrics_interval_s=0"
FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mlx")


def finished_cells(result: Any, count: int) -> dict[str, Any]:
    """The sweep's cell runs by framework, each checked finished."""
    assert result.returncode == 0, result.stderr[-3000:]
    cells = [run for run in result.runs() if run.data.tags.get("trainbench.kind") == "cell"]
    assert len(cells) == count, [run.info.run_name for run in cells]
    assert all(run.data.tags["trainbench.outcome"] == "finished" for run in cells)
    return {run.data.tags["trainbench.framework"]: run for run in cells}


def test_a_noisy_figure_gets_one_warning_line_saying_what_to_try() -> None:
    line = noisy_warning(
        "step times", 23.4, "task.repeats=5, task.settle_cv_pct=2, more task.steps, or a quiet machine"
    )
    assert line == (
        "trainbench: warning: step times vary by 23% (cv): the figure is noisy; try task.repeats=5, "
        "task.settle_cv_pct=2, more task.steps, or a quiet machine"
    )
    assert noisy_warning("step times", NOISY_CV_PCT, "...") is None  # at the threshold: quotable
    assert noisy_warning("latencies", 2.0, "...") is None


def test_a_data_parallel_cells_noise_warning_comes_from_rank_0_alone(monkeypatch, capsys) -> None:
    """Every rank measures its own step times; the ranks other than 0 (cell/ranks.py quiets them) still tag the
    figure noisy, but print nothing: one warning per cell, not one per GPU."""
    from trainbench import progress

    monkeypatch.setattr(progress, "_speaks_for_cell", True)  # progress.quiet() lasts for its process's life
    tags = noise_tags("step times", 162.1, "task.repeats=5")
    assert capsys.readouterr().err.startswith("trainbench: warning: step times vary by 162% (cv)")
    progress.quiet()
    assert (
        noise_tags("step times", 162.1, "task.repeats=5")
        == tags
        == {
            "trainbench.noisy": "true",
            "trainbench.noisy_reason": "step times cv 162.1% > 10%",
        }
    )
    assert capsys.readouterr().err == ""


def test_each_batch_size_runs_a_graph_compiled_for_it() -> None:
    """The inference task's throughput batch comes after its batch-1 latency pass; a train epoch may end on a
    partial batch. Neither may leave the timed batches running a graph generic in the batch size."""
    torch = pytest.importorskip("torch")
    from hydra import compose, initialize_config_dir
    from torch._dynamo.utils import counters

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate
    from trainbench.frameworks.pytorch.adapter import Adapter

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["model=mlp", "device=cpu", "optimize.compile=true"]))
    torch._dynamo.reset()
    counters.clear()
    doubled = Adapter(cell).compiled(lambda x: x * 2)
    for batch in (1, 64, 32):  # by default 64 would compile a dynamic graph, which 32 then reuses
        assert torch.equal(doubled(torch.ones(batch, 4)), torch.full((batch, 4), 2.0))
    assert counters["stats"]["unique_graphs"] == 3


def test_a_partial_last_batch_compiles_in_the_cells_mode_less_cuda_graphs() -> None:
    """Under CUDA graphs an epoch's partial last batch would be recorded in the second epoch, inside a timed
    block (1.07 s against 0.88 s on an H100); it compiles in the cell's mode without the graphs. The table
    that names that mode must agree with torch's own definition of each mode."""
    pytest.importorskip("torch")
    from torch._inductor import list_mode_options

    from trainbench.frameworks.pytorch import COMPILE_MODES
    from trainbench.frameworks.pytorch.adapter import CUDA_GRAPH_MODES, MODE_WITHOUT_GRAPHS

    for mode in COMPILE_MODES:
        options = list_mode_options(mode)
        assert (mode in CUDA_GRAPH_MODES) == bool(options.get("triton.cudagraphs")), mode
        without = list_mode_options(MODE_WITHOUT_GRAPHS.get(mode, mode))
        assert without == {key: value for key, value in options.items() if key != "triton.cudagraphs"}, mode


@pytest.fixture(scope="module")
def inference_sweep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One small MLP, forward only, in each framework (about 90 s on two cores)."""
    return invoke(
        tmp_path_factory.mktemp("inference"),
        "-m",
        f"framework={','.join(FRAMEWORKS)}",
        "task=inference",
        "model=mlp",
        "model.hidden_sizes=[256]",
        "data=synthetic",
        "data.num_samples=16",
        "batch_size=16",
        "device=cpu",
        "task.warmup_steps=2",
        "task.steps=5",
        "task.latency_steps=10",
        QUIET,
    )


@pytest.mark.slow
def test_inference_cells_of_every_framework_give_finite_latencies_under_the_same_keys(inference_sweep: Any) -> None:
    cells = finished_cells(inference_sweep, len(FRAMEWORKS))
    keys = {framework: set(run.data.metrics) for framework, run in cells.items()}
    assert all(keys[framework] == keys["pytorch"] for framework in FRAMEWORKS), keys
    for framework, run in cells.items():
        metrics = run.data.metrics
        for key in ("latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "samples_per_s"):
            assert math.isfinite(metrics[key]) and metrics[key] > 0, (framework, key, metrics[key])
        assert metrics["latency_ms_p50"] <= metrics["latency_ms_p90"] <= metrics["latency_ms_p99"]
        assert run.data.tags["trainbench.task"] == "inference" and run.data.tags["trainbench.backend"] == "cpu"


@pytest.mark.slow
def test_the_latency_percentiles_say_where_they_came_from_and_whether_they_are_noisy(inference_sweep: Any) -> None:
    cells = finished_cells(inference_sweep, len(FRAMEWORKS))
    # PyTorch and TensorFlow run a CPU synchronously: the host clock between requests is the device's. JAX and
    # MLX dispatch asynchronously even there: each request is timed between two synchronizations.
    assert cells["pytorch"].data.tags["trainbench.latency_source"] == "host clock (synchronous device)"
    assert cells["mlx"].data.tags["trainbench.latency_source"].startswith("synchronized pass of 10 requests")
    assert cells["jax"].data.tags["trainbench.latency_source"].startswith("synchronized pass of 10 requests")
    for framework, run in cells.items():
        noisy = run.data.metrics["latency_cv_pct"] > NOISY_CV_PCT
        assert run.data.tags["trainbench.noisy"] == str(noisy).lower(), framework
    warnings = inference_sweep.stderr.count("trainbench: warning: latencies vary by")
    assert warnings == sum(run.data.tags["trainbench.noisy"] == "true" for run in cells.values())


@pytest.mark.slow
def test_mlx_learns_digits_like_pytorch_and_both_tasks_record_the_same_keys(tmp_path: Path) -> None:
    """framework=pytorch,mlx x task=train,benchmark on the real digits, each task's defaults (3 epochs; 5 + 20
    steps), about 60 s on two cores."""
    result = invoke(
        tmp_path,
        "-m",
        "framework=pytorch,mlx",
        "task=train,benchmark",
        "model=mlp",
        "model.hidden_sizes=[512]",
        "data=digits",
        "device=cpu",
        "batch_size=32",
        QUIET,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [run for run in result.runs() if run.data.tags.get("trainbench.kind") == "cell"]
    by_cell = {(run.data.tags["trainbench.framework"], run.data.tags["trainbench.task"]): run for run in runs}
    assert len(by_cell) == 4 and all(run.data.tags["trainbench.outcome"] == "finished" for run in runs)
    for task in ("train", "benchmark"):
        assert set(by_cell["mlx", task].data.metrics) == set(by_cell["pytorch", task].data.metrics), task
    assert by_cell["mlx", "train"].data.metrics["val_accuracy"] >= 0.90
    assert by_cell["pytorch", "train"].data.metrics["val_accuracy"] >= 0.90
    benchmark = by_cell["mlx", "benchmark"].data
    assert benchmark.tags["trainbench.noisy"] == str(benchmark.metrics["step_time_cv_pct"] > NOISY_CV_PCT).lower()
    assert benchmark.tags["trainbench.step_time_source"].startswith("synchronized pass")
    assert benchmark.tags["sw.mlx_cpu"] == benchmark.tags["sw.mlx"]
