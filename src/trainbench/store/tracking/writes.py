"""Writing into a run: params, metrics and tags in MLflow's batches, values redacted and cut to MLflow's limits, and
closing a run with its outcome. Names of params, tags and metrics follow docs/mlflow-schema.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainbench import untrusted
from trainbench.store.tracking.outage import client
from trainbench.store.tracking.redaction import private

# MLflow statuses for our outcomes. `unavailable` is FAILED: the cell produced no figures.
RUN_STATUS = {
    "finished": "FINISHED",
    "failed": "FAILED",
    "unavailable": "FAILED",
    "killed": "KILLED",
    "hung": "FAILED",
    "lost": "FAILED",
    "skipped": "FINISHED",
}
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 5000


def log_params(tracking: Any, run_id: str, params: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    batch = [Param(key, _text(value, MAX_PARAM_LENGTH, key)) for key, value in params.items()]
    for start in range(0, len(batch), 100):  # MLflow takes at most 100 params per batch
        tracking.log_batch(run_id, params=batch[start : start + 100])


def log_metrics(tracking: Any, run_id: str, metrics: Mapping[str, float | None], step: int = 0) -> None:
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    now = get_current_time_millis()
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, metrics=batch)


def set_tags(tracking: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    batch = [RunTag(k, _text(v, MAX_TAG_LENGTH, k)) for k, v in tags.items() if v is not None]
    if batch:
        tracking.log_batch(run_id, tags=batch)


def close(tracking: Any, run_id: str, outcome: str, reason: str | None = None) -> None:
    """Record the outcome and end the run. The end is attempted even when the tags cannot be written."""
    try:
        set_tags(tracking, run_id, {"trainbench.outcome": outcome, "trainbench.reason": reason})
    finally:
        tracking.set_terminated(run_id, RUN_STATUS[outcome])


def _text(value: Any, limit: int, name: str = "") -> str:
    """A param or tag value as recorded: secrets masked (the whole value where `name` is a secret's), paths
    shortened, cut to MLflow's limit."""
    text = private(untrusted.redact_value(name, "null" if value is None else str(value)))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RunLogger:
    """Logs into one run that someone else created (and will close)."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.tracking, self.run_id = client(uri), run_id

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None:
        log_metrics(self.tracking, self.run_id, values, step)

    def tags(self, values: Mapping[str, Any]) -> None:
        set_tags(self.tracking, self.run_id, values)

    def params(self, values: Mapping[str, Any]) -> None:
        log_params(self.tracking, self.run_id, values)

    def text(self, text: str, artifact_file: str) -> None:
        self.tracking.log_text(self.run_id, private(text), artifact_file)

    def figure(self, figure: Any, artifact_file: str) -> None:
        self.tracking.log_figure(self.run_id, figure, artifact_file)


class NullLog:
    """Logs nothing: the probes of batch_size=max, and data-parallel ranks other than 0."""

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None: ...

    def tags(self, values: Mapping[str, Any]) -> None: ...

    def params(self, values: Mapping[str, Any]) -> None: ...

    def text(self, text: str, artifact_file: str) -> None: ...

    def figure(self, figure: Any, artifact_file: str) -> None: ...
