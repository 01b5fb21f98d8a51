"""Published figures imported as MLflow runs: one per reference cell, the schema's names, idempotent, strict."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, child_env, metric_history, runs_in
from trainbench import hardware, references

REFERENCES_PY = ROOT / "src" / "references.py"
CSV = ROOT / "references" / "published-results.csv"
HEADER = ",".join(references.COLUMNS)
# Two figures of one reference cell (a GPU laptop) and one of another (its CPU).
GOOD_ROWS = [
    "mine,my laptop,Laptop M1 Max 64GB,gpu,Apple M1 Max 32-core GPU (MPS),pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,throughput,410,img/s,",
    "mine,my laptop,Laptop M1 Max 64GB,gpu,Apple M1 Max 32-core GPU (MPS),pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,power_w,31,W,",
    "mine,my laptop,Laptop M1 Max 64GB,cpu,Apple M1 Max 10-core CPU,pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,throughput,60,img/s,",
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The shipped CSV imported once through the real entry point into a fresh store."""
    folder = tmp_path_factory.mktemp("references")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    completed = subprocess.run([sys.executable, str(REFERENCES_PY)], cwd=folder, capture_output=True, text=True,
                               env=child_env({"MLFLOW_TRACKING_URI": uri}), timeout=300)
    return completed, uri


@pytest.fixture
def store(imported, monkeypatch, tmp_path):
    """In-process imports into the module's store (what `python src/references.py` resolves)."""
    _, uri = imported
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def reference_cells(path: Path) -> set[tuple[str, ...]]:
    with path.open(newline="") as handle:
        return {tuple(row[k] for k in references.IDENTITY) for row in csv.DictReader(handle)}


def write_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_one_finished_run_per_reference_cell(imported) -> None:
    completed, uri = imported
    assert completed.returncode == 0, completed.stderr[-2000:]
    runs = runs_in(uri)
    assert len(runs) == len(reference_cells(CSV)) == 63
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert "63 created" in completed.stdout


def test_importing_again_changes_nothing(store, capsys) -> None:
    before = {r.info.run_id for r in runs_in(store)}
    assert references.main([]) == 0
    assert {r.info.run_id for r in runs_in(store)} == before
    assert "0 created, 0 replaced, 63 unchanged" in capsys.readouterr().out


def test_imported_runs_carry_the_schema_names(imported) -> None:
    _, uri = imported
    runs = {(r.data.tags["reference.source"], r.info.run_name, r.data.tags["hw.label"],
             r.data.params.get("model.depth"), r.data.tags["trainbench.precision"]): r for r in runs_in(uri)}
    for run in runs.values():
        tags, params = run.data.tags, run.data.params
        assert tags["trainbench.kind"] == "reference" and tags["trainbench.outcome"] == "finished"
        assert tags["trainbench.backend"] in ("cpu", "cuda", "mps", "metal")
        assert tags["trainbench.task"] in ("train", "benchmark", "matmul")
        assert tags["reference.citation"] and tags["reference.key"]
        # the label a local run on that hardware gets, by the main tool's own rule
        assert hardware.label(tags["trainbench.backend"], tags) == tags["hw.label"]
        for key in ("model.name", "data.name", "precision.name", "framework.name", "device.name"):
            assert params[key], key
        if tags["trainbench.task"] == "matmul":  # as tracking.run_name names a matmul cell
            assert run.info.run_name == "tensorflow-matmul_square-metal-fp32" and run.data.metrics == {"peak_tflops": 8}
        else:
            assert run.info.run_name == (f"{tags['trainbench.framework']}-{tags['trainbench.model']}-"
                                         f"{tags['trainbench.backend']}-bs{params['batch_size']}")

    blog = runs[("blog-m1-tensorflow-2022", "tensorflow-mlp-metal-bs32", "Apple M1 GPU", None, "fp32")]
    assert blog.data.params["model.name"] == "mlp" and blog.data.params["model.hidden_sizes"] == "[3000, 1000]"
    assert blog.data.tags["trainbench.task"] == "train" and blog.data.params["epochs"] == "5"
    history = metric_history(uri, blog.info.run_id, "epoch_time_s")
    assert [(m.step, m.value) for m in history] == [(1, 17), (2, 15), (3, 15), (4, 15), (5, 15)]
    assert blog.data.metrics["samples_per_s"] == pytest.approx(1e6 / 293)  # from time_per_sample_us

    depth = runs[("m1-tensorflow-benchmark", "tensorflow-mlp_deep-metal-bs32", "Apple M1 GPU", "10", "fp32")]
    assert depth.data.params["model.name"] == "mlp_deep" and depth.data.params["model.width"] == "1024"
    assert depth.data.metrics["total_time_s"] == 58.48 and depth.data.params["epochs"] == "3"

    mps = runs[("pytorch-mps-m1max-2022", "pytorch-vgg16-mps-bs4", "Apple M1 Max GPU", None, "fp32")]
    assert [(m.step, m.value) for m in metric_history(uri, mps.info.run_id, "epoch_time_s")] == [(1, 36.28)]
    assert mps.data.params["data.name"] == "mnist" and mps.data.params["data.image_size"] == "224"
    assert mps.data.tags["hw.gpu_cores"] == "32" and mps.data.tags["hw.memory_gb"] == "64"

    rtx = runs[("tf-metal-experiments", "tensorflow-resnet50-cuda-bs64", "NVIDIA GeForce RTX 3090", None, "mixed_fp16")]
    assert rtx.data.metrics == {"samples_per_s": 957}
    assert rtx.data.tags["trainbench.task"] == "benchmark" and rtx.data.params["compile"] == "True"  # +xla
    assert rtx.data.tags["reference.precision"] == "mixed_float16+xla"  # the CSV's own words kept

    text = runs[("tf-metal-experiments", "tensorflow-distilbert-cuda-bs64", "NVIDIA A100", None, "fp32")]
    assert text.data.params["data.name"] == "synthetic_text" and text.data.params["data.seq_len"] == "128"

    metal = runs[("tf-metal-experiments", "tensorflow-resnet50-metal-bs64", "Apple M1 Max GPU", None, "fp32")]
    assert metal.data.metrics == {"samples_per_s": 135, "avg_power_w": 40}

    assert {k[2] for k in runs} == {
        "Apple M1 GPU", "Apple M1 CPU", "Intel Core i9 CPU", "NVIDIA A100-PCIE-40GB", "Tesla K80",
        "Tesla P100-PCIE-16GB", "Apple M1 Max GPU", "Apple M1 Max CPU", "Apple M1 Pro GPU",
        "NVIDIA GeForce RTX 3090", "NVIDIA A100", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe", "NVIDIA H200",
    }


def test_a_colleagues_rows_add_runs_and_a_corrected_figure_replaces_its_run(store, tmp_path, capsys) -> None:
    mine = write_csv(tmp_path / "mine.csv", GOOD_ROWS)
    assert references.main([str(mine), "--experiment", "colleague"]) == 0
    assert "2 created" in capsys.readouterr().out
    first = {r.info.run_name: r for r in runs_in(store, "colleague")}
    assert first["pytorch-resnet18-mps-bs64"].data.metrics == {"samples_per_s": 410, "avg_power_w": 31}

    corrected = GOOD_ROWS[0].replace(",410,", ",415,")
    added = GOOD_ROWS[2].replace(",64,fp32,,throughput,60,", ",128,fp32,,throughput,70,")
    write_csv(mine, [corrected, *GOOD_ROWS[1:], added])
    assert references.main([str(mine), "--experiment", "colleague"]) == 0
    assert "1 created, 1 replaced, 1 unchanged" in capsys.readouterr().out
    after = {r.info.run_name: r for r in runs_in(store, "colleague")}
    assert len(after) == 3
    assert after["pytorch-resnet18-mps-bs64"].data.metrics["samples_per_s"] == 415
    assert after["pytorch-resnet18-cpu-bs64"].info.run_id == first["pytorch-resnet18-cpu-bs64"].info.run_id


@pytest.mark.parametrize(("bad_row", "expected"), [
    (GOOD_ROWS[0].replace(",410,", ",fast,"), "`value`='fast' is not valid: must be a number"),
    (GOOD_ROWS[0].replace(",throughput,", ",speed,"), "`metric`='speed' is not valid: choose one of"),
    (GOOD_ROWS[0].replace(",64,fp32,", ",0,fp32,"), "`batch_size`='0' is not valid"),
    (GOOD_ROWS[0].replace(",64,fp32,", ",32.5,fp32,"), "`batch_size`='32.5' is not valid"),
    (GOOD_ROWS[0].replace(",Apple M1 Max 32-core GPU (MPS),", ",,"), "`accelerator` is empty; it is required"),
    (GOOD_ROWS[0].replace(",410,img/s,", ",410,ms,"), "`unit`='ms' is not valid: metric throughput takes"),
    (GOOD_ROWS[0].replace(",410,", ",411,"), "gives samples_per_s again for the same reference cell as line 2"),
])
def test_a_malformed_row_is_rejected_by_line_and_nothing_is_written(store, tmp_path, capsys, bad_row, expected) -> None:
    before = len(runs_in(store))
    bad = write_csv(tmp_path / "bad.csv", [GOOD_ROWS[0], bad_row, GOOD_ROWS[2]])
    assert references.main([str(bad), "--experiment", "malformed"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trainbench: {bad} line 3: ") and expected in err, err
    assert err.endswith("nothing was imported") and "\n" not in err
    assert runs_in(store, "malformed") == [] and len(runs_in(store)) == before


def test_the_entry_point_says_one_line_and_exits_2_on_a_bad_file(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("source,value\nx,1\n")
    completed = subprocess.run([sys.executable, str(REFERENCES_PY), str(bad)], cwd=tmp_path, capture_output=True,
                               text=True, env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}))
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        f"trainbench: {bad} line 1: missing column(s) reference, system, device_kind, accelerator, framework, "
        "framework_version, model, dataset, batch_size, precision, epoch, metric, unit, notes; the header must be "
        + HEADER
    ]
    assert not (tmp_path / "m.db").exists()  # validated before the store is even opened


def test_an_unreachable_store_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    assert references.main([str(write_csv(tmp_path / "ok.csv", GOOD_ROWS))]) == 2
    assert capsys.readouterr().err.startswith("trainbench: cannot reach the MLflow tracking store http://127.0.0.1:9")
