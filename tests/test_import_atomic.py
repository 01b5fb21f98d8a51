"""`trainbench import` under contention and signals: two imports of one file at once, and a SIGTERM or Ctrl-C
in the middle of one, on real SQLite and PostgreSQL stores with the installed command in processes of its own.
A file's runs land whole or not at all, and never twice."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT, TINY, child_env, start_multirun, with_schema
from servers import PostgresCluster, postgres_bin_dir
from trainbench.store.sharing.file_format import IMPORT_ID_TAG

TRAINBENCH = Path(sys.executable).parent / "trainbench"
CONTRIBUTED = ROOT / "results" / "contributed" / "2026-11-26-nvidia-h100-80gb.json"


def many_runs(path: Path, copies: int) -> int:
    """An export file of `copies` times the contributed file's runs, each copy with run ids of its own (parents
    linked within the copy) and no artifacts, so that an import takes long enough to be caught in the middle."""
    document = json.loads(CONTRIBUTED.read_text())
    runs = []
    for _ in range(copies):
        runs += renamed(copy.deepcopy(document["runs"]), lambda i: uuid.uuid4().hex)
    path.write_text(json.dumps({**document, "runs": runs}))
    return len(runs)


def renamed(runs: list[dict], new_id) -> list[dict]:
    """The runs under ids of their own (`new_id(index)`), their parents' and sweeps' links with them, no artifacts."""
    ids = {run["run_id"]: new_id(i) for i, run in enumerate(runs)}
    for run in runs:
        run["run_id"] = ids[run["run_id"]]
        run["parent_run_id"] = ids.get(run["parent_run_id"]) if run["parent_run_id"] else None
        run["tags"] = {
            key: ids.get(value, value) if key.startswith(("mlflow.parent", "trainbench.sweep_run")) else value
            for key, value in run["tags"].items()
            if key != IMPORT_ID_TAG
        }
        run["artifacts"] = {}
    return runs


def start_import(folder: Path, uri: str, file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(TRAINBENCH), "import", str(file), "--uri", uri],
        cwd=folder,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def imported(uri: str) -> list[object]:
    """Every run of the experiment, deleted ones left out, however far along."""
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name("trainbench")
    return [] if found is None else list(client.search_runs([found.experiment_id], max_results=5000))


def import_ids(uri: str) -> list[str]:
    return sorted(str(run.data.tags.get(IMPORT_ID_TAG)) for run in imported(uri))  # type: ignore[attr-defined]


def two_imports_at_once(folder: Path, uri: str, besides: bool = False) -> None:
    """`besides`: the store also holds runs that are not the file's (a sweep's)."""
    file = folder / "runs.json"
    count = many_runs(file, 2)
    first, second = start_import(folder, uri, file), start_import(folder, uri, file)
    for process in (first, second):
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    ids = [i for i in import_ids(uri) if i != "None"] if besides else import_ids(uri)
    assert len(ids) == count, f"{len(ids)} runs for {count}"
    assert len(set(ids)) == count


@pytest.mark.slow
def test_two_imports_of_one_file_at_once_land_its_runs_once_on_sqlite(tmp_path: Path) -> None:
    two_imports_at_once(tmp_path, with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}"))


@pytest.mark.slow
@pytest.mark.skipif(postgres_bin_dir() is None, reason="PostgreSQL is not installed (apt-get install postgresql)")
def test_two_imports_of_one_file_at_once_land_its_runs_once_on_postgresql(tmp_path: Path) -> None:
    with PostgresCluster() as cluster:
        MlflowClient(tracking_uri=cluster.uri).search_experiments()  # the schema, made once before the race
        two_imports_at_once(tmp_path, cluster.uri)


@pytest.mark.slow
@pytest.mark.skipif(postgres_bin_dir() is None, reason="PostgreSQL is not installed (apt-get install postgresql)")
def test_two_imports_beside_a_running_sweep_on_postgresql_land_once_and_the_sweep_finishes(tmp_path: Path) -> None:
    """The team-store case: a sweep records its cells into the same PostgreSQL database, and the same
    experiment, while two colleagues import one file."""
    with PostgresCluster() as cluster:
        MlflowClient(tracking_uri=cluster.uri).search_experiments()  # the schema, made once before the race
        sweep = start_multirun(cluster.uri, tmp_path / "sweep", "seed=0,1", "device=cpu", "model=mlp", *TINY)
        try:
            deadline = time.monotonic() + 120
            while not [r for r in imported(cluster.uri) if r.data.tags.get("trainbench.kind") == "cell"]:  # type: ignore[attr-defined]
                assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[1][-3000:]
                time.sleep(0.2)
            two_imports_at_once(tmp_path, cluster.uri, besides=True)
            out, err = sweep.communicate(timeout=300)
        finally:
            if sweep.poll() is None:
                sweep.kill()
        assert sweep.returncode == 0 and "Traceback" not in err, err[-3000:]
        runs = imported(cluster.uri)
        cells = [r for r in runs if r.data.tags.get("trainbench.kind") == "cell" and IMPORT_ID_TAG not in r.data.tags]  # type: ignore[attr-defined]
        assert [c.data.tags["trainbench.outcome"] for c in cells] == ["finished", "finished"]  # type: ignore[attr-defined]
        assert not [r for r in runs if r.info.status == "RUNNING"]  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_import_leaves_nothing_and_the_next_lands_the_file_whole(tmp_path: Path, sig: int) -> None:
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    file = tmp_path / "runs.json"
    count = many_runs(file, 2)
    process = start_import(tmp_path, uri, file)
    deadline = time.monotonic() + 120
    while not imported(uri):  # the import is in the middle: some runs are there
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 128 + sig, err
    (line,) = err.strip().splitlines()
    assert line.startswith("trainbench: the import was stopped"), line
    assert line.endswith("nothing was imported"), line
    assert imported(uri) == []
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("trainbench")
    assert experiment is not None
    left = client.search_runs([experiment.experiment_id], run_view_type=3, max_results=5000)  # deleted too
    assert [run.info.run_id for run in left if run.info.status == "RUNNING"] == []

    again = start_import(tmp_path, uri, file)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert len(set(import_ids(uri))) == len(import_ids(uri)) == count


@pytest.mark.slow
def test_run_ids_that_hold_an_http_status_import_through_a_server_at_once(tmp_path: Path, mlflow_server_sqlite) -> None:
    """A run id is hex: it can hold "502" or "429". The server's "Run with id=...502... not found" once read as a
    Bad Gateway, and each such run of a file held its import for tracking.outage_s (5 minutes) before it failed."""
    document = json.loads(CONTRIBUTED.read_text())
    holding = ["e8026502104145", "a503b", "0504c", "c429d"]
    renamed(document["runs"], lambda i: (holding[i % 4] + uuid.uuid4().hex)[:32])
    file = tmp_path / "runs.json"
    file.write_text(json.dumps(document))

    began = time.monotonic()
    process = start_import(tmp_path, mlflow_server_sqlite.uri, file)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err
    assert "does not answer" not in err, err
    assert time.monotonic() - began < 60  # the outage wait alone is 300 s a run
    assert len(import_ids(mlflow_server_sqlite.uri)) == len(document["runs"])
