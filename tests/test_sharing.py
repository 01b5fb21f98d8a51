"""`trainbench export` / `trainbench import`: runs carried between two real stores as one file, as two machines
without a shared server would. Two real sweeps (one into each store) feed every test; the command is the
installed `trainbench` console script, run in a process of its own."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

import trainbench
from conftest import ROOT, TINY, child_env, invoke, metric_history, runs_in, with_schema
from trainbench.run_description import NOTE_TAG
from trainbench.store.sharing.file_format import DROPPED_TAGS, IMPORT_ID_TAG, IMPORTED_FROM_TAG, LINK_TAGS
from trainbench.store.sharing.importing import read_export
from trainbench.store.sharing.scrubbing import scrub
from trainbench.untrusted import markdown_preformatted

TRAINBENCH = Path(sys.executable).parent / "trainbench"
USER_NAME = "trainbenchtestuser"  # the login name the sweeps and imports run under: it must travel nowhere
GENERIC_HOSTS = {"localhost", "ubuntu", "debian", "linux", "runner"}


@dataclass
class Stores:
    folder: Path
    a: str  # store A: a sweep of 2 cells (3 runs)
    b: str  # store B: a one-cell sweep
    a_file: Path  # `trainbench export` of each
    b_file: Path


def cli(cwd: Path, uri: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `trainbench` command, from `cwd`, with $MLFLOW_TRACKING_URI set to `uri`."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(TRAINBENCH), *args],
        cwd=cwd,
        env=child_env({"MLFLOW_TRACKING_URI": uri, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_store(uri: str, folder: Path) -> str:
    """A copy of a SQLite store (its runs' artifacts stay where the original keeps them)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(uri[len("sqlite:///") :], folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    folder = tmp_path_factory.mktemp("sharing")
    login = {"USER": USER_NAME, "LOGNAME": USER_NAME}
    # data.root (unused by the bundled digits) and tracking.uri put absolute paths of this machine into the
    # runs' params, the sweep's overrides tag and the cells' overrides.txt: the export must carry none of them.
    (folder / "a").mkdir()
    a = invoke(
        folder / "a",
        "-m",
        "model=mlp",
        "device=cpu",
        "data=digits",
        f"data.root={folder}/datasets",
        f"tracking.uri=sqlite:///{folder / 'a' / 'mlflow.db'}",
        *TINY,
        "batch_size=16,32",
        env=login,
    )
    assert a.returncode == 0, a.stderr[-3000:]
    (folder / "b").mkdir()
    b = invoke(folder / "b", "-m", "model=mlp", "device=cpu", *TINY, "batch_size=8", env=login)
    assert b.returncode == 0, b.stderr[-3000:]
    for uri, name in ((a.uri, "a.json"), (b.uri, "b.json")):
        exported = cli(folder, uri, "export", "-o", name, env=login)
        assert exported.returncode == 0, exported.stderr[-3000:]
    return Stores(folder, a.uri, b.uri, folder / "a.json", folder / "b.json")


def by_origin(uri: str) -> dict[str, Any]:
    """The runs of a store by the id they were first recorded under."""
    return {r.data.tags.get(IMPORT_ID_TAG, r.info.run_id): r for r in runs_in(uri)}


def shared_tags(run: Any, new_to_old: dict[str, str]) -> dict[str, str]:
    """A run's tags as an export carries them, with links to other runs in their original ids."""
    tags = {
        k: new_to_old.get(v, v) if k in LINK_TAGS else v
        for k, v in run.data.tags.items()
        if k not in DROPPED_TAGS and not k.startswith("mlflow.source.")
    }
    return {k: v for k, v in tags.items() if k not in (IMPORT_ID_TAG, IMPORTED_FROM_TAG)}


def artifacts(uri: str, run_id: str, folder: Path, path: str | None = None) -> dict[str, str]:
    """Every artifact file of a run (all of trainbench's are text), by its path in the run."""
    client = MlflowClient(uri)
    found = {}
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            found.update(artifacts(uri, run_id, folder, info.path))
        else:
            found[info.path] = Path(client.download_artifacts(run_id, info.path, str(folder))).read_text()
    return found


def test_what_leaves_the_machine_has_no_absolute_path_but_keeps_urls_and_relative_paths() -> None:
    assert scrub(f"{ROOT}/src/run.py, {Path.home()}/.cache/torch") == "./src/run.py, ~/.cache/torch"
    for before, after in (
        ("data.root=/tmp/pytest-1/datasets", "data.root=<path>"),
        ("tracking.uri=sqlite:////mnt/team/mlflow.db", "tracking.uri=sqlite:///<path>"),
        ("file:///Users/alice/mlruns", "file://<path>"),
        ("PYTHONPATH=/opt/a:/home/bob/b", "PYTHONPATH=<path>:<path>"),
        ('File "/private/var/folders/x/y.py", line 3', 'File "<path>", line 3'),
        ("C:\\Users\\alice\\data", "<path>"),
        (
            "http://bob:secret@mlflow.team.internal:5000/api/2.0/runs",
            "http://bob:***@mlflow.team.internal:5000/api/2.0/runs",
        ),
    ):
        assert scrub(before) == after
    for kept in (
        "./src/run.py and results/contributed/x.md",
        "sqlite:///mlflow.db",
        "<title>x</title></p>",
        "1,659 samples/s on 2026/11/26, N/A",
        "no readable RAPL counter under /sys/class/powercap",
    ):
        assert scrub(kept) == kept


@pytest.mark.slow
def test_runs_arrive_whole_and_arrive_once(stores: Stores, tmp_path: Path) -> None:
    target = copy_store(stores.b, tmp_path / "b")
    before = runs_in(target)
    imported = cli(tmp_path, target, "import", str(stores.a_file))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == (
        f"{stores.a_file}: 3 runs imported, 0 already here (experiment trainbench, {target})"
    )

    originals, copies = by_origin(stores.a), by_origin(target)
    assert len(originals) == 3 and len(copies) == len(before) + 3
    new_to_old = {copies[old].info.run_id: old for old in originals}
    for old_id, original in originals.items():
        copy = copies[old_id]
        assert copy.info.run_name == original.info.run_name
        assert (copy.info.status, copy.info.start_time, copy.info.end_time) == (
            original.info.status,
            original.info.start_time,
            original.info.end_time,
        )
        assert copy.data.params == {k: scrub(v) for k, v in original.data.params.items()}
        expected = {k: scrub(v) for k, v in shared_tags(original, {}).items()}
        if NOTE_TAG in expected:  # a description from elsewhere is shown as written: a code block, nothing live
            expected[NOTE_TAG] = markdown_preformatted(expected[NOTE_TAG])
        assert shared_tags(copy, new_to_old) == expected
        assert copy.data.tags[IMPORTED_FROM_TAG].startswith("a.json (exported 20")
        parent = original.data.tags.get("mlflow.parentRunId")
        assert new_to_old.get(copy.data.tags.get("mlflow.parentRunId", "")) == parent  # sweep -> cell links
        assert set(copy.data.metrics) == set(original.data.metrics)
        for key in original.data.metrics:
            assert [(m.step, m.timestamp, m.value) for m in metric_history(target, copy.info.run_id, key)] == [
                (m.step, m.timestamp, m.value) for m in metric_history(stores.a, old_id, key)
            ], key
        mine = artifacts(stores.a, old_id, tmp_path / "original" / old_id)
        assert mine and artifacts(target, copy.info.run_id, tmp_path / "copy" / old_id) == {
            path: scrub(text) for path, text in mine.items()
        }
    assert sum(len(metric_history(stores.a, r.info.run_id, "epoch_time_s")) for r in originals.values()) == 4

    again = cli(tmp_path, target, "import", str(stores.a_file))
    assert again.returncode == 0 and "0 runs imported, 3 already here" in again.stdout
    assert len(runs_in(target)) == len(before) + 3

    # The other way: B's runs into A, A's own runs back into A, and B's store (now holding A's runs too)
    # exported and imported into A: every run is in A once.
    home = copy_store(stores.a, tmp_path / "a")
    assert "1 runs imported" in cli(tmp_path, home, "import", str(stores.b_file)).stdout
    assert "0 runs imported, 3 already here" in cli(tmp_path, home, "import", str(stores.a_file)).stdout
    assert cli(tmp_path, target, "export", "-o", "b-now.json").returncode == 0
    chained = cli(tmp_path, home, "import", "b-now.json")
    assert chained.stdout.strip().endswith(
        f"0 runs imported, {len(before) + 3} already here (experiment trainbench, {home})"
    )
    assert len(runs_in(home)) == 4


@pytest.mark.slow
def test_an_export_names_no_user_no_host_and_no_absolute_path(stores: Stores, tmp_path: Path) -> None:
    recorded = runs_in(stores.a)
    assert any(str(stores.folder) in r.data.params.get("data.root", "") for r in recorded)  # the store holds them
    exported = json.loads(stores.a_file.read_text())
    assert "<path>" in {r["params"].get("data.root") for r in exported["runs"]}  # the whole path, replaced

    needles = [USER_NAME, str(stores.folder), str(stores.folder.parent), str(Path.home()), str(ROOT)]
    host = socket.gethostname()
    if len(host) > 3 and host.lower() not in GENERIC_HOSTS:
        needles.append(host)
    for file in (stores.a_file, stores.b_file):
        content = file.read_bytes()
        assert [n for n in needles if n.encode() in content] == [], file.name

    target = copy_store(stores.b, tmp_path / "b")
    imported = cli(tmp_path, target, "import", str(stores.a_file), env={"USER": USER_NAME, "LOGNAME": USER_NAME})
    assert imported.returncode == 0, imported.stderr
    users = [r.info.user_id for r in runs_in(target) if IMPORT_ID_TAG in r.data.tags]
    assert users == ["unknown"] * 3  # not the importer's login


def broken(document: dict[str, Any], change: str) -> tuple[str, str]:
    """A copy of an export, spoiled one way; and what the refusal must say."""
    spoiled = json.loads(json.dumps(document))
    runs = spoiled["runs"]
    index, cell = next((i, r) for i, r in enumerate(runs, start=1) if r["parent_run_id"])
    where = f"run {index} ({cell['run_name']})"
    if change == "format":
        spoiled["format"] = "mlflow-export-import"
        return json.dumps(spoiled), "not a trainbench export (format 'mlflow-export-import'"
    if change == "metric":
        cell["metrics"]["samples_per_s"].append([3, 1, "abc"])
        points = len(cell["metrics"]["samples_per_s"])
        return json.dumps(spoiled), f"{where}: metric `samples_per_s` point {points}: 'abc' is not a number"
    if change == "parent":
        cell["parent_run_id"] = "f" * 32
        return json.dumps(spoiled), f"{where}: parent_run_id {'f' * 32} is not a run of this file"
    if change == "param key":
        cell["params"]["batch size!"] = "16"
        return json.dumps(spoiled), f"{where}: param key `batch size!`: MLflow allows only letters"
    if change == "reference":
        cell["tags"]["trainbench.kind"] = "reference"
        return json.dumps(spoiled), f"{where}: tag `trainbench.kind` is 'reference': a file holds only cells and sweeps"
    if change == "nan figure":
        cell["metrics"]["samples_per_s"].append([3, 1, "NaN"])
        points = len(cell["metrics"]["samples_per_s"])
        return json.dumps(spoiled), f"{where}: metric `samples_per_s` point {points}: nan is not a measurement"
    assert change == "json"
    return json.dumps(spoiled)[:-40], "not JSON ("


@pytest.mark.slow
def test_a_bad_file_is_refused_with_one_line_and_nothing_written(stores: Stores, tmp_path: Path) -> None:
    uri = copy_store(stores.b, tmp_path / "store")
    client = MlflowClient(uri)

    def contents() -> tuple[list[str], int]:
        experiments = sorted(e.name for e in client.search_experiments())
        return experiments, sum(len(client.search_runs([e.experiment_id])) for e in client.search_experiments())

    before = contents()
    document = json.loads(stores.a_file.read_text())
    for change in ("json", "format", "metric", "parent", "param key", "reference", "nan figure"):
        text, message = broken(document, change)
        (tmp_path / "colleague.json").write_text(text)
        # a good file first: every file is checked before anything is written
        refused = cli(tmp_path, uri, "import", str(stores.a_file), "colleague.json")
        assert refused.returncode == 2, (change, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("trainbench: colleague.json: "), (change, refused.stderr)
        assert message in lines[0] and lines[0].endswith("; nothing was imported"), (change, lines[0])
        assert refused.stdout == "" and contents() == before, change

    untouched = tmp_path / "nowhere" / "mlflow.db"
    untouched.parent.mkdir()
    assert cli(tmp_path, f"sqlite:///{untouched}", "import", "colleague.json").returncode == 2
    assert not untouched.exists()  # the store is not even created


@pytest.mark.slow
def test_a_store_that_fails_mid_import_keeps_none_of_the_runs(stores: Stores, tmp_path: Path) -> None:
    """The store takes the first runs, then cannot hold an artifact (the experiment's artifact folder lies
    under a file): the runs already created are deleted again."""
    document = json.loads(stores.a_file.read_text())
    for run in document["runs"][:-1]:
        run["artifacts"] = {}
    (tmp_path / "partly.json").write_text(json.dumps(document))
    (tmp_path / "a-file").write_text("not a folder")
    uri = copy_store(stores.b, tmp_path / "store")
    MlflowClient(uri).create_experiment("broken", artifact_location=str(tmp_path / "a-file" / "artifacts"))

    failed = cli(tmp_path, uri, "import", "partly.json", "--experiment", "broken")
    assert failed.returncode == 1, failed.stderr
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("trainbench: the import failed at partly.json: run 3 (")
    assert line.endswith("the 3 runs it had created were deleted: nothing was imported")
    assert runs_in(uri, "broken") == []


@pytest.mark.slow
def test_an_export_reads_as_runs_without_a_store(stores: Stores) -> None:
    from mlflow.utils.search_utils import SearchUtils

    exported = read_export(stores.a_file)
    assert exported.experiment == "trainbench" and exported.exported_at.startswith("20")
    assert len(exported.runs) == 3
    cells = SearchUtils.filter(exported.runs, "tags.`trainbench.kind` = 'cell' AND metrics.samples_per_s > 0")
    assert len(cells) == 2
    assert [r.info.run_name for r in SearchUtils.filter(exported.runs, "params.batch_size = '16'")] == [
        "pytorch-mlp-cpu-bs16"
    ]
    (sweep,) = SearchUtils.filter(exported.runs, "tags.`trainbench.kind` = 'sweep'")
    for run in cells:
        assert run.data.tags["mlflow.parentRunId"] == sweep.info.run_id
        assert run.data.tags[IMPORTED_FROM_TAG].startswith("a.json (exported ")
        for key in ("epoch_time_s", "train_loss", "samples_per_s"):
            stored = metric_history(stores.a, run.info.run_id, key)
            assert exported.history(run.info.run_id, key) == [(m.step, m.value) for m in stored]
            assert run.data.metrics[key] == stored[-1].value


@pytest.mark.slow
def test_nan_survives_the_trip_and_infinity_lands_as_mlflow_stores_it(stores: Stores, tmp_path: Path) -> None:
    source = copy_store(stores.b, tmp_path / "source")
    client = MlflowClient(source)
    experiment = client.get_experiment_by_name("trainbench").experiment_id
    run = client.create_run(experiment, tags={"trainbench.kind": "cell"}, run_name="diverged")
    for step, value in enumerate([1.5, math.nan]):
        client.log_metric(run.info.run_id, "train_loss", value, step=step)
    client.set_terminated(run.info.run_id)
    exported = cli(tmp_path, source, "export", "--filter", "attributes.run_name = 'diverged'", "-o", "nan.json")
    assert exported.returncode == 0, exported.stderr
    document = json.loads((tmp_path / "nan.json").read_text())
    assert [p[2] for p in document["runs"][0]["metrics"]["train_loss"]] == [1.5, "NaN"]

    document["runs"][0]["metrics"]["peak"] = [[0, 1, "Infinity"], [1, 2, "-Infinity"]]
    (tmp_path / "nan.json").write_text(json.dumps(document))
    target = copy_store(stores.a, tmp_path / "target")
    assert cli(tmp_path, target, "import", "nan.json").returncode == 0
    copy = by_origin(target)[run.info.run_id]
    loss = [m.value for m in metric_history(target, copy.info.run_id, "train_loss")]
    assert loss[0] == 1.5 and math.isnan(loss[1])
    # MLflow's SQL store keeps infinity as the largest finite double (sys.float_info.max), sign kept
    assert [m.value for m in metric_history(target, copy.info.run_id, "peak")] == [
        sys.float_info.max,
        -sys.float_info.max,
    ]
    assert [v for _, v in read_export(tmp_path / "nan.json").history(run.info.run_id, "peak")] == [math.inf, -math.inf]


@pytest.mark.slow
def test_export_refuses_what_selects_nothing_and_writes_no_file(stores: Stores, tmp_path: Path) -> None:
    for args, message in (
        (["--filter", "metrics.samples_per_s >> 3"], "--filter 'metrics.samples_per_s >> 3': "),
        (["--experiment", "nope"], "no experiment 'nope' in "),
        (["--filter", "metrics.samples_per_s > 1e12"], "matching 'metrics.samples_per_s > 1e12': nothing written"),
    ):
        refused = cli(tmp_path, stores.a, "export", *args, "-o", "out.json")
        assert refused.returncode == 2, (args, refused.stderr)
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("trainbench: ") and message in line, (args, line)
        assert list(tmp_path.iterdir()) == []


CONTRIBUTED = ROOT / "results" / "contributed"
# What a shared file must never hold: absolute paths of the places a checkout or a home lives.
PRIVATE_PATHS = ("/home/", "/Users/", "/root/", "/tmp/", "/private/var/", "/var/folders/", "C:\\Users")


@pytest.mark.parametrize("path", sorted(CONTRIBUTED.glob("*.json")), ids=lambda p: p.name)
def test_every_contributed_file_reads_and_names_no_path_or_person(path: Path) -> None:
    exported = read_export(path)
    cells = [r for r in exported.runs if r.data.tags.get("trainbench.kind") == "cell"]
    assert cells and all(r.data.tags.get("hw.label") and r.data.tags.get("trainbench.backend") for r in cells)
    text = path.read_text()
    assert not [p for p in PRIVATE_PATHS if p in text]
    assert not {"mlflow.user", "trainbench.process"} & {k for r in exported.runs for k in r.data.tags}
    assert path.name in (CONTRIBUTED / "README.md").read_text()  # each file is described there


def test_a_file_checked_before_it_is_shared_is_listed_alone_and_a_contributed_file_never_twice() -> None:
    """`trainbench results FILE` (results/contributed/README.md's check of a new file) shows that file's cells
    alone; asked for results/contributed/ too, a file both named and contributed is read once."""
    files = sorted(CONTRIBUTED.glob("*.json"))
    cells = {
        p: [r.info.run_id for r in read_export(p).runs if r.data.tags.get("trainbench.kind") == "cell"] for p in files
    }
    mine = files[-1]
    alone = trainbench.results(files=[mine])
    assert sorted(row.run_id for row in alone.rows) == sorted(cells[mine])
    everything = trainbench.results(files=[mine], contributed=True)
    assert sorted(row.run_id for row in everything.rows) == sorted(i for ids in cells.values() for i in ids)


COMPILE_MODES = CONTRIBUTED / "2026-11-28-resnet50-compile-modes-nvidia-h200.json"  # one setting, two compile modes
GPU_CHECK = CONTRIBUTED / "2026-11-28-gpu-check-nvidia-h200.json"  # train and benchmark cells of three sweeps


def listed(tmp_path: Path, path: Path) -> trainbench.Results:
    """`trainbench results FILE` as printed, read back through the API that builds it."""
    printed = cli(tmp_path, f"sqlite:///{tmp_path / 'none.db'}", "results", str(path))
    table = trainbench.results(files=[path])
    assert printed.returncode == 0 and printed.stdout.strip() == table.markdown(), printed.stderr
    return table


def test_results_names_a_framework_setting_that_is_not_its_default_as_the_report_does(tmp_path: Path) -> None:
    """compile_mode=max-autotune against auto (the default) of one PyTorch setting: the framework column tells the
    two apart in the report's words, and says nothing of the default."""
    modes = {r.info.run_id: r.data.params.get("framework.compile_mode") for r in read_export(COMPILE_MODES).runs}
    table = listed(tmp_path, COMPILE_MODES)
    said = {"max-autotune": "pytorch 2.11, compiled, compile_mode=max-autotune", "auto": "pytorch 2.11, compiled"}
    assert len(table.rows) == 4 and all(row.values["framework"] == said[modes[row.run_id]] for row in table.rows)


def test_results_shows_a_train_run_s_epoch_cv_beside_a_benchmark_s_step_cv(tmp_path: Path) -> None:
    """A train run's epoch cv (epoch_time_cv_pct) shows beside a benchmark's step cv, under a heading saying so."""
    cells = {r.info.run_id: r for r in read_export(GPU_CHECK).runs if r.data.tags.get("trainbench.kind") == "cell"}
    cv = {i: r.data.metrics.get("step_time_cv_pct", r.data.metrics.get("epoch_time_cv_pct")) for i, r in cells.items()}
    assert {cells[i].data.tags["trainbench.task"] for i, c in cv.items() if c is not None} == {"train", "benchmark"}
    shown = {row.run_id: row.values["step/epoch cv %"] for row in listed(tmp_path, GPU_CHECK).rows}
    assert shown == {i: "" if c is None else f"{c:,.2f}" for i, c in cv.items()}  # skipped cells measured nothing


def test_results_refuses_a_sweep_that_is_no_sweep_run_here_and_records_nothing(tmp_path: Path) -> None:
    """--sweep with no run id, or with a cell's id, an id from nowhere or the id an imported sweep had on its own
    machine: one line saying so and what to give instead, exit 2; a sweep of the store lists its cells."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert cli(tmp_path, uri, "import", str(GPU_CHECK)).returncode == 0
    runs = runs_in(uri)
    sweep, cell = (next(r for r in runs if r.data.tags.get("trainbench.kind") == kind) for kind in ("sweep", "cell"))
    cells = sorted(r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == sweep.info.run_id)
    shown = cli(tmp_path, uri, "results", "--sweep", sweep.info.run_id)
    assert shown.returncode == 0 and cells == sorted(row.split(" | ")[0][2:] for row in shown.stdout.splitlines()[2:])
    elsewhere = sweep.data.tags[IMPORT_ID_TAG]
    for given, said in (
        ("abc", "--sweep 'abc' is not a run id (32 hex digits"),
        (cell.info.run_id, f"--sweep {cell.info.run_id}: no sweep run of that id in experiment 'trainbench' of {uri}"),
        ("0" * 32, f"--sweep {'0' * 32}: no sweep run of that id"),
        (elsewhere, f"--sweep {elsewhere}: that sweep was imported here as {sweep.info.run_id}: give that id"),
    ):
        refused = cli(tmp_path, uri, "results", "--sweep", given)
        assert refused.returncode == 2 and refused.stdout == "", (given, refused.stdout)
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith(f"trainbench: {said}"), (given, line)
    assert [r.info.run_id for r in runs_in(uri)] == [r.info.run_id for r in runs]
    missing = tmp_path / "fresh.db"  # opening a store that is not there yet would create it
    refused = cli(tmp_path, f"sqlite:///{missing}", "results", "--sweep", "abc")
    assert refused.returncode == 2 and "is not a run id" in refused.stderr and not missing.exists()


def test_a_store_in_another_folder_keeps_its_artifacts_beside_it(tmp_path: Path) -> None:
    """Not in the project's mlruns/ (nor wherever the command was started): beside the database."""
    from trainbench.store import tracking

    (tmp_path / "elsewhere").mkdir()
    uri = with_schema(f"sqlite:///{tmp_path / 'elsewhere' / 'mlflow.db'}")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment(tracking.experiment_id(client, "trainbench", uri))
    assert experiment.artifact_location == (tmp_path / "elsewhere" / "mlruns" / "trainbench").as_uri()


HOSTILE = "\x1b]0;owned\x07\x1b[2J<img src=y onerror=alert(1)><svg/onload=alert(2)>"
SECRETS = {
    "tracking.uri": "http://alice:pw1@mlflow.team:5000",
    "note.db": "postgresql://bob:pw2@db.team/mlflow",
    "note.url": "https://h/x?token=tok3&password=pw4",
    "note.env": "MLFLOW_TRACKING_PASSWORD=pw5",
    "note.key": "AKIAIOSFODNN7EXAMPLE",
}


@pytest.mark.slow
def test_a_hostile_file_is_text_on_every_screen_and_its_secrets_land_nowhere(stores: Stores, tmp_path: Path) -> None:
    """Escapes and markup in an imported file's names and tags reach no terminal and no report live; the
    credentials it carries are masked in the store, in a new export, and on screen."""
    document = json.loads(stores.a_file.read_text())
    cell = next(r for r in document["runs"] if r["parent_run_id"])
    cell["run_name"] = f"cell{HOSTILE}"
    cell["tags"]["hw.chip"] = f"Box{HOSTILE}"  # the machine column of every screen and table
    cell["tags"].update(SECRETS)
    cell["params"].update(SECRETS)
    (tmp_path / "hostile.json").write_text(json.dumps(document))
    uri = copy_store(stores.b, tmp_path / "store")
    imported = cli(tmp_path, uri, "import", "hostile.json")
    assert imported.returncode == 0, imported.stderr

    stored = next(r for r in runs_in(uri) if r.info.run_name.startswith("cell") and IMPORT_ID_TAG in r.data.tags)
    stored_text = json.dumps([stored.data.params, stored.data.tags])
    exported = cli(tmp_path, uri, "export", "-o", "again.json")
    assert exported.returncode == 0, exported.stderr
    results = cli(tmp_path, uri, "results")
    assert results.returncode == 0, results.stderr
    report = subprocess.run(
        [sys.executable, str(ROOT / "src" / "report.py"), "--out", str(tmp_path / "out"), "--no-log"],
        cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    markdown = (tmp_path / "out" / "report.md").read_text()

    for screen in (imported, results, report):
        assert "\x1b" not in screen.stdout + screen.stderr and "\x07" not in screen.stdout + screen.stderr
    assert r"cell\\x1b\]0;owned\\x07" in results.stdout  # shown, spelled out, as markdown text
    assert "<img" not in markdown and "<svg" not in markdown and "\x1b" not in markdown
    assert "&lt;img src=y onerror=alert(1)&gt;" in markdown
    for where in (stored_text, (tmp_path / "again.json").read_text(), results.stdout, markdown):
        for secret in ("pw1", "pw2", "tok3", "pw4", "pw5", "AKIAIOSFODNN7EXAMPLE"):
            assert secret not in where, (secret, where[:2000])
    assert "http://alice:***@mlflow.team:5000" in stored_text and "MLFLOW_TRACKING_PASSWORD=***" in stored_text


def one_run_file(tmp_path: Path, metric: str, value_text: str, **run: Any) -> Path:
    """An export file of one run whose metric `metric` has one point of value `value_text` (JSON as written)."""
    record = {"run_id": "a" * 32, "run_name": "forged", "status": "FINISHED", "start_time": 1, "end_time": 2,
              "parent_run_id": None, "params": {}, "tags": {}, "metrics": {metric: [[0, 1, "@VALUE@"]]},
              "artifacts": {}, **run}  # fmt: skip
    document = {"format": "trainbench-export", "version": 1, "exported_at": "now", "experiment": "x", "runs": [record]}
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(document).replace('"@VALUE@"', value_text))
    return path


@pytest.mark.parametrize(
    ("metric", "value", "run", "named"),
    [
        ("samples_per_s", '"NaN"', {}, "metric `samples_per_s` point 1: nan is not a measurement"),
        ("samples_per_s", '"Infinity"', {}, "metric `samples_per_s` point 1: inf is not a measurement"),
        ("samples_per_s", "1e308", {}, "metric `samples_per_s` point 1: 1e+308 is not a measurement"),
        ("samples_per_s", "-5", {}, "metric `samples_per_s` point 1: -5 is not a measurement"),
        ("train_loss", "1" + "0" * 400, {}, "metric `train_loss` point 1: an integer of 401 digits"),
        ("train_loss", "1e305", {}, "metric `train_loss` point 1: 1e+305 is beyond the largest value"),
        ("train_loss", "1", {"start_time": 2**70}, "start_time 1180591620717411303424 is larger than a store holds"),
        (
            "train_loss",
            "1",
            {"metrics": {"train_loss": [[2**64, 1, 1.0]]}},
            "metric `train_loss` point 1: step 18446744073709551616",
        ),
    ],
)
def test_values_no_measurement_gives_are_refused_naming_run_and_metric(tmp_path, metric, value, run, named) -> None:
    from trainbench.store.sharing.file_format import SharingError, load

    with pytest.raises(SharingError) as refused:
        load(one_run_file(tmp_path, metric, value, **run))
    assert f"forged.json: run 1 (forged): {named}" in str(refused.value)


def test_a_deeply_nested_file_is_refused_not_a_traceback(tmp_path) -> None:
    from trainbench.store.sharing.file_format import SharingError, load

    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SharingError, match="nested deeper"):
        load(tmp_path / "deep.json")


def test_a_diverged_loss_still_imports_as_nan(tmp_path) -> None:
    from trainbench.store.sharing.file_format import load

    assert math.isnan(load(one_run_file(tmp_path, "train_loss", '"NaN"')).runs[0].metrics["train_loss"][0][2])


@pytest.mark.slow  # the module's stores; the command three times (~8 s)
def test_the_python_api_returns_what_the_commands_print(stores: Stores, tmp_path: Path) -> None:
    """trainbench.import_runs, results and export do the subcommands' work: each command prints what they return."""
    target = copy_store(stores.b, tmp_path / "b")
    (done,) = trainbench.import_runs([stores.a_file], tracking_uri=target)
    assert (done.path, done.imported, done.already_here) == (stores.a_file, 3, 0)
    again = cli(tmp_path, target, "import", str(stores.a_file))
    assert again.stdout.strip() == f"{done.name}: 0 runs imported, 3 already here (experiment trainbench, {target})"

    table = trainbench.results(target, contributed=False)
    cells = {r.info.run_id: r for r in runs_in(target) if r.data.tags.get("trainbench.kind") == "cell"}
    assert sorted(row.run_id for row in table.rows) == sorted(cells)
    for row in table.rows:
        run = cells[row.run_id]
        assert (row.name, row.outcome) == (run.info.run_name, "finished") == (row.values["cell"], row.values["outcome"])
        assert row.samples_per_s == run.data.metrics["samples_per_s"]
    listed = cli(tmp_path, target, "results", "--no-contributed")
    assert listed.returncode == 0 and listed.stdout.strip() == table.markdown()

    exported = trainbench.export(tmp_path / "both.json", tracking_uri=target)
    assert (exported.runs, exported.cells, exported.unfinished) == (len(runs_in(target)), len(cells), 0)
    assert json.loads((tmp_path / "both.json").read_text())["runs"]
    printed = cli(tmp_path, target, "export", "-o", "again.json")
    assert printed.stdout.startswith(
        f"exported {exported.runs} runs ({exported.cells} cells, {exported.sweeps} sweeps)"
    )

    missing = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(trainbench.BadInput, match="nothing to export"):
        trainbench.export(tmp_path / "none.json", tracking_uri=missing)
    with pytest.raises(trainbench.BadInput, match="no experiment 'nosuch'"):
        trainbench.results(target, experiment="nosuch")
    assert not (tmp_path / "none.json").exists() and not (tmp_path / "none.db").exists()
