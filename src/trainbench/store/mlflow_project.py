"""The run `mlflow run` creates before our command starts (its id in MLFLOW_RUN_ID).

`mlflow run` prints that run's id as its last line ("Run (ID '...') succeeded" or "failed") and ends the run
itself from our exit status (0: FINISHED, anything else: FAILED), so the run is never deleted: it is where a
user who knows MLflow looks first. When our work is recorded in other runs (the sweep in tracking.experiment,
reference runs, nothing at all when the input was refused), that run is tagged `trainbench.kind=mlflow_run`
with the outcome, the reason and a description that leads to those runs."""

from __future__ import annotations

import os
from typing import Any

from trainbench.store import tracking

RUN_ID_VARIABLE = "MLFLOW_RUN_ID"
KIND = "mlflow_run"
DESCRIPTION_TAG = "mlflow.note.content"  # the run page's Description


def run_id() -> str | None:
    """The id of the run `mlflow run` made for this command, if it started us."""
    return os.environ.get(RUN_ID_VARIABLE) or None


def describe(client: Any, project_run: str, outcome: str, reason: str | None, description: str, **tags: Any) -> None:
    """Tag the run `mlflow run` made with our outcome (it ends the run itself from our exit status)."""
    tracking.set_tags(
        client,
        project_run,
        {
            "trainbench.kind": KIND,
            "trainbench.outcome": outcome,
            "trainbench.reason": reason,
            DESCRIPTION_TAG: description,
            **tags,
        },
    )


def record_refusal(message: str) -> None:
    """Bad input under `mlflow run`: trainbench records nothing of its own; the run `mlflow run` made, which it
    ends FAILED and names, says why."""
    line = f"refused: {message}"
    note("failed", line, f"trainbench {line}\n\nNothing was run or recorded.")


def note(outcome: str, reason: str | None, description: str) -> None:
    """When our command records nothing of its own (bad input, a dry run), the run `mlflow run` made says so.
    Best effort, on the store `mlflow run` has just written to: what happened has been printed already."""
    project_run = run_id()
    if project_run is None:
        return
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=tracking.resolve_tracking_uri(None))
        if client.get_run(project_run).data.tags.get("trainbench.kind"):
            return  # already the sweep's or the report's run: it has its outcome
        describe(client, project_run, outcome, reason, description)
    except Exception:  # noqa: S110  (what happened is on the terminal; this run is a courtesy)
        pass


DEFAULT_EXPERIMENT = "Default"  # where MLflow puts a run whose experiment nobody named


def adopted_run(store: Any, experiment: str) -> str | None:
    """Under `mlflow run`, the run it created: the sweep's parent, in the experiment the user named with
    `mlflow run --experiment-name` (or MLFLOW_EXPERIMENT_NAME). When none was named, `mlflow run` put its run in
    "Default", where `trainbench results`, the report and the comparison view never look: the sweep is then
    recorded in tracking.experiment as any other, and that run is kept, leading to the sweep's
    (trainbench.sweep.owner)."""
    made = run_id()
    if not made:
        return None
    if adoptable(store, made, experiment):
        return made
    print(
        f"trainbench: `mlflow run` named no experiment, so the sweep is recorded in experiment {experiment} "
        f"(tracking.experiment); the run {made} it made in {DEFAULT_EXPERIMENT} gets the sweep's outcome and "
        "a link to the sweep's run (trainbench.sweep_run_id). With `mlflow run --experiment-name NAME` it is the "
        "sweep's run",
        flush=True,
    )
    return None


def adoptable(store: Any, run_id: str, experiment: str) -> bool:
    """Whether the run `mlflow run` made is in an experiment the user named (not MLflow's Default, unless
    tracking.experiment names Default too)."""
    named = store.get_experiment(store.get_run(run_id).info.experiment_id).name
    return bool(named != DEFAULT_EXPERIMENT or experiment == DEFAULT_EXPERIMENT)
