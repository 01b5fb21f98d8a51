"""`python -m trainbench.runner.discard URI RUN_ID`: delete an empty run once its creator has ended it.

Started detached (discard_when_ended) for the run `mlflow run` creates before our command starts, when that run
ends up holding nothing: the input was bad, or `mlflow run` named no experiment and the sweep was recorded in
trainbench's own (trainbench.runner.owner). `mlflow run` ends its run after our command exits (and crashes if it
is gone by then); this waits for that (at most two minutes), then deletes the run if it is still empty (no
metrics, no child runs)."""

from __future__ import annotations

import os
import sys
import time

WAIT_S = 120


def discard_when_ended(uri: str, run_id: str) -> None:
    """Start the detached process that deletes `run_id` once it has ended, if it is empty then."""
    import subprocess

    subprocess.Popen(
        [sys.executable, "-m", "trainbench.runner.discard", uri, run_id],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"},
    )


def main(uri: str, run_id: str) -> int:
    from mlflow.tracking import MlflowClient

    store = MlflowClient(tracking_uri=uri)
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        run = store.get_run(run_id)
        if run.info.status != "RUNNING":
            children = store.search_runs(
                [run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{run_id}'", max_results=1
            )
            if not run.data.metrics and not children:
                store.delete_run(run_id)
            return 0
        time.sleep(0.5)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
