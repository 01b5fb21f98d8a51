"""MLflow plumbing: where the store is, creating runs, closing them with an outcome.

Both processes use MlflowClient with explicit run ids rather than mlflow.start_run(): the parent creates
each cell's run and always closes it, the child only logs into it, and nobody depends on the fluent
API's process-global "active run" (which `mlflow run` pre-sets through MLFLOW_RUN_ID).
Names of params, tags and metrics follow docs/mlflow-schema.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainbench.config import PROJECT_ROOT

# MLflow statuses for our outcomes. `unavailable` is FAILED: the cell produced no figures.
RUN_STATUS = {
    "finished": "FINISHED",
    "failed": "FAILED",
    "unavailable": "FAILED",
    "killed": "KILLED",
    "skipped": "FINISHED",
}
MAX_PARAM_LENGTH = 6000


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written. str() is the one line shown to the user."""


def default_tracking_uri() -> str:
    return f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}"


def resolve_tracking_uri(configured: str | None) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else the project's own SQLite store; local paths absolute.

    Hydra's output folders and `mlflow run` change the working directory: a relative sqlite path or
    folder would then split the runs over several stores.
    """
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///'):]).resolve()}"
    if "://" not in uri:
        return str(Path(uri).resolve())
    return uri


def client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def connect(uri: str) -> Any:
    """A client for `uri`, checked to answer; raises TrackingUnavailable with what to do."""
    # Fail in seconds, not after MLflow's default minutes of retries against a dead server.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        tracking = client(uri)
        tracking.search_experiments(max_results=1)
    except Exception as error:  # MLflow raises many types here: connection, SQL, permission
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise TrackingUnavailable(
            f"cannot reach the MLflow tracking store {uri} ({reason}); start the server, or unset "
            "MLFLOW_TRACKING_URI / tracking.uri to use the project's local store"
        ) from None
    return tracking


def experiment_id(tracking: Any, name: str, uri: str) -> str:
    experiment = tracking.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    artifact_location = None
    if uri == default_tracking_uri():
        # MLflow would put artifacts in ./mlruns of whatever folder the process started in.
        artifact_location = (PROJECT_ROOT / "mlruns" / name).as_uri()
    try:
        return tracking.create_experiment(name, artifact_location=artifact_location)
    except Exception:  # another process created it in between
        return tracking.get_experiment_by_name(name).experiment_id


def params_of(flat_config: Mapping[str, Any]) -> list[Any]:
    from mlflow.entities import Param

    return [Param(key, _param_text(value)) for key, value in flat_config.items()]


def log_params(tracking: Any, run_id: str, params: list[Any]) -> None:
    for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
        tracking.log_batch(run_id, params=params[start : start + 100])


def log_metrics(tracking: Any, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    now = get_current_time_millis()
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, metrics=batch)


def set_tags(tracking: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    batch = [RunTag(k, str(v)) for k, v in tags.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, tags=batch)


def close(tracking: Any, run_id: str, outcome: str, reason: str | None = None) -> None:
    set_tags(tracking, run_id, {"trainbench.outcome": outcome, "trainbench.reason": reason})
    tracking.set_terminated(run_id, RUN_STATUS[outcome])


def git_commit() -> str:
    """The project's commit, with -dirty when the work tree has uncommitted changes."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def installed_packages() -> str:
    """`pip freeze` of the running environment, without running pip (which takes seconds)."""
    from importlib.metadata import distributions

    lines = {f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _git(*args: str) -> str:
    out = subprocess.run(
        ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=10
    )
    return out.stdout.strip()


def _param_text(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= MAX_PARAM_LENGTH else text[: MAX_PARAM_LENGTH - 3] + "..."


def run_name(cfg: Mapping[str, Any], backend: str) -> str:
    """`{framework}-{model}-{backend}-bs{batch_size}`; before the backend is known, the device asked for.
    A matmul cell has no model or batch: `{framework}-matmul_{shape}-{backend}-{precision}`."""
    if cfg["task"]["name"] == "matmul":
        return f"{cfg['framework']['name']}-matmul_{cfg['task']['shape']}-{backend}-{cfg['precision']['name']}"
    return f"{cfg['framework']['name']}-{cfg['model']['name']}-{backend}-bs{cfg['batch_size']}"


class RunLogger:
    """What a cell's process uses to log into the run its parent created (and will close)."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.tracking, self.run_id = client(uri), run_id

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None:
        log_metrics(self.tracking, self.run_id, values, step)

    def tags(self, values: Mapping[str, Any]) -> None:
        set_tags(self.tracking, self.run_id, values)

    def text(self, text: str, artifact_file: str) -> None:
        self.tracking.log_text(self.run_id, text, artifact_file)

    def figure(self, figure: Any, artifact_file: str) -> None:
        self.tracking.log_figure(self.run_id, figure, artifact_file)
