"""Keras on TensorFlow and JAX through the real entry point: it learns, it is recorded like PyTorch,
it says why a GPU cell cannot run, and it benchmarks. CPU only, real MLflow store in a temp folder."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import RUN_PY, Invocation, child_env, metric_history

MLP_PARAMETERS_32PX = 3 * 32 * 32 * 3000 + 3000 + 3000 * 1000 + 1000 + 1000 * 10 + 10  # = torch's mlp
STEP_METRICS = ("step_time_ms_mean", "step_time_ms_p50", "step_time_ms_p90", "step_time_ms_p99",
                "step_time_cv_pct", "samples_per_s", "warmup_time_s")


def cells(result: Invocation) -> dict[tuple[str, str], Any]:
    """The cell runs of a sweep by (framework, device asked for)."""
    return {(r.data.tags["trainbench.framework"], r.data.tags["trainbench.device"]): r
            for r in result.runs() if r.data.tags.get("trainbench.kind") == "cell"}


def sweep(folder: Path, *args: str) -> Invocation:
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    done = subprocess.run([sys.executable, str(RUN_PY), "-m", *args], cwd=folder, capture_output=True, text=True,
                          env=child_env({"MLFLOW_TRACKING_URI": uri}), timeout=600)
    return Invocation(done.returncode, done.stdout, done.stderr, uri)


def test_tensorflow_learns_digits_and_is_recorded_like_pytorch(trainbench) -> None:
    result = trainbench("-m", "framework=pytorch,tensorflow", "model=mlp", "data=digits", "device=cpu",
                        "epochs=2", "batch_size=32")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = cells(result)
    torch_run, tf_run = runs[("pytorch", "cpu")], runs[("tensorflow", "cpu")]
    for run in (torch_run, tf_run):
        history = metric_history(result.uri, run.info.run_id, "val_accuracy")
        assert [m.step for m in history] == [1, 2]
        assert history[-1].value >= 0.90, (run.data.tags["trainbench.framework"], [m.value for m in history])
        epochs = [m.value for m in metric_history(result.uri, run.info.run_id, "epoch_time_s")]
        assert len(epochs) == 2 and all(t > 0 for t in epochs)
        assert sum(epochs) <= run.data.metrics["total_time_s"]  # training passes only: validation excluded
        assert run.data.metrics["first_epoch_time_s"] == epochs[0]
    assert set(tf_run.data.metrics) == set(torch_run.data.metrics)
    assert tf_run.data.metrics["num_parameters"] == torch_run.data.metrics["num_parameters"]
    tags = tf_run.data.tags
    assert tags["trainbench.backend"] == "cpu" and tags["keras.backend"] == "tensorflow"
    assert tags["trainbench.framework_version"] == tags["sw.tensorflow"]
    assert tags["trainbench.compile"] == "false" and tags["trainbench.tf32"] == "false"
    assert tags["mlflow.runName"] == "tensorflow-mlp-cpu-bs32"


@pytest.fixture(scope="module")
def keras_benchmarks(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """TensorFlow and JAX, each asked for the GPU and for the CPU: benchmark task, bf16 autocast, XLA."""
    return sweep(tmp_path_factory.mktemp("keras-benchmark"), "framework=tensorflow,jax", "device=gpu,cpu",
                 "task=benchmark", "model=mlp", "precision=mixed_bf16", "compile=true", "batch_size=16",
                 "task.warmup_steps=2", "task.steps=5")


def _has_gpu() -> bool:
    return bool(shutil.which("nvidia-smi")) or (sys.platform == "darwin" and platform.machine() == "arm64")


@pytest.mark.skipif(_has_gpu(), reason="this machine may have a GPU for TensorFlow / JAX")
@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_gpu_cell_without_a_gpu_is_unavailable_and_says_what_was_checked(keras_benchmarks: Invocation,
                                                                          framework: str) -> None:
    assert keras_benchmarks.returncode == 1  # some cell did not finish; the sweep went on
    runs = cells(keras_benchmarks)
    gpu, cpu = runs[(framework, "gpu")], runs[(framework, "cpu")]
    assert gpu.data.tags["trainbench.outcome"] == "unavailable"
    reason = gpu.data.tags["trainbench.reason"]
    if framework == "tensorflow":
        assert "no GPU visible to TensorFlow 2." in reason
        assert "tf.config.list_physical_devices('GPU') is empty" in reason and "CUDA build:" in reason
        assert "tensorflow-metal" in reason
    else:
        assert "no GPU visible to JAX" in reason and "jax.devices('gpu')" in reason
    assert cpu.data.tags["trainbench.outcome"] == "finished"


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_benchmark_logs_synchronized_step_times_in_mixed_precision(keras_benchmarks: Invocation,
                                                                    framework: str) -> None:
    run = cells(keras_benchmarks)[(framework, "cpu")]
    assert run.data.tags["trainbench.outcome"] == "finished", run.data.tags.get("trainbench.reason")
    metrics = run.data.metrics
    for key in STEP_METRICS:
        assert metrics[key] > 0, key
    assert metrics["step_time_ms_p50"] <= metrics["step_time_ms_p90"] <= metrics["step_time_ms_p99"]
    assert abs(metrics["samples_per_s"] - 16 / (metrics["step_time_ms_mean"] / 1000)) / metrics["samples_per_s"] < 0.01
    assert metrics["num_parameters"] == MLP_PARAMETERS_32PX
    assert "epoch_time_s" not in metrics
    tags = run.data.tags
    assert tags["trainbench.framework_version"] == tags[f"sw.{framework}"]
    assert tags["keras.backend"] == framework
    assert tags["trainbench.autocast"] == "bfloat16" and tags["keras.dtype_policy"] == "mixed_bfloat16"
    assert tags["trainbench.tf32"] == "true"
    assert tags["trainbench.compile"] == "true" and "trainbench.compile_reason" not in tags  # XLA on both
