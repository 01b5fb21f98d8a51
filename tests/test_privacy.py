"""What a sweep shares (docs/privacy.md): no credential of a tracking URI anywhere it writes or prints, and no
absolute path of the project in a failed cell's reason or stderr tail. A real sweep against a real
`mlflow server` (which ignores basic auth), then every byte the server stored and the sweep printed is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT, RUN_PY, TINY, child_env, runs_in
from trainbench.tracking import private, redact

SECRET = "s3cr3tpass"


def files_holding(folder: Path, text: str) -> list[str]:
    needle = text.encode()
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file() and needle in p.read_bytes()]


def test_credentials_are_redacted_wherever_a_uri_appears() -> None:
    assert redact("http://user:pw@host:5000/x") == "http://user:***@host:5000/x"
    assert (
        redact("tracking.uri=http\\://user\\:pw@127.0.0.1\\:5000")
        == "tracking.uri=http\\://user\\:***@127.0.0.1\\:5000"
    )
    assert redact("postgresql+psycopg://mlflow:pw@db/mlflow?sslmode=require&password=pw") == (
        "postgresql+psycopg://mlflow:***@db/mlflow?sslmode=require&password=***"
    )
    assert private(f"{ROOT}/src/run.py and {Path.home()}/.cache/torch") == "./src/run.py and ~/.cache/torch"


def test_the_browse_command_a_sweep_prints_opens_its_store_when_pasted_into_a_shell(tmp_path, monkeypatch) -> None:
    """The closing hint names the store with $HOME, not ~: a shell expands $HOME inside `sqlite:///$HOME/...`,
    while `sqlite:///~/...` would make SQLite open a new, empty store in a folder named `~`."""
    from trainbench.runner.owner import browse_hint

    home = tmp_path / "home"
    store = home / "benchmarks" / "mlflow.db"
    store.parent.mkdir(parents=True)
    uri = f"sqlite:///{store}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("pasted"))
    monkeypatch.setenv("HOME", str(home))

    command = browse_hint(uri).split("`")[1]
    assert str(home) not in command  # the hint names no one's home folder
    pasted = subprocess.run(
        ["bash", "-c", f"printf %s {command.split()[-1]}"], capture_output=True, text=True, check=True
    ).stdout
    assert MlflowClient(pasted).get_run(run.info.run_id).info.run_id == run.info.run_id


@pytest.mark.slow
def test_a_sweep_with_a_password_in_its_uri_stores_and_prints_no_password(mlflow_server_sqlite, tmp_path) -> None:
    server = mlflow_server_sqlite
    uri = server.uri.replace("http://", f"http://trainbench:{SECRET}@")
    sweep_folder = tmp_path / "sweep"
    sweep_folder.mkdir()
    completed = subprocess.run(
        [
            sys.executable,
            str(RUN_PY),
            "-m",
            f"tracking.uri={uri}",
            "debug.inject_fault=raise,null",
            "device=cpu",
            *TINY,
        ],
        cwd=sweep_folder,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 1, completed.stderr[-3000:]  # the `raise` cell failed, the other finished
    assert "trainbench:***@127.0.0.1" in completed.stdout  # the store is named, redacted

    assert SECRET not in completed.stdout and SECRET not in completed.stderr
    assert files_holding(server.folder, SECRET) == []  # the backend database, the served artifacts, the log
    assert files_holding(sweep_folder, SECRET) == []  # whatever the launcher left in the working folder

    client = MlflowClient(server.uri)
    runs = runs_in(server.uri)
    assert len(runs) == 3 and not any(SECRET in str(r.data.params) + str(r.data.tags) for r in runs)
    (failed,) = [r for r in runs if r.data.tags["trainbench.kind"] == "cell" and r.info.status == "FAILED"]
    tail = Path(client.download_artifacts(failed.info.run_id, "stderr_tail.txt", str(tmp_path))).read_text()
    for text in (tail, failed.data.tags["trainbench.reason"]):
        assert str(ROOT) not in text
    assert 'File "./src/trainbench/runner/worker.py"' in tail  # the traceback, relative to the project
