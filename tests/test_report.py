"""The comparison report compares like with like.

Fast tests build the table model from Entries (no store, no subprocess). The slow ones build a store the
way a user does: real sweeps through `python src/run.py` with deliberately mismatched settings (image
size, batch size, train vs benchmark, epochs 0 vs 2, model depth), then `python src/references.py`, and
read the report a person would read.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, RUN_PY, child_env, runs_in
from trainbench.report import cli
from trainbench.report.comparison import build_tables
from trainbench.report.selection import Column, Entry
from trainbench.runs import comparison_key, comparison_settings, model_variant

# The sweeps the report is built from, in ONE place.
EPOCHS = "task.epochs"
TINY_DATA = ["device=cpu", "data.num_samples=64", "data.num_val_samples=16"]
SWEEPS = {
    # the same MLP at two image sizes and two batch sizes: four rows, two curves, never merged
    "train": ["-m", "model=mlp", "data.image_size=16,32", "batch_size=16,32", f"{EPOCHS}=2", *TINY_DATA],
    # a benchmark cell and an untrained (epochs=0) cell of a setting the train sweep also has
    "benchmark": [
        "model=mlp",
        "data.image_size=16",
        "batch_size=16",
        "task=benchmark",
        "task.warmup_steps=1",
        "task.steps=3",
        *TINY_DATA,
    ],
    "untrained": ["model=mlp", "data.image_size=16", "batch_size=16", f"{EPOCHS}=0", *TINY_DATA],
    # a tiny depth study: 64 samples and 2 epochs, never on the axis of the published 50,000-image one
    "depth": ["-m", "model=mlp_deep", "model.depth=1,2", "model.width=32", "batch_size=16", f"{EPOCHS}=2", *TINY_DATA],
}
REPORT_PY = ROOT / "src" / "report.py"
CPU_BACKEND = "(cpu, pytorch)"  # how a local CPU column's label ends (a reference's ends with its [ref: ...])


# ------------------------------------------------------------------------- the table model, no store


def make_entry(
    run_id: str,
    hw_label: str,
    backend: str,
    metrics: dict[str, float],
    *,
    reference: str = "",
    framework: str = "pytorch",
    params: dict[str, str] | None = None,
    **tags: str,
) -> Entry:
    """An Entry as trainbench.report.selection builds it from a run's tags and params."""
    params = params or {}
    column = Column(bool(reference), hw_label, backend, framework, reference)
    settings = comparison_settings(tags, params)
    return Entry(run_id, run_id, column, settings, comparison_key(tags, params), model_variant(params), params, metrics)


MOBILENET = {
    "trainbench.task": "benchmark",
    "trainbench.model": "mobilenet_v2",
    "trainbench.data": "synthetic",
    "trainbench.precision": "fp32",
    "trainbench.batch_size": "128",
}


def one_table(tables: list[Any], task: str, model: str, metric: str = "samples_per_s") -> Any:
    (found,) = [t for t in tables if (t.task, t.model, t.metric.name) == (task, model, metric)]
    return found


def test_a_224_px_and_a_64_px_run_are_two_rows_and_the_speedup_uses_the_matching_one() -> None:
    """The report once merged these two into "median of 2" and printed the M1 Max at 3.45x instead of ~20.8x."""
    cpu_224 = make_entry(
        "cpu224", "Intel Xeon CPU", "cpu", {"samples_per_s": 16.9}, **{**MOBILENET, "trainbench.image_size": "224"}
    )
    cpu_64 = make_entry(
        "cpu64", "Intel Xeon CPU", "cpu", {"samples_per_s": 187.0}, **{**MOBILENET, "trainbench.image_size": "64"}
    )
    m1max = make_entry(
        "m1max",
        "Apple M1 Max GPU",
        "metal",
        {"samples_per_s": 352.0},
        reference="tf-metal",
        framework="tensorflow",
        **{**MOBILENET, "trainbench.image_size": "224"},
    )
    table = one_table(build_tables([cpu_224, cpu_64, m1max], None, []), "benchmark", "mobilenet_v2")
    assert len(table.rows) == 2
    assert all(len(cell.runs) == 1 for row in table.rows for cell in row.cells.values())
    (row_224,) = [r for r in table.rows if r.settings["trainbench.image_size"] == "224"]
    (row_64,) = [r for r in table.rows if r.settings["trainbench.image_size"] == "64"]
    assert row_224.cells[m1max.column.label].speedup == pytest.approx(352.0 / 16.9)
    assert [c.speedup for c in row_64.cells.values()] == [None]  # nothing to compare with: no ratio, no 1.00x


def test_the_default_baseline_is_a_column_with_values_where_devices_meet() -> None:
    """Not the first CPU column when that column is empty wherever two devices meet (every ratio read 1.00x)."""
    alone = make_entry(
        "cpu", "Intel Xeon CPU", "cpu", {"samples_per_s": 50.0}, **{**MOBILENET, "trainbench.batch_size": "32"}
    )
    gpu = make_entry("gpu", "NVIDIA H100", "cuda", {"samples_per_s": 2000.0}, **MOBILENET)
    published = make_entry("ref", "NVIDIA A100", "cuda", {"samples_per_s": 1000.0}, reference="paper", **MOBILENET)
    table = one_table(build_tables([alone, gpu, published], None, []), "benchmark", "mobilenet_v2")
    assert table.baseline == gpu.column
    (met,) = [r for r in table.rows if len(r.cells) == 2]
    assert met.cells[published.column.label].speedup == pytest.approx(1000.0 / 2000.0)


def test_train_and_benchmark_figures_never_share_a_table() -> None:
    train = make_entry(
        "train",
        "Intel Xeon CPU",
        "cpu",
        {"samples_per_s": 10.0},
        **{**MOBILENET, "trainbench.task": "train", "trainbench.epochs": "2"},
    )
    bench = make_entry("bench", "Intel Xeon CPU", "cpu", {"samples_per_s": 30.0}, **MOBILENET)
    tables = build_tables([train, bench], None, [])
    assert {(t.task, len(t.rows)) for t in tables} == {("train", 1), ("benchmark", 1)}


def test_a_published_row_without_a_local_run_says_how_to_measure_one() -> None:
    depth = make_entry(
        "ref",
        "Apple M1 GPU",
        "metal",
        {"total_time_s": 58.48},
        reference="depth-study",
        framework="tensorflow",
        params={"model.depth": "10", "model.width": "1024"},
        **{
            "trainbench.task": "train",
            "trainbench.model": "mlp_deep",
            "trainbench.data": "cifar10",
            "trainbench.image_size": "32",
            "trainbench.samples_per_epoch": "50000",
            "trainbench.epochs": "3",
            "trainbench.precision": "fp32",
            "trainbench.batch_size": "32",
            "trainbench.timed_region": "build_fit",
        },
    )
    (row,) = one_table(build_tables([depth], None, []), "train", "mlp_deep", "total_time_s").rows
    assert row.commands == [
        "python src/run.py framework=tensorflow device=gpu model=mlp_deep data=cifar10 task=train batch_size=32 "
        "precision=fp32 model.depth=10 model.width=1024 task.epochs=3 data.image_size=32 task.timed_region=build_fit"
    ]
    assert_runnable(row.commands[0])


@pytest.mark.parametrize(("framework", "region"), [("tensorflow", "fit"), ("pytorch", "steps")])
def test_the_command_for_a_published_row_times_what_it_timed_and_composes(framework: str, region: str) -> None:
    """An NHWC ResNet-50 row (the tf-metal study's Keras fit; a PyTorch channels_last benchmark): the command
    asks for the same timed region and layout, and the sweep would accept it."""
    published = make_entry(
        "ref",
        "Apple M1 Max GPU",
        "metal",
        {"samples_per_s": 135.0},
        reference="published",
        framework=framework,
        **{
            **MOBILENET,
            "trainbench.model": "resnet50",
            "trainbench.data": "synthetic_imagenet",
            "trainbench.image_size": "224",
            "trainbench.batch_size": "64",
            "trainbench.timed_region": region,
            "trainbench.channels_last": "true",
        },
    )
    (row,) = one_table(build_tables([published], None, []), "benchmark", "resnet50", "samples_per_s").rows
    (command,) = row.commands
    assert ("task.timed_region=fit" in command) == (region == "fit")
    assert ("optimize.channels_last=true" in command) == (framework == "pytorch")  # Keras is always NHWC
    cell = assert_runnable(command)
    assert cell.task.tags(cell)["trainbench.timed_region"] == region


def assert_runnable(command: str) -> Any:
    """The command's cell, composed and judged as the sweep would judge it (a ConfigError fails the test)."""
    import shlex

    from hydra import compose, initialize_config_dir

    from trainbench.config import CONF_DIR, validate

    prefix = "python src/run.py "
    assert command.startswith(prefix) and "#" not in command, command
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=shlex.split(command[len(prefix) :])))


# ------------------------------------------------------------------------- one real store, slow


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict[str, Any]:
    """The sweeps of SWEEPS through the real entry point, then the published references."""
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = child_env({"MLFLOW_TRACKING_URI": uri})
    for name, args in SWEEPS.items():
        done = subprocess.run(
            [sys.executable, str(RUN_PY), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"sweep {name}: {done.stderr[-3000:]}"
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "references.py")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = runs_in(uri)
    sweeps = [r for r in runs if r.data.tags.get("trainbench.kind") == "sweep"]
    cells = [r for r in runs if r.data.tags.get("trainbench.kind") == "cell"]
    return {"uri": uri, "folder": folder, "experiment_id": runs[0].info.experiment_id, "sweeps": sweeps, "cells": cells}


def make_report(store: dict[str, Any], out: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", store["uri"])
        patch.delenv("MLFLOW_RUN_ID", raising=False)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        code = cli.main(["--out", str(out), *args])
    data = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, data


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("out") / "report"
    code, data = make_report(store, out)
    assert code == 0
    return out, data


def table(data: dict, task: str, model: str, metric: str = "samples_per_s") -> dict:
    (found,) = [t for t in data["tables"] if (t["task"], t["model"], t["metric"]) == (task, model, metric)]
    return found


def cells_of(store: dict[str, Any], **settings: str) -> list[Any]:
    return [r for r in store["cells"] if all(r.data.params.get(k) == v for k, v in settings.items())]


def local_label(found: dict) -> str:
    (label,) = [c["label"] for c in found["columns"] if not c["reference"]]
    return label


@pytest.mark.slow
def test_runs_that_measured_different_quantities_are_never_merged(store, report) -> None:
    _, data = report
    train = table(data, "train", "mlp")
    cpu = local_label(train)
    assert cpu.endswith(CPU_BACKEND)
    local_rows = [r for r in train["rows"] if cpu in r["cells"]]
    # 2 image sizes x 2 batch sizes, one run each: nothing merged into a "median of 2"
    assert sorted((r["settings"]["image_size"], r["settings"]["batch_size"]) for r in local_rows) == [
        ("16", "16"),
        ("16", "32"),
        ("32", "16"),
        ("32", "32"),
    ]
    assert all(len(r["cells"][cpu]["runs"]) == 1 for r in local_rows)
    for row in local_rows:
        (run,) = cells_of(
            store,
            **{
                "model.name": "mlp",
                "data.image_size": row["settings"]["image_size"],
                "batch_size": row["settings"]["batch_size"],
                "task.name": "train",
                EPOCHS: "2",
            },
        )
        assert row["cells"][cpu]["runs"] == [run.info.run_id]
        assert row["cells"][cpu]["value"] == pytest.approx(run.data.metrics["samples_per_s"])
    # the benchmark cell has its own table; the epochs=0 cell is in none, and the notes say why
    (bench,) = cells_of(store, **{"task.name": "benchmark"})
    (untrained,) = cells_of(store, **{"task.name": "train", EPOCHS: "0"})
    shown = {run for t in data["tables"] for r in t["rows"] for c in r["cells"].values() for run in c["runs"]}
    assert bench.info.run_id in {
        run for r in table(data, "benchmark", "mlp")["rows"] for c in r["cells"].values() for run in c["runs"]
    }
    assert bench.info.run_id not in {run for r in train["rows"] for c in r["cells"].values() for run in c["runs"]}
    assert untrained.info.run_id not in shown
    assert any("epochs=0" in note and untrained.info.run_name in note for note in data["notes"])


@pytest.mark.slow
def test_published_rows_say_how_to_measure_them_and_ratios_stay_within_a_row(report) -> None:
    _, data = report
    train = table(data, "train", "mlp")
    cpu = local_label(train)
    blog = [r for r in train["rows"] if r["settings"]["data"] == "cifar10"]
    assert blog and not any(cpu in r["cells"] for r in blog)  # 50,000 CIFAR-10 images: no local run matches
    assert any(
        "model=mlp data=cifar10 task=train batch_size=32 precision=fp32 task.epochs=5 data.image_size=32" in command
        for r in blog
        for command in r["commands"]
    )
    baseline = train["baseline"]
    for row in train["rows"]:
        base = row["cells"].get(baseline)
        for label, cell in row["cells"].items():
            if base is None or len(row["cells"]) == 1 or label == baseline:
                assert cell["speedup"] is None
            else:
                assert cell["speedup"] == pytest.approx(cell["value"] / base["value"])


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


@pytest.mark.slow
def test_plots_put_only_comparable_runs_on_one_axis(report) -> None:
    out, _ = report
    throughput = json.loads((out / "throughput.json").read_text())
    local = {title: series for title, series in throughput.items() if any(s.endswith(CPU_BACKEND) for s in series)}
    assert len(local) == 2 and all("64 samples x 2 epochs" in title for title in local)  # 16 px and 32 px apart
    assert all(points and [x for x, _ in points] == [16, 32] for series in local.values() for points in series.values())
    depth = json.loads((out / "mlp_depth.json").read_text())
    for title, series in depth.items():
        has_local = any(label.endswith(CPU_BACKEND) for label in series)
        has_reference = any("[ref:" in label for label in series)
        assert not (has_local and has_reference), title  # 64 local samples never next to 50,000 published ones
    assert any("64 samples x 2 epochs" in title for title in depth) and any("50000 samples" in title for title in depth)
    for name in ("throughput", "mlp_depth", "epoch_times"):
        width, height = png_size(out / f"{name}.png")
        assert 480 <= width <= 1600 and height <= 2400, (name, width, height)


@pytest.mark.slow
def test_markdown_and_self_contained_html(report) -> None:
    out, _ = report
    md = (out / "report.md").read_text()
    assert "## mlp (train): samples_per_s" in md and "## mlp (benchmark): samples_per_s" in md
    assert "higher is better" in md and "Published rows with no local run yet" in md
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(list(out.glob("*.png")))
    assert "<style>" in page and "<link" not in page and "<script" not in page


@pytest.mark.slow
def test_the_report_is_logged_as_a_run(store, report) -> None:
    runs = [r for r in runs_in(store["uri"]) if r.data.tags.get("trainbench.kind") == "report"]
    (run,) = [r for r in runs if r.info.run_name.startswith("report-")]
    assert run.data.tags["trainbench.outcome"] == "finished" and run.info.status == "FINISHED"
    from mlflow.tracking import MlflowClient

    logged = {a.path for a in MlflowClient(store["uri"]).list_artifacts(run.info.run_id)}
    assert {"report.html", "report.md", "report.json", "throughput.png", "throughput.json", "mlp_depth.png"} <= logged


@pytest.mark.slow
def test_under_mlflow_run_the_report_goes_into_its_run(store, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store["uri"])
    outer = client.create_run(store["experiment_id"], run_name="mlflow-run").info.run_id
    try:
        code, _ = make_report(store, tmp_path / "adopted", "--model", "vgg16", env={"MLFLOW_RUN_ID": outer})
        assert code == 0
        run = client.get_run(outer)
        assert run.data.tags["trainbench.kind"] == "report" and run.data.tags["trainbench.outcome"] == "finished"
        assert "report.html" in {a.path for a in client.list_artifacts(outer)}
        assert run.info.status == "RUNNING"  # `mlflow run` closes it from the exit status
    finally:
        client.delete_run(outer)


@pytest.mark.slow
def test_sweep_and_baseline_select_what_the_tables_compare(store, tmp_path) -> None:
    (train_sweep,) = [s for s in store["sweeps"] if "image_size=16,32" in s.data.tags.get("trainbench.overrides", "")]
    code, data = make_report(store, tmp_path / "sweep", "--sweep", train_sweep.info.run_id, "--no-log")
    assert code == 0
    assert {(t["task"], t["model"]) for t in data["tables"]} == {("train", "mlp")}  # its cells, references of mlp
    code, data = make_report(store, tmp_path / "m1", "--baseline", "Apple M1 GPU", "--model", "mlp", "--no-log")
    assert code == 0
    train = table(data, "train", "mlp")
    assert train["baseline"].startswith("Apple M1 GPU (metal, tensorflow)")
    assert table(data, "benchmark", "mlp")["baseline"] is None  # no such column there: no ratios


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "no_such_model"], "trainbench: nothing to report: no finished cell or reference run matches"),
        (["--filter", "tags.`hw.label` = "], "trainbench: bad --filter"),
        (["--baseline", "Cray-1"], "trainbench: --baseline 'Cray-1' matches no column; use a column label or one of:"),
        (["--experiment", "nope"], "trainbench: no experiment `nope` in"),
        (["--sweep", "0" * 32], f"trainbench: --sweep {'0' * 32}: no such run"),
    ],
)
def test_bad_selections_are_one_line_and_exit_2(store, tmp_path, capsys, args, expected) -> None:
    code, _ = make_report(store, tmp_path / "out", *args, "--no-log")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(expected) and "\n" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_entry_point_exits_2_on_an_empty_selection(store, tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, str(REPORT_PY), "--out", str(tmp_path / "out"), "--filter", "tags.`hw.label` = 'Cray-1'"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env({"MLFLOW_TRACKING_URI": store["uri"]}),
        timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "trainbench: nothing to report: no finished cell or reference run matches "
        "(experiment trainbench; filter tags.`hw.label` = 'Cray-1')"
    ]
    assert not (tmp_path / "out").exists()
