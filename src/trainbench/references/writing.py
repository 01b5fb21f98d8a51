"""Writing reference runs into MLflow: importing the same figures again changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.references.mapping import ReferenceRun
from trainbench.store import tracking
from trainbench.store.runs import search_all

REFERENCES = "tags.`trainbench.kind` = 'reference'"


@dataclass(frozen=True)
class ImportSummary:
    created: int
    replaced: int
    unchanged: int
    removed: int = 0


def write(runs: list[ReferenceRun], client: Any, experiment_id: str) -> ImportSummary:
    """Create each reference run unless an identical one exists; replace (delete, create) a changed one.

    The file is the truth for the sources it names: a run of one of those sources that matches none of its
    reference cells (a figure taken out, or one whose identity was corrected) is deleted. Runs of other
    sources (a colleague's file) are left alone."""
    existing: dict[str, list[Any]] = {}
    for old in search_all(client, [experiment_id], REFERENCES):
        existing.setdefault(old.data.tags.get("reference.key", ""), []).append(old)
    removed = remove_stale(client, existing, runs)
    created = replaced = unchanged = 0
    for run in runs:
        previous = existing.get(run.key, [])
        if len(previous) == 1 and previous[0].data.tags.get("reference.content_hash") == run.content_hash:
            unchanged += 1
            continue
        for old in previous:
            client.delete_run(old.info.run_id)
        replaced += bool(previous)
        created += not previous
        create(run, client, experiment_id)
    return ImportSummary(created, replaced, unchanged, removed)


def remove_stale(client: Any, existing: dict[str, list[Any]], runs: list[ReferenceRun]) -> int:
    sources = {run.tags["reference.source"] for run in runs}
    keys = {run.key for run in runs}
    stale = [
        old
        for key, olds in existing.items()
        if key not in keys
        for old in olds
        if old.data.tags.get("reference.source") in sources
    ]
    for old in stale:
        client.delete_run(old.info.run_id)
    return len(stale)


def create(run: ReferenceRun, client: Any, experiment_id: str) -> str:
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    new = client.create_run(
        experiment_id, run_name=run.name, tags={**run.tags, "reference.content_hash": run.content_hash}
    )
    now = get_current_time_millis()
    client.log_batch(new.info.run_id, metrics=[Metric(name, value, now, step) for name, value, step in run.metrics])
    tracking.log_params(client, new.info.run_id, run.params)
    # trainbench.outcome=finished is among the tags already: tracking.close would only write it again.
    client.set_terminated(new.info.run_id, tracking.RUN_STATUS["finished"])
    return new.info.run_id
