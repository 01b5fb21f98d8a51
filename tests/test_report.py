"""The comparison report over a real store: local cells of two devices x two batch sizes, and the references."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, child_env
from trainbench import references, report, tracking
from trainbench.config import flatten

REPORT_PY = ROOT / "src" / "report.py"
CPU = "Intel Xeon Platinum 8480+ CPU"
GPU = "NVIDIA H100 80GB HBM3"
CPU_COLUMN = f"{CPU} (cpu, pytorch)"
GPU_COLUMN = f"{GPU} (cuda, pytorch)"
M1_GPU_BLOG = "Apple M1 GPU (metal, tensorflow) [ref: blog-m1-tensorflow-2022]"
M1_GPU_DEPTH = "Apple M1 GPU (metal, tensorflow) [ref: m1-tensorflow-benchmark]"
# (device label, backend, model, depth, batch size) -> (samples_per_s, epoch times, total_time_s)
LOCAL = {
    (CPU, "cpu", "mlp", None, 32): (1000.0, [12.0, 10.0, 10.0], 32.0),
    (CPU, "cpu", "mlp", None, 64): (1500.0, [8.0, 7.0, 7.0], 22.0),
    (GPU, "cuda", "mlp", None, 32): (8000.0, [3.0, 1.25, 1.25], 5.5),
    (GPU, "cuda", "mlp", None, 64): (15000.0, [2.0, 0.7, 0.6], 3.3),
    (CPU, "cpu", "mlp_deep", 5, 32): (900.0, [11.0, 9.5, 9.5], 30.0),
    (CPU, "cpu", "mlp_deep", 10, 32): (500.0, [20.0, 17.5, 17.5], 55.0),
    (GPU, "cuda", "mlp_deep", 5, 32): (7000.0, [4.0, 1.0, 1.0], 6.0),
    (GPU, "cuda", "mlp_deep", 10, 32): (6000.0, [4.5, 1.25, 1.25], 7.0),
}


def create_cell(client, experiment_id: str, hw_label: str, backend: str, model: str, depth: int | None,
                batch_size: int, figures: tuple[float, list[float], float], parent: str | None,
                outcome: str = "finished") -> str:
    """A run in the exact shape trainbench.launch + trainbench.tasks give a finished train cell."""
    samples_per_s, epoch_times, total = figures
    cfg = {"framework": {"name": "pytorch"}, "device": {"name": "gpu" if backend == "cuda" else "cpu"},
           "model": {"name": model, "depth": depth, "width": 1024 if depth else None},
           "data": {"name": "cifar10"}, "task": {"name": "train"}, "precision": {"name": "fp32"},
           "batch_size": batch_size, "epochs": len(epoch_times)}
    tags = {"trainbench.kind": "cell", "trainbench.outcome": outcome, "trainbench.framework": "pytorch",
            "trainbench.device": cfg["device"]["name"], "trainbench.backend": backend, "trainbench.task": "train",
            "trainbench.model": model, "trainbench.data": "cifar10", "trainbench.batch_size": str(batch_size),
            "trainbench.precision": "fp32", "hw.label": hw_label, "hw.cpu": CPU}
    if backend == "cuda":
        tags["hw.gpu"] = GPU
    if parent:
        tags["mlflow.parentRunId"] = parent
    run_id = client.create_run(experiment_id, run_name=tracking.run_name(cfg, backend), tags=tags).info.run_id
    tracking.log_params(client, run_id, tracking.params_of(flatten(cfg)))
    for epoch, seconds in enumerate(epoch_times, start=1):
        tracking.log_metrics(client, run_id, {"epoch_time_s": seconds, "epoch_samples_per_s": batch_size / seconds},
                             step=epoch)
    tracking.log_metrics(client, run_id, {"samples_per_s": samples_per_s, "total_time_s": total,
                                          "first_epoch_time_s": epoch_times[0]})
    tracking.close(client, run_id, outcome)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Local cells (the mlp ones as children of a sweep), a failed cell, and the imported references."""
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        client = tracking.connect(uri)
        experiment_id = client.create_experiment("trainbench", artifact_location=(folder / "artifacts").as_uri())
        assert references.main([]) == 0
        sweep = client.create_run(experiment_id, run_name="sweep", tags={"trainbench.kind": "sweep"}).info.run_id
        for (label, backend, model, depth, batch), figures in LOCAL.items():
            create_cell(client, experiment_id, label, backend, model, depth, batch, figures,
                        parent=sweep if model == "mlp" else None)
        failed = create_cell(client, experiment_id, CPU, "cpu", "mlp", None, 128, (1.0, [1.0], 1.0), sweep, "failed")
    return {"uri": uri, "client": client, "experiment_id": experiment_id, "sweep": sweep, "failed": failed,
            "folder": folder}


def make_report(store, monkeypatch, out: Path, *args: str, extra_env: dict[str, str] | None = None) -> tuple[int, dict]:
    extra_env = extra_env or {}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    if "MLFLOW_RUN_ID" not in extra_env:
        monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    for key, value in extra_env.items():
        monkeypatch.setenv(key, value)
    code = report.main(["--out", str(out), *args])
    data = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, data


@pytest.fixture(scope="module")
def default_report(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report"
    with pytest.MonkeyPatch.context() as patch:
        code, data = make_report(store, patch, out)
    assert code == 0
    return out, data


def table(data: dict, model: str, metric: str) -> dict:
    (found,) = [t for t in data["tables"] if t["model"] == model and t["metric"] == metric]
    return found


def row(found: dict, batch_size: int | None, depth: int | None = None, precision: str = "fp32") -> dict:
    (match,) = [r for r in found["rows"]
                if r["batch_size"] == batch_size and r["depth"] == depth and r["precision"] == precision]
    return match["cells"]


def test_table_sets_local_and_reference_columns_side_by_side_with_speedups(default_report, store) -> None:
    _, data = default_report
    mlp = table(data, "mlp", "samples_per_s")
    labels = [c["label"] for c in mlp["columns"]]
    assert labels[:2] == [CPU_COLUMN, GPU_COLUMN]  # local first, then the references
    assert all(c["reference"] for c in mlp["columns"][2:]) and M1_GPU_BLOG in labels
    assert mlp["baseline"] == CPU_COLUMN  # default: the first CPU column
    bs32, bs64 = row(mlp, 32), row(mlp, 64)
    assert bs32[CPU_COLUMN]["value"] == 1000 and bs32[CPU_COLUMN]["speedup"] == 1.0
    assert bs32[GPU_COLUMN]["speedup"] == 8.0 and bs64[GPU_COLUMN]["speedup"] == 10.0
    assert bs32[M1_GPU_BLOG]["value"] == pytest.approx(1e6 / 293)
    assert bs32[M1_GPU_BLOG]["speedup"] == pytest.approx(1e6 / 293 / 1000)
    assert M1_GPU_BLOG not in bs64  # published for batch 32 only
    assert all(store["failed"] not in c["runs"] for r in mlp["rows"] for c in r["cells"].values())

    # the depth study's references have total times only: their own table, local runs in it too
    depth = table(data, "mlp_deep", "total_time_s")
    five = row(depth, 32, depth=5)
    assert five[GPU_COLUMN]["speedup"] == 5.0  # times: baseline / value
    assert five[M1_GPU_DEPTH]["value"] == 50.57 and five[M1_GPU_DEPTH]["speedup"] == pytest.approx(30 / 50.57)
    assert table(data, "mlp_deep", "samples_per_s")["rows"]  # and their throughput, local only

    # the published MPS study: epoch times, speed-up of the GPU over the CPU as in the blog's table
    vgg = row(table(data, "vgg16", "epoch_time_s"), 4)
    assert vgg["Apple M1 Max GPU (mps, pytorch) [ref: pytorch-mps-m1max-2022]"]["speedup"] == pytest.approx(188.28 / 36.28)


def test_markdown_and_self_contained_html(default_report) -> None:
    out, _ = default_report
    md = (out / "report.md").read_text()
    assert "## mlp: samples_per_s" in md and "| mlp | 32 | fp32 | cifar10 | 1,000 (1.00×) | 8,000 (8.00×) |" in md
    assert "higher is better" in md and "lower is better" in md
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3
    assert "<style>" in page and "http" not in page.split("<body>")[1].split("Sources")[0]


def test_plots_exist_with_the_data_behind_them(default_report) -> None:
    out, data = default_report
    for name in ("throughput", "mlp_depth", "epoch_times"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    throughput = json.loads((out / "throughput.json").read_text())
    assert throughput[f"mlp, fp32, cifar10 | {CPU_COLUMN}"] == [[32, 1000], [64, 1500]]
    assert throughput[f"mlp, fp32, cifar10 | {GPU_COLUMN}"] == [[32, 8000], [64, 15000]]
    assert throughput[f"mlp, fp32, cifar10 | {M1_GPU_BLOG}"] == [[32, pytest.approx(1e6 / 293)]]
    depth = json.loads((out / "mlp_depth.json").read_text())
    assert depth[f"{CPU_COLUMN}, mlp_deep bs32, 3 epochs, cifar10"] == [[5, 30], [10, 55]]
    assert depth[f"{M1_GPU_DEPTH}, mlp_deep bs32, 3 epochs, cifar10"] == [[5, 50.57], [10, 58.48], [15, 75.76],
                                                                         [20, 105.23]]
    epochs = json.loads((out / "epoch_times.json").read_text())
    assert epochs[f"{GPU_COLUMN} | mlp, bs64, fp32, cifar10"] == [[1, 2.0], [2, 0.7], [3, 0.6]]
    assert epochs[f"{M1_GPU_BLOG} | mlp, bs32, fp32, cifar10"] == [[1, 17], [2, 15], [3, 15], [4, 15], [5, 15]]
    # no task=matmul run has a tflops curve yet: said, not drawn
    assert not (out / "matmul.png").exists()
    assert any(note.startswith("skipped matmul.png") for note in data["notes"])


def test_the_report_is_logged_as_a_run(default_report, store) -> None:
    client = store["client"]
    (run,) = [r for r in client.search_runs([store["experiment_id"]], "tags.`trainbench.kind` = 'report'")
              if r.info.run_name.startswith("report-")]
    assert run.data.tags["trainbench.outcome"] == "finished" and run.info.status == "FINISHED"
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "report.md", "report.json", "throughput.png", "throughput.json", "mlp_depth.png",
            "epoch_times.png"} <= logged


def test_under_mlflow_run_the_report_goes_into_its_run(store, tmp_path, monkeypatch) -> None:
    client = store["client"]
    outer = client.create_run(store["experiment_id"], run_name="mlflow-run").info.run_id
    try:
        code, _ = make_report(store, monkeypatch, tmp_path / "adopted", "--model", "vgg16",
                              extra_env={"MLFLOW_RUN_ID": outer})
        assert code == 0
        run = client.get_run(outer)
        assert run.data.tags["trainbench.kind"] == "report" and run.data.tags["trainbench.outcome"] == "finished"
        assert "report.html" in {a.path for a in client.list_artifacts(outer)}
        assert run.info.status == "RUNNING"  # `mlflow run` closes it from the exit status
    finally:
        client.delete_run(outer)


def test_baseline_and_sweep_select_what_the_table_compares(store, tmp_path, monkeypatch) -> None:
    code, data = make_report(store, monkeypatch, tmp_path / "gpu", "--baseline", GPU, "--no-log")
    assert code == 0
    assert row(table(data, "mlp", "samples_per_s"), 32)[CPU_COLUMN]["speedup"] == 0.125
    assert table(data, "vgg16", "epoch_time_s")["baseline"] is None  # no such column there: no ratios

    code, data = make_report(store, monkeypatch, tmp_path / "sweep", "--sweep", store["sweep"], "--no-log")
    assert code == 0
    assert {t["model"] for t in data["tables"]} == {"mlp"}  # its cells, and the references of its model
    assert {c["label"] for c in table(data, "mlp", "samples_per_s")["columns"]} >= {CPU_COLUMN, M1_GPU_BLOG}


@pytest.mark.parametrize(("args", "expected"), [
    (["--model", "no_such_model"], "trainbench: nothing to report: no finished cell or reference run matches"),
    (["--filter", "tags.`hw.label` = "], "trainbench: bad --filter"),
    (["--baseline", "Cray-1"], "trainbench: --baseline 'Cray-1' matches no column; use a column label or one of:"),
    (["--experiment", "nope"], "trainbench: no experiment `nope` in"),
    (["--sweep", "0" * 32], f"trainbench: --sweep {'0' * 32}: no such run"),
])
def test_bad_selections_are_one_line_and_exit_2(store, tmp_path, monkeypatch, capsys, args, expected) -> None:
    code, _ = make_report(store, monkeypatch, tmp_path / "out", *args, "--no-log")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(expected) and "\n" not in err, err
    assert not (tmp_path / "out" / "report.md").exists()


def test_the_entry_point_exits_2_on_an_empty_selection(store, tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, str(REPORT_PY), "--out", str(tmp_path / "out"), "--filter", "tags.`hw.label` = 'Cray-1'"],
        cwd=tmp_path, capture_output=True, text=True, env=child_env({"MLFLOW_TRACKING_URI": store["uri"]}), timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "trainbench: nothing to report: no finished cell or reference run matches "
        "(experiment trainbench; filter tags.`hw.label` = 'Cray-1')"
    ]


def test_matmul_cells_give_tflops_curves_with_the_published_peak(store, tmp_path, monkeypatch) -> None:
    """A matmul cell as trainbench.tasks.matmul records it: tflops with step = n, peak_tflops."""
    client, experiment_id = store["client"], store["experiment_id"]
    tags = {"trainbench.kind": "cell", "trainbench.outcome": "finished", "trainbench.task": "matmul",
            "trainbench.matmul_shape": "square", "trainbench.model": "mlp", "trainbench.framework": "pytorch",
            "trainbench.backend": "cuda", "trainbench.precision": "tf32", "hw.label": GPU, "hw.gpu": GPU}
    run_id = client.create_run(experiment_id, run_name="pytorch-matmul_square-cuda-tf32", tags=tags).info.run_id
    tracking.log_params(client, run_id, tracking.params_of({"task.name": "matmul", "task.shape": "square",
                                                            "model.name": "mlp", "batch_size": 64}))
    for n, tflops in ((1024, 100.0), (4096, 300.0), (16384, 400.0)):
        tracking.log_metrics(client, run_id, {"tflops": tflops}, step=n)
    tracking.log_metrics(client, run_id, {"peak_tflops": 400.0, "total_time_s": 3.0})
    tracking.close(client, run_id, "finished")
    try:
        code, data = make_report(store, monkeypatch, tmp_path / "matmul", "--filter",
                                 "tags.`trainbench.task` = 'matmul'", "--no-log")
    finally:
        client.delete_run(run_id)  # the other tests' store stays as it was
    assert code == 0
    curves = json.loads((tmp_path / "matmul" / "matmul.json").read_text())
    assert curves == {
        f"{GPU} (cuda, pytorch), tf32, square": [[1024, 100.0], [4096, 300.0], [16384, 400.0]],
        "Apple M1 Max GPU (metal, tensorflow) [ref: tf-metal-experiments], fp32, square (peak_tflops)":
            [[1024, 8.0], [16384, 8.0]],
    }
    peaks = table(data, "matmul_square", "peak_tflops")
    assert row(peaks, None, precision="tf32")[f"{GPU} (cuda, pytorch)"]["value"] == 400.0
    assert not (tmp_path / "matmul" / "throughput.png").exists()  # matmul cells have no samples_per_s

