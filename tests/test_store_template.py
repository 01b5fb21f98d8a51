"""A new local store is a copy of MLflow's empty migrated schema, made once per MLflow version in the user's cache
(trainbench.store_template): MLflow takes the copy as its own store, runs no migration on it, creates its default
experiment where it would, and a store that exists is never written over. Real MLflow, real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench import store_template, tracking

CREATING = "creating MLflow's empty store schema once"


def alembic_version(database: Path) -> str:
    with sqlite3.connect(database) as connection:
        return connection.execute("select version_num from alembic_version").fetchone()[0]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(store_template.SWITCH, raising=False)
    return tmp_path / "cache" / "trainbench"


def test_new_stores_are_copies_of_one_schema_made_once_and_mlflow_uses_them_as_its_own(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    tracking.open_store(f"sqlite:///{first}")
    assert CREATING in capsys.readouterr().err  # the one time a machine pays MLflow's migrations, said
    tracking.open_store(f"sqlite:///{second}")
    assert CREATING not in capsys.readouterr().err  # the second new store is a copy: no migration ran

    (template,) = cache.glob("mlflow-schema-*.db")
    assert alembic_version(first) == alembic_version(second) == alembic_version(template)
    client = MlflowClient(f"sqlite:///{second}")
    default = client.get_experiment("0")  # MLflow's default experiment, made by MLflow for this store
    assert default.name == "Default" and default.artifact_location == str(tmp_path / "mlruns" / "0")
    experiment = client.create_experiment("mine")
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "samples_per_s", 12.5)
    client.set_terminated(run.info.run_id)
    (found,) = client.search_runs([experiment])
    assert found.data.metrics == {"samples_per_s": 12.5} and found.info.status == "FINISHED"


def test_a_store_that_exists_is_never_written_over(cache: Path, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mine.db'}"
    client = tracking.open_store(uri)
    run = client.create_run(client.create_experiment("kept"))
    assert store_template.create_from_template(tmp_path / "mine.db") is False
    assert tracking.open_store(uri).get_run(run.info.run_id).info.run_id == run.info.run_id


def test_a_damaged_template_is_made_again(cache: Path, tmp_path: Path) -> None:
    tracking.open_store(f"sqlite:///{tmp_path / 'first.db'}")
    (template,) = cache.glob("mlflow-schema-*.db")
    template.write_bytes(template.read_bytes()[:4096])  # cut short, as by a full disk
    client = tracking.open_store(f"sqlite:///{tmp_path / 'second.db'}")
    assert client.search_experiments()[0].name == "Default"
    assert alembic_version(tmp_path / "second.db") == alembic_version(template)


def test_a_cache_that_cannot_be_written_leaves_the_new_store_to_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_folder))
    client = tracking.open_store(f"sqlite:///{tmp_path / 'mine.db'}")
    run = client.create_run(client.create_experiment("mine"))
    assert client.get_run(run.info.run_id).info.status == "RUNNING"


def test_the_runs_record_of_installed_packages_is_pip_freezes_list_of_this_environment() -> None:
    """Read from the top of each package's metadata file (fast), the same names and versions as its full parse."""
    from importlib.metadata import distributions

    parsed = {f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]}
    recorded = tracking.installed_packages()
    assert recorded.endswith("\n") and set(recorded.splitlines()) == parsed
    assert "mlflow==" + __import__("mlflow").__version__ in recorded.splitlines()
