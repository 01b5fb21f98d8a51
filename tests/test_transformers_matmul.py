"""Transformer encoders on text, and the matmul sweep (PyTorch side; Keras parity lives with its adapter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from conftest import Invocation, invoke, metric_history
from trainbench import data
from trainbench.config import CONF_DIR, ConfigError, validate
from trainbench.config.schema import TextFiles

TINY_BERT = [
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_heads=2",
    "model.intermediate_size=128",
    "model.seq_len=32",
]
QUIET = "tracking.system_metrics_interval_s=0"


def cell_config(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=list(overrides)))


def by_name(result: Invocation) -> dict[str, Any]:
    return {r.info.run_name: r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"}


# -- text data, in process -----------------------------------------------------------------------------
def sst2_config(root: Path, seq_len: int) -> TextFiles:
    """data=sst2 as a DistilBERT cell composes it: its seq_len follows the model's."""
    cfg = cell_config(
        "model=distilbert", "data=sst2", f"data.root={root}", "data.download=false", f"model.seq_len={seq_len}"
    ).data
    assert isinstance(cfg, TextFiles) and cfg.seq_len == seq_len
    return cfg


def test_sst2_reads_glue_tsv_and_hashes_words(tmp_path: Path) -> None:
    folder = tmp_path / "SST-2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\nit 's a charming journey . \t1\nflat , dull \t0\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\na gorgeous film \t1\n")
    loaded = data.load(sst2_config(tmp_path, 12), seed=0)
    assert loaded.kind == "text" and loaded.input_shape == (12,) and loaded.num_classes == 2
    assert loaded.train.labels.tolist() == [1, 0] and len(loaded.val) == 1
    first = loaded.train.inputs[0].tolist()
    # [CLS] it 's a charming journey . [SEP] then padding
    assert first[:1] == [data.CLS_ID] and first[7] == data.SEP_ID and first[8:] == [data.PAD_ID] * 4
    assert loaded.padded  # so attention masks the padding
    # the same word always gets the same id, on any machine
    assert data.tokenize(["charming"], 4, 30522)[0, 1] == data.tokenize(["Charming!"], 4, 30522)[0, 1]
    assert data.tokenize(["charming"], 4, 30522)[0, 1] != data.tokenize(["journey"], 4, 30522)[0, 1]


def test_missing_sst2_offline_names_the_folder(tmp_path: Path) -> None:
    cfg = sst2_config(tmp_path, 8)
    with pytest.raises(data.DatasetMissing, match="train.tsv, dev.tsv") as error:
        data.load(cfg, seed=0)
    assert str(tmp_path / "SST-2") in str(error.value)


def test_tf32_on_a_cpu_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError) as error:
        cell_config("task=matmul", "precision=tf32", "device=cpu")
    assert error.value.key == "precision" and "NVIDIA" in str(error.value)
    assert "precision=fp32" in str(error.value)  # and says what to choose instead


# -- through the entry point ---------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_bert_learns_learnable_synthetic_text(tmp_path: Path) -> None:
    result = invoke(
        tmp_path,
        "model=bert_base",
        "data=synthetic_text",
        *TINY_BERT,
        "device=cpu",
        "task.epochs=3",
        "batch_size=32",
        "optim=adamw",
        "optim.lr=0.001",
        "data.num_samples=1024",
        QUIET,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    metrics = cell.data.metrics
    assert metrics["val_accuracy"] >= 0.9
    assert metrics["tokens_per_s"] == pytest.approx(metrics["samples_per_s"] * 32)
    assert cell.data.params["optim.name"] == "adamw" and cell.data.params["data.seq_len"] == "32"
    assert cell.data.tags["sw.transformers"]


FULL_SIZE = {"distilbert": 66_955_010, "bert_base": 109_483_778, "bert_large": 335_143_938}


@pytest.fixture(scope="module")
def full_size_transformers(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """Every full-size text model built and recorded without training (task.epochs=0), in one sweep."""
    return invoke(
        tmp_path_factory.mktemp("transformers"),
        f"model={','.join(FULL_SIZE)}",
        "data=synthetic_text",
        "task.epochs=0",
        "device=cpu",
        "data.num_samples=2",
        "data.num_val_samples=2",
        QUIET,
    )


@pytest.mark.slow
@pytest.mark.parametrize(("model", "parameters"), FULL_SIZE.items())
def test_full_size_transformers_have_the_published_dimensions(
    full_size_transformers: Invocation, model: str, parameters: int
) -> None:
    assert full_size_transformers.returncode == 0, full_size_transformers.stderr[-2000:]
    cell = by_name(full_size_transformers)[f"pytorch-{model}-cpu-bs64"]
    assert cell.data.metrics["num_parameters"] == parameters  # transformers' own count for these configs
    assert cell.data.params["model.seq_len"] == cell.data.params["data.seq_len"] == "128"


@pytest.fixture(scope="module")
def matmul_sweep(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    return invoke(
        tmp_path_factory.mktemp("matmul"),
        "task=matmul",
        "task.shape=square,vector",
        "precision=fp32,mixed_fp16",
        "task.sizes=[32,64,128]",
        "device=cpu",
        "task.steps=3",
        QUIET,
    )


@pytest.mark.slow
def test_matmul_logs_one_point_per_size_and_a_plot(matmul_sweep: Invocation) -> None:
    cells = by_name(matmul_sweep)
    fp32 = cells["pytorch-matmul_square-cpu-fp32"]
    assert fp32.data.tags["trainbench.outcome"] == "finished"
    history = metric_history(matmul_sweep.uri, fp32.info.run_id, "tflops")
    assert [m.step for m in history] == [32, 64, 128]
    times = {m.step: m.value for m in metric_history(matmul_sweep.uri, fp32.info.run_id, "matmul_time_ms")}
    for point in history:  # 2 n^3 FLOPs per product, over the time of one product
        assert point.value == pytest.approx(2 * point.step**3 / (times[point.step] / 1000) / 1e12)
    assert fp32.data.metrics["peak_tflops"] == pytest.approx(max(m.value for m in history))
    assert not {"model.name", "data.name", "optim.name"} & set(fp32.data.params)  # no model, data or optimizer
    from mlflow.tracking import MlflowClient

    assert "matmul.png" in {a.path for a in MlflowClient(matmul_sweep.uri).list_artifacts(fp32.info.run_id)}
    # fp16 on a CPU either runs or is recorded as unsupported; never a crash
    fp16 = cells["pytorch-matmul_square-cpu-mixed_fp16"]
    assert fp16.data.tags["trainbench.outcome"] in ("finished", "unavailable"), fp16.data.tags.get("trainbench.reason")


@pytest.mark.slow
def test_vector_matmul_reports_bandwidth(matmul_sweep: Invocation) -> None:
    cell = by_name(matmul_sweep)["pytorch-matmul_vector-cpu-fp32"]
    history = metric_history(matmul_sweep.uri, cell.info.run_id, "gbytes_per_s")
    assert [m.step for m in history] == [32, 64, 128]
    times = {m.step: m.value for m in metric_history(matmul_sweep.uri, cell.info.run_id, "matmul_time_ms")}
    for point in history:  # both fp32 operands (2n + 1 values) streamed in, over the time of one product
        assert point.value == pytest.approx((2 * point.step + 1) * 4 / (times[point.step] / 1000) / 1e9)
    assert "mfu" not in cell.data.metrics  # memory-bound: no FLOPs peak applies
