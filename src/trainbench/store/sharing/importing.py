"""Importing checked export files into a store, all or nothing and idempotent; and an export file read as MLflow runs
without a store (`read_export`, which `trainbench report` and `compare` read like a store).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainbench.run_description import NOTE_TAG
from trainbench.store.import_guard import ImportStopped, StopRequests
from trainbench.store.runs import SETTING_NAME_TAG, search_all, setting_name
from trainbench.store.sharing.exporting import active_run
from trainbench.store.sharing.file_format import (
    DROPPED_TAG_PREFIXES,
    DROPPED_TAGS,
    ENTITIES_PER_BATCH,
    IMPORT_ID_TAG,
    IMPORTED_FROM_TAG,
    LINK_TAGS,
    MAX_TAG_LENGTH,
    METRICS_PER_BATCH,
    PARAMS_PER_BATCH,
    PARENT_TAG,
    TAGS_PER_BATCH,
    UNFINISHED,
    ExportFile,
    RunRecord,
    limited,
    load,
)
from trainbench.store.sharing.scrubbing import scrubbed_line
from trainbench.untrusted import markdown_preformatted


@dataclass
class Exported:
    """The runs of an export file as MLflow Run entities, without a store: SearchUtils.filter works on
    `.runs`, and `.history` gives what client.get_metric_history would. Run ids are those in the file; each run's
    tags are those an import would give it (IMPORTED_FROM_TAG, IMPORT_ID_TAG, and mlflow.parentRunId where it
    has a parent)."""

    experiment: str
    exported_at: str
    runs: list[Any]
    _histories: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict, repr=False)

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of every point of the metric, by step (a metric the run lacks: empty)."""
        return list(self._histories.get((run_id, key), []))


def read_export(path: str | os.PathLike[str]) -> Exported:
    """An export file's runs, checked as `trainbench import` checks them; raises SharingError (one line)."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    exported = load(path)
    runs: list[Any] = []
    histories: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for record in exported.runs:
        tags = {**_imported_tags(record, exported), "mlflow.runName": record.run_name}
        if record.parent_run_id:
            tags[PARENT_TAG] = record.parent_run_id
        latest = []
        for key, points in record.metrics.items():
            ordered = sorted(points, key=lambda p: (p[0], p[1]))
            histories[(record.run_id, key)] = [(step, value) for step, _, value in ordered]
            if ordered:
                step, timestamp, value = ordered[-1]
                latest.append(Metric(key, value, timestamp, step))
        info = RunInfo(
            run_id=record.run_id,
            experiment_id="",  # no store: the file's experiment is Exported.experiment
            user_id="unknown",
            status=record.status,
            start_time=record.start_time,
            end_time=record.end_time,
            lifecycle_stage="active",
            run_name=record.run_name,
        )
        data = RunData(
            metrics=latest,
            params=[Param(k, v) for k, v in record.params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        runs.append(Run(info, data))
    return Exported(exported.experiment, exported.exported_at, runs, histories)


def _imported_tags(record: RunRecord, exported: ExportFile) -> dict[str, str]:
    """The record's tags as an import writes them (without the parent link, which the store's ids decide)."""
    tags = {k: v for k, v in record.tags.items() if k not in DROPPED_TAGS and not k.startswith(DROPPED_TAG_PREFIXES)}
    tags[IMPORT_ID_TAG] = record.key
    tags[IMPORTED_FROM_TAG] = limited(exported.origin, MAX_TAG_LENGTH)
    if NOTE_TAG in tags:  # Markdown MLflow's UI renders at the top of the run's page: nothing of it live
        tags[NOTE_TAG] = markdown_preformatted(tags[NOTE_TAG], MAX_TAG_LENGTH)
    if tags.get("trainbench.kind") in ("cell", "reference"):  # files exported before the tag existed
        tags.setdefault(SETTING_NAME_TAG, setting_name(tags, record.params))
    return tags


@dataclass
class ImportSummary:
    imported: int
    already_here: int


class ImportFailed(RuntimeError):
    """The store failed part-way; the runs this import had created were deleted (or could not be). str(): one line."""


def import_files(
    client: Any, experiment_id: str, files: Sequence[ExportFile], stops: StopRequests | None = None
) -> list[ImportSummary]:
    """Write the runs of checked files into the experiment, parents first, skipping runs already here. All or
    nothing: when the store fails part-way, or a stop comes (`stops`, asked between store calls), every run
    created so far is deleted and ImportFailed raised. The caller holds the store's import lock (import_guard)."""
    stops = stops or StopRequests()
    created: list[str] = []
    where = ""
    try:
        here = {
            run.data.tags[IMPORT_ID_TAG]: run.info.run_id
            # LIKE '%': every run with the tag, in any MLflow's search syntax (IS NOT NULL is recent)
            for run in search_all(client, [experiment_id], f"tags.`{IMPORT_ID_TAG}` LIKE '%'")
        }
        summaries = []
        for exported in files:
            summary = ImportSummary(0, 0)
            new_ids: dict[str, str] = {}  # the file's run ids -> ids in this store
            for record in _parents_first(exported.runs):
                where = f"{exported.name}: run {record.index} ({record.run_name})"
                stops.check()
                existing = here.get(record.key) or _existing(client, record.key)
                if existing:
                    new_ids[record.run_id] = existing
                    summary.already_here += 1
                    continue
                run_id = _create(client, experiment_id, record, exported, new_ids, created, stops)
                new_ids[record.run_id] = here[record.key] = run_id
                summary.imported += 1
            summaries.append(summary)
        return summaries
    except (Exception, KeyboardInterrupt, ImportStopped) as error:
        raise ImportFailed(_rolled_back(client, created, where, error)) from error


def _parents_first(runs: list[RunRecord]) -> list[RunRecord]:
    by_id = {r.run_id: r for r in runs}

    def depth(run: RunRecord) -> int:
        return 0 if run.parent_run_id is None else 1 + depth(by_id[run.parent_run_id])  # no loops: checked

    return sorted(runs, key=depth)


def _existing(client: Any, key: str) -> str | None:
    """The run's own id, when the run lives in this store (an export imported back where it came from)."""
    found = active_run(client, key)
    return found.info.run_id if found is not None else None


def _create(
    client: Any,
    experiment_id: str,
    record: RunRecord,
    exported: ExportFile,
    new_ids: Mapping[str, str],
    created: list[str],
    stops: StopRequests,
) -> str:
    """One run, as recorded. Its `trainbench.kind` and import id come last, once the run is complete and
    closed: until then no sweep's check for vanished runs (trainbench.sweep.liveness) takes it for a cell whose
    process died, and an import cut short leaves no run that a later import would take as already here."""
    from mlflow.entities import Metric, Param, RunTag

    tags = _imported_tags(record, exported)
    for key in LINK_TAGS:
        if tags.get(key) in new_ids:
            tags[key] = new_ids[tags[key]]
    last = {key: tags.pop(key) for key in ("trainbench.kind", IMPORT_ID_TAG) if key in tags}
    # No `mlflow.user` among them (DROPPED_TAGS): MlflowClient.create_run then records the user `unknown`, never the
    # importer's login (the fluent mlflow.start_run would).
    first: dict[str, str] = {}
    if record.parent_run_id:
        first[PARENT_TAG] = new_ids[record.parent_run_id]
    run = client.create_run(experiment_id, start_time=record.start_time, tags=first, run_name=record.run_name)
    run_id = str(run.info.run_id)
    created.append(run_id)
    params = [Param(k, v) for k, v in record.params.items()]
    metrics = [
        Metric(key, value, timestamp, step)
        for key, points in record.metrics.items()
        for step, timestamp, value in points
    ]
    for batch in _batches(params, metrics, [RunTag(k, v) for k, v in tags.items()]):
        stops.check()
        client.log_batch(run_id, params=batch[0], metrics=batch[1], tags=batch[2])
    if record.artifacts:
        with tempfile.TemporaryDirectory(prefix="trainbench-import-") as folder:
            for path, data in record.artifacts.items():
                target = Path(folder, *path.split("/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            client.log_artifacts(run_id, folder)
    stops.check()  # the last point to stop: from here on the run is closed and tagged as imported
    if record.status in UNFINISHED:
        client.update_run(run_id, status=record.status)
    else:
        # A finished run without an end time (never seen from MLflow) gets its start: not the import's time.
        end = record.end_time if record.end_time is not None else record.start_time
        client.set_terminated(run_id, record.status, end_time=end)
    _log_tags(client, run_id, last)
    return run_id


def _batches(params: list[Any], metrics: list[Any], tags: list[Any]) -> Any:
    """(params, metrics, tags) slices that fill each log_batch within MLflow's limits, per kind and in all:
    a store's round trips, not its rows, are what an import of many small runs spends its time on."""
    while params or metrics or tags:
        batch_params, params = params[:PARAMS_PER_BATCH], params[PARAMS_PER_BATCH:]
        batch_tags, tags = tags[:TAGS_PER_BATCH], tags[TAGS_PER_BATCH:]
        room = min(METRICS_PER_BATCH, ENTITIES_PER_BATCH - len(batch_params) - len(batch_tags))
        batch_metrics, metrics = metrics[:room], metrics[room:]
        yield batch_params, batch_metrics, batch_tags


def _log_tags(client: Any, run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    batch = [RunTag(k, v) for k, v in tags.items()]
    for start in range(0, len(batch), TAGS_PER_BATCH):
        client.log_batch(run_id, tags=batch[start : start + TAGS_PER_BATCH])


def _rolled_back(client: Any, created: list[str], where: str, error: BaseException) -> str:
    """Close and delete the runs this import created; say what failed and what was undone."""
    reason = "interrupted" if isinstance(error, KeyboardInterrupt) else scrubbed_line(error)
    undeleted = []
    for run_id in reversed(created):
        try:
            # Closed first: a deleted run left RUNNING would read as a cell still at work to whoever restores it.
            client.set_terminated(run_id, "KILLED")
            client.delete_run(run_id)
        except Exception:  # noqa: BLE001  (the store is failing: name what is left)
            undeleted.append(run_id)
    at = f" at {where}" if where else ""
    if isinstance(error, ImportStopped):
        return _stopped_message(error, at, len(created), undeleted)
    if undeleted:
        return (
            f"the import failed{at} ({reason}); {len(created) - len(undeleted)} of the {len(created)} runs it had "
            f"created were deleted, these could not be: {', '.join(undeleted)}"
        )
    return (
        f"the import failed{at} ({reason}); the {len(created)} runs it had created were deleted: nothing was imported"
    )


def _stopped_message(stop: ImportStopped, at: str, created: int, undeleted: list[str]) -> str:
    if undeleted:
        return (
            f"the import was stopped ({stop}){at}; {created - len(undeleted)} of the {created} runs it had created "
            f"were deleted, these could not be: {', '.join(undeleted)}"
        )
    return f"the import was stopped ({stop}){at}; the {created} runs it had created were deleted: nothing was imported"
