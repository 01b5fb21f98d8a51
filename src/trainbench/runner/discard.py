"""`python -m trainbench.runner.discard URI RUN_ID`: delete an empty run once its creator has ended it.

Started detached by trainbench.cli when `mlflow run` handed us bad input: `mlflow run` marks its run
FAILED after our command exits; this waits for that (at most two minutes), then deletes the run if it is
still empty (no metrics, no child runs)."""

from __future__ import annotations

import sys
import time

WAIT_S = 120


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
