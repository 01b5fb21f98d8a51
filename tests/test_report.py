"""The comparison report compares like with like.

Fast tests build the table model from Entries (no store, no subprocess). The slow ones build a store the
way a user does: real sweeps through `python src/run.py` with deliberately mismatched settings (image
size, batch size, train vs benchmark, epochs 0 vs 2, model depth), then `python src/references.py`, and
read the report a person would read.
"""

from __future__ import annotations

import json
import shlex
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import QUIET, ROOT, RUN_PY, child_env, import_references, invoke, runs_in
from trainbench.config import params
from trainbench.config.compose import cells_for
from trainbench.report import cli
from trainbench.report.comparison import build_tables
from trainbench.report.selection import Entry, entry
from trainbench.store.setting import setting
from trainbench.store.sources import Found

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
CPU_BACKEND = "(cpu)"  # how a local CPU column's label ends (a reference's ends with its [ref: ...])
XEON = {"hw.cpu": "Intel(R) Xeon(R) Processor", "hw.cpu_cores": "2", "trainbench.backend": "cpu"}


# ------------------------------------------------------------------------- the table model, no store


def make_entry(
    run_id: str,
    overrides: list[str],
    machine: dict[str, str],
    metrics: dict[str, float],
    *,
    reference: str = "",
    framework: str = "pytorch",
    **tags: str,
) -> Entry:
    """An Entry as trainbench.report.selection builds it from a run: the params a real cell of `overrides`
    records (a reference's: its command's), a machine's hw.* tags, the metrics it measured."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    (cell,) = cells_for([*overrides, f"framework={framework}"])
    cell = cell.task.prepared(cell)
    run_params = {key: str(value) for key, value in params(cell).items()}
    all_tags = {
        **{key: str(value) for key, value in cell.task.tags(cell).items()},
        "trainbench.kind": "reference" if reference else "cell",
        "trainbench.outcome": "finished",
        "trainbench.framework": framework,
        **({"reference.source": reference} if reference else {"trainbench.framework_version": "2.14.1"}),
        **machine,
        **tags,
    }
    run = Run(
        RunInfo(run_id, "0", run_id, "FINISHED", 0, 1, "active", run_name=run_id),
        RunData(
            [Metric(k, v, 0, 0) for k, v in metrics.items()],
            [Param(k, v) for k, v in run_params.items()],
            [RunTag(k, v) for k, v in all_tags.items()],
        ),
    )
    return entry(Found(run, None), histories=False)


MOBILENET = ["task=benchmark", "model=mobilenet_v2", "data=synthetic_imagenet", "batch_size=128"]
M1_MAX_GPU = {"hw.chip": "Apple M1 Max", "hw.gpu_cores": "32", "trainbench.backend": "metal"}
H100 = {"hw.gpu": "NVIDIA H100 80GB HBM3", "hw.gpu_memory_gb": "79.6", "trainbench.backend": "cuda"}
A100 = {"hw.gpu": "NVIDIA A100-SXM4-80GB", "trainbench.backend": "cuda"}


def one_table(tables: list[Any], task: str, model: str, metric: str = "samples_per_s") -> Any:
    (found,) = [t for t in tables if (t.task, t.model, t.metric.name) == (task, model, metric)]
    return found


def test_a_224_px_and_a_64_px_run_are_two_rows_and_the_speedup_uses_the_matching_one() -> None:
    """The report once merged these two into "median of 2" and printed the M1 Max at 3.45x instead of ~20.8x."""
    cpu_224 = make_entry("cpu224", [*MOBILENET, "data.image_size=224"], XEON, {"samples_per_s": 16.9})
    cpu_64 = make_entry("cpu64", [*MOBILENET, "data.image_size=64"], XEON, {"samples_per_s": 187.0})
    m1max = make_entry(
        "m1max",
        [*MOBILENET, "data.image_size=224"],
        M1_MAX_GPU,
        {"samples_per_s": 352.0},
        reference="tf-metal",
        framework="tensorflow",
    )
    table = one_table(build_tables([cpu_224, cpu_64, m1max], None, []), "benchmark", "mobilenet_v2")
    assert len(table.rows) == 2
    assert all(len(cell.runs) == 1 for row in table.rows for cell in row.cells.values())
    (row_224,) = [r for r in table.rows if r.settings["trainbench.image_size"] == "224"]
    (row_64,) = [r for r in table.rows if r.settings["trainbench.image_size"] == "64"]
    assert row_224.cells[m1max.column.label].speedup == pytest.approx(352.0 / 16.9)
    assert row_224.columns_differ == "framework: pytorch 2.14 / tensorflow version unknown"
    assert [c.speedup for c in row_64.cells.values()] == [None]  # nothing to compare with: no ratio, no 1.00x


def test_the_default_baseline_is_a_column_with_values_where_devices_meet() -> None:
    """Not the first CPU column when that column is empty wherever two devices meet (every ratio read 1.00x)."""
    alone = make_entry("cpu", [*MOBILENET, "batch_size=32"], XEON, {"samples_per_s": 50.0})
    gpu = make_entry("gpu", MOBILENET, H100, {"samples_per_s": 2000.0})
    published = make_entry("ref", MOBILENET, A100, {"samples_per_s": 1000.0}, reference="paper")
    table = one_table(build_tables([alone, gpu, published], None, []), "benchmark", "mobilenet_v2")
    assert table.baseline == gpu.column
    (met,) = [r for r in table.rows if len(r.cells) == 2]
    assert met.cells[published.column.label].speedup == pytest.approx(1000.0 / 2000.0)


def test_train_and_benchmark_figures_never_share_a_table() -> None:
    train = make_entry("train", ["model=mobilenet_v2", "task.epochs=2"], XEON, {"samples_per_s": 10.0})
    bench = make_entry("bench", MOBILENET, XEON, {"samples_per_s": 30.0})
    tables = build_tables([train, bench], None, [])
    assert {(t.task, len(t.rows)) for t in tables} == {("train", 1), ("benchmark", 1)}


def test_a_published_row_without_a_local_run_says_the_command_that_measures_it() -> None:
    command = "+experiment=mlp_depth_study model.depth=10 device=gpu"
    depth = make_entry(
        "ref",
        shlex.split(command),
        {"hw.chip": "Apple M1", "trainbench.backend": "metal"},
        {"total_time_s": 58.48},
        reference="depth-study",
        framework="tensorflow",
        **{"reference.reproduce": command},
    )
    (row,) = one_table(build_tables([depth], None, []), "train", "mlp_deep", "total_time_s").rows
    assert row.commands == [f"python src/run.py {command}"]
    (cell,) = cells_for(shlex.split(row.commands[0].removeprefix("python src/run.py ")))
    assert setting({k: str(v) for k, v in params(cell.task.prepared(cell)).items()}, {}) == depth.setting
    unreproducible = make_entry("dle", MOBILENET, A100, {"samples_per_s": 938.0}, reference="deeplearningexamples")
    (row,) = one_table(build_tables([unreproducible], None, []), "benchmark", "mobilenet_v2").rows
    assert row.commands == [
        "(no command measures this setting here: deeplearningexamples gives no `reproduce`; its notes say what it ran)"
    ]


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
    import_references(folder, uri)
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
        # These tests set this store's sweeps against the published rows alone; reading results/contributed/
        # by default, as the first screen does, is tested in test_yours.py.
        code = cli.main(["--out", str(out), "--no-contributed", *args])
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
    commands = {command for r in blog for command in r["commands"]}
    assert {
        "python src/run.py +experiment=m1_tensorflow_blog device=cpu",  # the M1 and the i9 CPU rows
        "python src/run.py +experiment=m1_tensorflow_blog device=gpu",
        "python src/run.py +experiment=m1_tensorflow_blog device=gpu precision=tf32",  # the A100 row
    } == commands
    baseline = train["baseline"]
    for row in train["rows"]:
        base = row["cells"].get(baseline)
        for label, cell in row["cells"].items():
            if base is None or len(row["cells"]) == 1 or label == baseline or cell["within_noise"]:  # no claim
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
def test_one_epoch_is_said_in_the_singular_on_the_first_screen_and_in_plot_titles(tmp_path: Path) -> None:
    one_epoch = ["-m", "batch_size=16,32", "data.image_size=8", "model.hidden_sizes=[8]", f"{EPOCHS}=1", QUIET]
    done = invoke(tmp_path, *TINY_DATA, *one_epoch, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("  mlp (train):")]
    assert len(lines) == 2 and all("synthetic 8 px, 64 samples x 1 epoch, bs" in line for line in lines), lines
    out = tmp_path / "report"
    code, _ = make_report({"uri": done.uri}, out)
    assert code == 0
    titles = list(json.loads((out / "throughput.json").read_text()))
    assert titles and all("64 samples x 1 epoch," in title for title in titles), titles
    assert " 1 epochs" not in done.stdout + (out / "report.md").read_text()


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
def test_under_mlflow_run_the_report_goes_into_its_run(store, tmp_path, capsys) -> None:
    """The run `mlflow run -e report` names holds the report, in the experiment `mlflow run` put it in (Default
    when it names none)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store["uri"])
    default = client.get_experiment_by_name("Default").experiment_id
    outer = client.create_run(default, run_name="mlflow-run").info.run_id
    try:
        code, _ = make_report(store, tmp_path / "adopted", "--model", "vgg16", env={"MLFLOW_RUN_ID": outer})
        assert code == 0
        assert f"logged as run {outer} (trainbench.kind=report) in experiment Default of" in capsys.readouterr().out
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
    m1 = "Apple M1 GPU (8 cores)"
    code, data = make_report(store, tmp_path / "m1", "--baseline", m1, "--model", "mlp", "--no-log")
    assert code == 0
    train = table(data, "train", "mlp")
    assert train["baseline"].startswith(f"{m1}: tensorflow, version unknown (metal)")
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


@pytest.mark.slow
def test_a_sweeps_report_opens_with_its_cells_against_every_machine_as_its_first_screen_did(tmp_path) -> None:
    """`python src/report.py --sweep ID` tables the sweep's cells; its opening section sets them against every
    machine that ran their settings, as the sweep's first screen did (2026-11-29: it said "no other machine has
    this setting yet" where the first screen had counted five)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    done = invoke(tmp_path, "-m", "model=mlp", *TINY_DATA, "task.epochs=2", "batch_size=16,32", QUIET)
    assert done.returncode == 0, done.stderr[-2000:]
    client = MlflowClient(done.uri)
    cells = [r for r in runs_in(done.uri) if r.data.tags.get("trainbench.kind") == "cell"]
    sweep = cells[0].data.tags["mlflow.parentRunId"]
    elsewhere = {"hw.gpu": "NVIDIA H100 80GB HBM3", "hw.gpu_count": "1", "trainbench.backend": "cuda"}
    tags = {k: v for k, v in cells[0].data.tags.items() if not k.startswith(("hw.", "mlflow."))} | elsewhere
    other = client.create_run(cells[0].info.experiment_id, tags=tags)
    client.log_batch(
        other.info.run_id,
        metrics=[Metric("samples_per_s", 90_000.0, 0, 0)],
        params=[Param(k, v) for k, v in cells[0].data.params.items()],
    )
    client.set_terminated(other.info.run_id)
    out = tmp_path / "report"
    assert cli.main(["--uri", done.uri, "--sweep", sweep, "--out", str(out), "--no-log", "--no-contributed"]) == 0
    opening = json.loads((out / "report.json").read_text())["standing"]
    assert len(opening) == 2, opening
    (against,) = [s for s in opening if s["setting"] == setting_text_of(cells[0])]
    assert [b["hw_label"] for b in against["bars"] if b["kind"] != "yours"] == ["NVIDIA H100 80GB HBM3"], against


def setting_text_of(run: Any) -> str:
    from trainbench.report.standing import title

    return title(entry(Found(run, None), histories=False))
