"""The tracking-server test infrastructure itself (tests/servers.py): real `mlflow server` processes over SQLite
and PostgreSQL, real clients, real crashes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, child_env, metric_history
from servers import MlflowServer, group_processes, http_status

pytestmark = pytest.mark.slow

SERVERS = ["mlflow_server_sqlite", "mlflow_server_postgres"]
# What a cell's process would set to ride out a server restart: 5 retries, waits of 0, 4, 8, 16, 32 s (+ jitter).
RETRYING = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "5", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2"}

# A client in its own process: one run, `points` values of metric "loss" (step i, value i / 10), one
# request each, `pause` seconds apart; prints the run id first and "logged i" after each point.
CLIENT = """
import sys, time
from mlflow import MlflowClient
points, pause = int(sys.argv[1]), float(sys.argv[2])
client = MlflowClient()
experiment = client.get_experiment_by_name("servers") or client.get_experiment(client.create_experiment("servers"))
run = client.create_run(experiment.experiment_id)
print(run.info.run_id, flush=True)
for step in range(points):
    client.log_metric(run.info.run_id, "loss", step / 10, step=step)
    print("logged", step, flush=True)
    time.sleep(pause)
client.set_terminated(run.info.run_id)
"""


def start_client(uri: str, points: int, pause: float, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(points), str(pause)],
        env=child_env({"MLFLOW_TRACKING_URI": uri, **(extra_env or {})}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("server_fixture", SERVERS)
def test_a_client_logs_50_points_and_an_artifact_through_the_server(server_fixture, request, tmp_path) -> None:
    from mlflow import MlflowClient

    server: MlflowServer = request.getfixturevalue(server_fixture)
    client = start_client(server.uri, points=50, pause=0)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err[-2000:]
    run_id = out.splitlines()[0]
    assert [(m.step, m.value) for m in metric_history(server.uri, run_id, "loss")] == [(i, i / 10) for i in range(50)]

    # Artifacts go through the server into its folder, never to the client's disk directly.
    mlflow = MlflowClient(server.uri)
    mlflow.log_text(run_id, "batch_size: 64\n", "config.yaml")
    assert mlflow.get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:")
    assert list(server.artifacts.rglob("config.yaml"))
    fetched = Path(mlflow.download_artifacts(run_id, "config.yaml", str(tmp_path)))
    assert fetched.read_text() == "batch_size: 64\n"


# PostgreSQL-backed only: a SQLite-backed server's crash mid-stream is what
# test_tracking_resilience's half-minute outage does to a whole sweep (44 s of CI time saved).
@pytest.mark.parametrize("server_fixture", ["mlflow_server_postgres"])
def test_a_retrying_client_loses_no_point_when_the_server_crashes_and_comes_back(server_fixture, request) -> None:
    server: MlflowServer = request.getfixturevalue(server_fixture)
    points = 30
    client = start_client(server.uri, points=points, pause=0.2, extra_env=RETRYING)
    run_id = client.stdout.readline().strip()
    while not client.stdout.readline().startswith("logged 9"):  # 10 points in, mid-stream
        assert client.poll() is None, client.stderr.read()[-2000:]

    group = server.process.pid
    server.stop(kill=True)  # SIGKILL, as the OOM killer or a power cut would
    assert not group_processes(group), "uvicorn outlived the SIGKILLed server"
    assert http_status(f"{server.uri}/health") is None
    time.sleep(10)  # the client keeps trying to log while the server is down
    assert client.poll() is None, "the client gave up during a 10 s outage"
    server.start()  # same port, same store

    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err[-2000:]
    history = metric_history(server.uri, run_id, "loss")
    assert [m.step for m in history] == list(range(points)), "a point was lost or logged twice"
    assert f"logged {points - 1}\n" in out


def test_four_processes_create_runs_at_once_on_a_fresh_postgres_server(mlflow_server_postgres) -> None:
    """Four sweeps starting together against a new server race to create the experiment through trainbench's
    path (tracking.experiment_id): one experiment, every run in it, none fails. MLflow's own set_experiment loses
    this race under load: a run of it landed in the Default experiment (pytest -n 2, 2026-11-23)."""
    from mlflow import MlflowClient

    start_at = time.time() + 8  # every process imports first, then all go at the same instant
    code = (
        "import sys, time\n"
        "from trainbench.store import tracking\n"
        "store = tracking.open_store(sys.argv[3])\n"
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
        "experiment = tracking.experiment_id(store, 'trainbench', sys.argv[3])\n"
        "run = store.create_run(experiment, run_name=sys.argv[2])\n"
        "store.log_metric(run.info.run_id, 'samples_per_s', 1.0)\n"
        "store.set_terminated(run.info.run_id)\n"
    )
    uri = mlflow_server_postgres.uri
    env = child_env({"PYTHONPATH": str(ROOT / "src")})
    processes = [
        subprocess.Popen([sys.executable, "-c", code, str(start_at), f"cell-{i}", uri], env=env,
                         stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]  # fmt: skip
    errors = [p.communicate(timeout=300)[1] for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0, 0], "\n".join(e[-1500:] for e in errors)

    client = MlflowClient(uri)
    experiments = [e for e in client.search_experiments() if e.name == "trainbench"]
    assert len(experiments) == 1
    runs = client.search_runs([experiments[0].experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"cell-{i}" for i in range(4)]
    assert all(r.info.status == "FINISHED" and r.data.metrics["samples_per_s"] == 1.0 for r in runs)


def test_stopping_a_server_leaves_no_process_even_when_the_test_fails(tmp_path) -> None:
    group = None
    with pytest.raises(ZeroDivisionError), MlflowServer(tmp_path / "server") as server:
        group = server.process.pid
        assert group_processes(group)  # mlflow's CLI and its uvicorn
        1 / 0  # noqa: B018 - a failing test body
    assert group is not None and not group_processes(group)
    assert http_status(f"{server.uri}/health") is None
