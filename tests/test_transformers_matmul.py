"""Transformer encoders on text, and the matmul sweep (PyTorch side; Keras parity lives with its adapter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import metric_history
from trainbench import data

TINY_BERT = ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=2", "model.intermediate_size=128",
             "model.seq_len=32"]


def test_tiny_bert_learns_learnable_synthetic_text(trainbench) -> None:
    result = trainbench("model=bert_base", "data=synthetic_text", *TINY_BERT, "device=cpu", "epochs=3",
                        "batch_size=32", "optim.name=adamw", "optim.lr=0.001", "data.num_samples=1024")
    assert result.returncode == 0, result.stderr[-2000:]
    (cell,) = result.runs()
    metrics = cell.data.metrics
    assert metrics["val_accuracy"] >= 0.9
    assert metrics["tokens_per_s"] == pytest.approx(metrics["samples_per_s"] * 32)
    assert cell.data.tags["sw.transformers"]


@pytest.mark.parametrize(("model", "parameters"), [
    ("distilbert", 66_955_010), ("bert_base", 109_483_778), ("bert_large", 335_143_938)])
def test_full_size_transformers_have_the_published_dimensions(trainbench, model: str, parameters: int) -> None:
    # epochs=0 builds and records the model without training.
    result = trainbench(f"model={model}", "data=synthetic_text", "epochs=0", "device=cpu",
                        "data.num_samples=2", "data.num_val_samples=2")
    (cell,) = result.runs()
    assert cell.data.metrics["num_parameters"] == parameters  # transformers' own count for these configs


def test_sst2_reads_glue_tsv_and_hashes_words(tmp_path: Path) -> None:
    folder = tmp_path / "SST-2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\nit 's a charming journey . \t1\nflat , dull \t0\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\na gorgeous film \t1\n")
    cfg = {"name": "sst2", "input": "text", "root": str(tmp_path), "download": False, "seq_len": 12,
           "vocab_size": 30522, "num_samples": None, "num_val_samples": None}
    loaded = data.load(cfg, seed=0)
    assert loaded.kind == "text" and loaded.input_shape == (12,)
    assert loaded.train.labels.tolist() == [1, 0] and len(loaded.val) == 1
    first = loaded.train.inputs[0].tolist()
    assert first[:1] == [data.CLS_ID] and first[7] == data.SEP_ID and first[8:] == [data.PAD_ID] * 4
    # the same word always gets the same id, on any machine
    assert data.tokenize(["charming"], 4, 30522)[0, 1] == data.tokenize(["Charming!"], 4, 30522)[0, 1]


def test_missing_sst2_offline_names_the_folder(tmp_path: Path) -> None:
    cfg = {"name": "sst2", "input": "text", "root": str(tmp_path), "download": False, "seq_len": 8,
           "vocab_size": 30522, "num_samples": None, "num_val_samples": None}
    with pytest.raises(data.DatasetMissing, match="train.tsv, dev.tsv"):
        data.load(cfg, seed=0)


def test_matmul_logs_one_point_per_size_and_a_plot(trainbench) -> None:
    result = trainbench("-m", "task=matmul", "precision=fp32,mixed_fp16,tf32", "task.sizes=[32,64,128]",
                        "device=cpu", "task.steps=3")
    cells = {r.data.tags["trainbench.precision"]: r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"}
    fp32 = cells["fp32"]
    assert fp32.info.run_name == "pytorch-matmul_square-cpu-fp32"
    history = metric_history(result.uri, fp32.info.run_id, "tflops")
    assert [m.step for m in history] == [32, 64, 128]
    assert fp32.data.metrics["peak_tflops"] == pytest.approx(max(m.value for m in history))
    from mlflow.tracking import MlflowClient

    assert "matmul.png" in {a.path for a in MlflowClient(result.uri).list_artifacts(fp32.info.run_id)}
    # fp16 on a CPU either runs or is recorded as unsupported; never a crash
    assert cells["mixed_fp16"].data.tags["trainbench.outcome"] in ("finished", "unavailable")
    assert cells["tf32"].data.tags["trainbench.outcome"] == "unavailable"
    assert "NVIDIA" in cells["tf32"].data.tags["trainbench.reason"]


def test_vector_matmul_reports_bandwidth(trainbench) -> None:
    result = trainbench("task=matmul", "task.shape=vector", "task.sizes=[100,10000,1000000]", "device=cpu")
    (cell,) = result.runs()
    history = metric_history(result.uri, cell.info.run_id, "gbytes_per_s")
    assert [m.step for m in history] == [100, 10000, 1000000] and all(m.value > 0 for m in history)
