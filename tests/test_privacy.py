"""What a sweep shares (docs/privacy.md): no credential of a tracking URI anywhere it writes or prints, and no
absolute path of the project in a failed cell's reason or stderr tail. A real sweep against a real
`mlflow server` (which ignores basic auth), then every byte the server stored and the sweep printed is read."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT, RUN_PY, TINY, child_env, runs_in, with_schema
from trainbench.runner.in_cell import INJECT_FAULT_ENV
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
    from trainbench.runner.summary import browse_hint

    home = tmp_path / "home"
    store = home / "benchmarks" / "mlflow.db"
    store.parent.mkdir(parents=True)
    uri = with_schema(f"sqlite:///{store}")
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("pasted"))
    monkeypatch.setenv("HOME", str(home))

    command = browse_hint(uri).split("`")[1]
    assert str(home) not in command  # the hint names no one's home folder
    pasted = subprocess.run(
        ["bash", "-c", f"printf %s {command.split()[-1]}"], capture_output=True, text=True, check=True
    ).stdout
    assert MlflowClient(pasted).get_run(run.info.run_id).info.run_id == run.info.run_id


def test_the_browse_hint_sends_the_reader_on_to_the_comparison_links(tmp_path) -> None:
    """`mlflow ui` alone opens MLflow's home page: the hint beside it must name the printed links (the sweep
    prints them as `Browse: URL` and `Side by side in MLflow: ...`) that open the runs and the compare view."""
    from trainbench import tracking
    from trainbench.runner.owner import browse_hint

    for uri in (tracking.default_tracking_uri(), f"sqlite:///{tmp_path / 'mlflow.db'}", "http://team:5000"):
        hint = browse_hint(uri)
        assert "Browse link" in hint and "Side by side link" in hint, hint


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
            "seed=0,1",
            "device=cpu",
            *TINY,
        ],
        cwd=sweep_folder,
        env=child_env({INJECT_FAULT_ENV: "1:raise"}),
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


def test_whatever_a_process_prints_after_quiet_logs_names_no_password(tmp_path) -> None:
    """Log records of any logger through handlers made before or after (MLflow makes its own), their
    tracebacks, print() and warnings: all redacted, in a process of its own (it changes the process's streams)."""
    script = f"""
import logging, sys, warnings
early = logging.StreamHandler(sys.stderr)  # made before: MLflow and Hydra make theirs when they load
logging.getLogger("mlflow.system_metrics").addHandler(early)
from trainbench.tracking import quiet_logs
quiet_logs()
uri = "http://trainbench:{SECRET}@127.0.0.1:5000"
logging.getLogger("mlflow.system_metrics").warning("Failed to log system metrics: API request to %s/api failed", uri)
logging.getLogger("urllib3.connectionpool").warning(f"Retrying {{uri}}")
try:
    raise ConnectionError(f"API request to {{uri}} failed")
except ConnectionError:
    logging.getLogger("mlflow").exception("while logging")
print(f"uri: {{uri}}")
warnings.warn(f"insecure request to {{uri}}")
raise RuntimeError(f"cannot reach {{uri}}")
"""
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=child_env({"PYTHONPATH": str(ROOT / "src")}),  # this checkout's trainbench, not the installed one
        capture_output=True,
        text=True,
        timeout=60,
    )
    printed = completed.stdout + completed.stderr
    assert completed.returncode == 1 and "RuntimeError: cannot reach http://trainbench:***@127.0.0.1" in printed
    assert printed.count("trainbench:***@") == 6, printed  # each of the six, redacted
    assert SECRET not in printed


def stored_system_points(database: Path) -> int:
    """System-metric points in a server's SQLite file, read directly (no HTTP: it works while the server is down)."""
    if not database.exists():
        return 0
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as connection:
        try:
            return connection.execute("select count(*) from metrics where key like 'system/%'").fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


@pytest.mark.slow
def test_a_server_outage_prints_no_password_from_any_process_of_the_sweep(tmp_path, migrated_store) -> None:
    """MLflow's system-metrics monitor says `API request to <the URI> failed` every second while the server is
    down, in each job's process (here two joblib workers); urllib3 and MLflow log their own failures."""
    from servers import MlflowServer, kill_group

    (tmp_path / "server").mkdir()
    database = tmp_path / "server" / "mlflow.db"
    shutil.copy(migrated_store, database)
    with MlflowServer(tmp_path / "server", f"sqlite:///{database}") as server:
        uri = server.uri.replace("http://", f"http://trainbench:{SECRET}@")
        sweep = subprocess.Popen(
            [sys.executable, str(RUN_PY), "-m", f"tracking.uri={uri}", "hydra/launcher=joblib",
             "hydra.launcher.n_jobs=2", "seed=0,1", "device=cpu",
             "tracking.system_metrics_interval_s=1", "sweep.heartbeat_s=1"],
            cwd=tmp_path,
            env=child_env(
                {INJECT_FAULT_ENV: "sleep", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
            ),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while stored_system_points(database) < 4:  # both cells' monitors write
                assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[1][-3000:]
                time.sleep(0.2)
            server.stop(kill=True)
            time.sleep(3)  # a few failed writes of system metrics and heartbeats
            sweep.send_signal(signal.SIGTERM)
            out, err = sweep.communicate(timeout=120)
        finally:
            kill_group(sweep, signal.SIGKILL, grace_s=5)
    assert sweep.returncode == 143, err[-3000:]
    assert f"API request to http://trainbench:***@127.0.0.1:{server.port}/" in err  # the failures were printed
    assert SECRET not in out and SECRET not in err


@pytest.mark.slow
def test_the_composed_config_printed_by_cfg_names_no_password(tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, str(RUN_PY), "--cfg", "job", f"tracking.uri=http://user:{SECRET}@host:5000"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "uri: http://user:***@host:5000" in completed.stdout
    assert SECRET not in completed.stdout + completed.stderr
