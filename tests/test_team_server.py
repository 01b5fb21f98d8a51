"""Team use (docs/team.md): cells and reference imports sent to a shared `mlflow server` over HTTP.

The server here is a real `mlflow server` on loopback, started the way docs/team.md says (SQLite instead
of PostgreSQL, a local folder instead of s3://), with --serve-artifacts so that clients never touch the
artifact store directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TINY, child_env, import_references, runs_in
from servers import free_port
from trainbench.references.loading import load as load_references
from trainbench.references.reading import DEFAULT_CSV

pytestmark = pytest.mark.slow  # a real server and real cells

TEAM_HOST = "mlflow.team.internal"  # the name the machines use for the server, as in docs/team.md


def http_status(url: str, host: str | None = None, timeout: float = 2) -> int | None:
    """The HTTP status of GET url (None when nothing answers); `host` overrides the Host header."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


@contextlib.contextmanager
def mlflow_server(folder: Path, *options: str, store: str | None = None, startup_s: float = 90) -> Iterator[str]:
    """`mlflow server` on a free loopback port for `store` (default: a SQLite store in `folder`); yields its URI.

    The server runs in its own process group (uvicorn is its child), which is stopped on the way out whatever
    happens. MLflow's background job runner (GenAI scorers) is switched off: nothing here uses it, and its
    consumers would cost a 2-core machine seconds at start and linger after SIGTERM.
    """
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    log_path = folder / "server.log"
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        store or f"sqlite:///{folder / 'mlflow.db'}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        *options,
    ]
    with log_path.open("w") as log:
        server = subprocess.Popen(
            command,
            cwd=folder,
            env=child_env({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + startup_s
        while http_status(f"{uri}/health") != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer on {uri}/health:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.25)
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):  # whatever of the group is still there
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=15)


def test_cells_and_references_pool_on_a_shared_server_with_their_artifacts(trainbench, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    server_dir = tmp_path / "server"
    artifacts = tmp_path / "server-artifacts"
    with mlflow_server(
        server_dir,
        "--serve-artifacts",
        "--artifacts-destination",
        str(artifacts),
        "--allowed-hosts",
        f"127.0.0.1:*,localhost:*,{TEAM_HOST}:*",
    ) as uri:
        # A machine that reaches the server by its DNS name is let in only through --allowed-hosts.
        port = uri.rsplit(":", 1)[1]
        search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
        assert http_status(search, host=f"{TEAM_HOST}:{port}") == 200
        assert http_status(search, host=f"not-listed.example:{port}") == 403

        result = trainbench(*TINY, "device=cpu", env={"MLFLOW_TRACKING_URI": uri})
        assert result.returncode == 0, result.stderr[-2000:]

        client = MlflowClient(tracking_uri=uri)
        cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
        assert [r.info.run_name for r in cells] == ["pytorch-mlp-cpu-bs64"]
        cell = cells[0]
        assert cell.info.status == "FINISHED"
        assert cell.data.tags["trainbench.outcome"] == "finished"
        assert cell.data.tags["hw.label"] and cell.data.metrics["samples_per_s"] > 0
        assert len(client.get_metric_history(cell.info.run_id, "epoch_time_s")) == 2

        # Artifacts go through the server (mlflow-artifacts:/...), land in its destination, and come back.
        assert cell.info.artifact_uri.startswith("mlflow-artifacts:")
        assert {"config.yaml", "overrides.txt"} <= {a.path for a in client.list_artifacts(cell.info.run_id)}
        fetched = Path(client.download_artifacts(cell.info.run_id, "config.yaml", str(tmp_path / "fetched")))
        assert "batch_size: 64" in fetched.read_text()
        assert list(artifacts.rglob("config.yaml")), "config.yaml not in the server's --artifacts-destination"
        # ...and nothing was written to a local store of the machine that ran the cell.
        assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()

        # Published figures (or a colleague's CSV) are imported into the same experiment over HTTP.
        import_references(tmp_path, uri)
        kinds = [r.data.tags.get("trainbench.kind") for r in runs_in(uri)]
        published = len(load_references(DEFAULT_CSV))  # one run per reference cell of the shipped CSV
        assert kinds.count("reference") == published and kinds.count("cell") == 1

    # The server is gone: the next cell says so in one line and exits 2, without recording anything anywhere.
    down = trainbench("task.epochs=1", env={"MLFLOW_TRACKING_URI": uri}, timeout=120)
    assert down.returncode == 2
    lines = down.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach the MLflow tracking server {uri}" in lines[0], down.stderr
    assert not (tmp_path / "mlflow.db").exists()
