"""The export file (format `trainbench-export`, version 1; the package's docstring shows it): its names and limits,
and `load`/`check`, which check a file whole, as MLflow would take it, before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from trainbench import untrusted

FORMAT = "trainbench-export"
VERSION = 1
MAX_ARTIFACT_BYTES = 256 * 1024  # larger artifacts (a model, a trace) stay behind, named in LEFT_OUT_TAG
EXPORTED_KINDS = ("sweep", "cell")  # not `reference` (every machine imports the published ones itself), not `report`

IMPORT_ID_TAG = "trainbench.import.run_id"  # the run's id in the store where it was first recorded
IMPORTED_FROM_TAG = "trainbench.imported_from"  # `<file name> (exported <exported_at>)`
LEFT_OUT_TAG = "trainbench.export.left_out"  # artifacts over MAX_ARTIFACT_BYTES, not in the file
PARENT_TAG = "mlflow.parentRunId"
# Tags that name a person, a machine or a path (mlflow.user, mlflow.source.*: `mlflow run`'s user, project
# path and Git URL; trainbench.process: host id and pid), or that only mean something in the store that wrote
# them (the heartbeat; the parent link, which the file holds as parent_run_id; the run name, as run_name).
DROPPED_TAGS = frozenset(
    {
        "mlflow.user",
        PARENT_TAG,
        "mlflow.runName",
        "mlflow.log-model.history",
        "trainbench.process",
        "trainbench.heartbeat",
    }
)
DROPPED_TAG_PREFIXES = ("mlflow.source.",)
# Tags whose value is the id of another run: mapped to that run's id in the importing store when it is in the file.
LINK_TAGS = ("trainbench.sweep_id", "trainbench.result_run_id", "trainbench.scaling_baseline_run_id")

STATUSES = ("FINISHED", "FAILED", "KILLED", "RUNNING", "SCHEDULED")  # MLflow's RunStatus names
UNFINISHED = ("RUNNING", "SCHEDULED")
# MLflow's limits (mlflow.utils.validation, 3.17): names, values, and entities per log_batch call.
MAX_NAME_LENGTH = 250
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
PARAMS_PER_BATCH = TAGS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
ENTITIES_PER_BATCH = 1000  # params, metrics and tags together
# MLflow's allowed characters in param, metric and tag names (outside Windows): letters, digits, `_ - . / :`
# and spaces; and a name must not change under posixpath.normpath (no `a//b`, `./a`, `..`, leading `/`).
NAME_CHARACTERS = re.compile(r"[/\w.\- :]+")
RUN_ID = re.compile(r"[0-9a-f]{1,64}")
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class SharingError(ValueError):
    """A file that cannot be imported, or input that cannot be exported. str() is the one line shown to the user."""


def limited(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class RunRecord:
    """One run of a file, checked: what an import writes."""

    index: int  # from 1, as named in messages
    run_id: str
    run_name: str
    status: str
    start_time: int
    end_time: int | None
    parent_run_id: str | None
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, list[tuple[int, int, float]]]  # key -> (step, timestamp ms, value)
    artifacts: dict[str, bytes]

    @property
    def key(self) -> str:
        """The run's id where it was first recorded: the same on every machine it passes through."""
        return self.tags.get(IMPORT_ID_TAG) or self.run_id


@dataclass(frozen=True)
class ExportFile:
    name: str  # as given (messages); its last part goes into IMPORTED_FROM_TAG
    experiment: str
    exported_at: str
    runs: list[RunRecord]

    @property
    def origin(self) -> str:
        return f"{Path(self.name).name} (exported {self.exported_at})"


def load(path: str | os.PathLike[str]) -> ExportFile:
    """Read and check a whole export file; raises SharingError naming the file, the run and what is wrong."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SharingError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SharingError(f"{name}: cannot be read ({error})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise SharingError(f"{name}: not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:
        raise SharingError(f"{name}: not an export (its JSON is nested deeper than Python reads)") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise SharingError(f"{name}: not an export ({error})") from None
    return check(document, name)


def check(document: Any, name: str) -> ExportFile:
    """The document's runs, checked as MLflow would check them (names, lengths, types) and against each other
    (unique ids, parents in the file)."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise SharingError(f"{name}: not a trainbench export (format {found!r}, expected {FORMAT!r})")
    if document.get("version") != VERSION:
        raise SharingError(
            f"{name}: export format version {document.get('version')!r} is not known here (this trainbench reads "
            f"version {VERSION}): update trainbench"
        )
    for key in ("exported_at", "experiment"):
        if not isinstance(document.get(key), str):
            raise SharingError(f"{name}: `{key}` must be a string, not {document.get(key)!r}")
    raw_runs = document.get("runs")
    if not isinstance(raw_runs, list):
        raise SharingError(f"{name}: `runs` must be a list")
    runs = [_check_run(raw, i, name) for i, raw in enumerate(raw_runs, start=1)]
    for run in runs:
        _check_bounds(run, name)
    by_id: dict[str, RunRecord] = {}
    for run in runs:
        if run.run_id in by_id:
            raise SharingError(f"{_where(name, run.index, run.run_name)}: run id {run.run_id} appears twice")
        by_id[run.run_id] = run
    for run in runs:
        seen = {run.run_id}
        parent = run.parent_run_id
        while parent is not None:
            if parent not in by_id:
                raise SharingError(
                    f"{_where(name, run.index, run.run_name)}: parent_run_id {parent} is not a run of this file"
                )
            if parent in seen:
                raise SharingError(f"{_where(name, run.index, run.run_name)}: parent_run_id links form a loop")
            seen.add(parent)
            parent = by_id[parent].parent_run_id
    return ExportFile(name, document["experiment"], document["exported_at"], runs)


# What a store can hold: SQLite's (and PostgreSQL's BIGINT) integers are 64-bit.
MAX_STORED_INT = 2**63 - 1
# The figures trainbench reports and compares (docs/mlflow-schema.md): rates, times, FLOPs, ratios. A run that
# measured one measured a finite, non-negative number, and none reaches 1e15 (a quadrillion samples a second, or
# 31 million years); a larger one is a damaged or forged file, which would top every table it is shown in.
FIGURE_SUFFIXES = ("_per_s", "_per_device", "_tflops", "tflops", "_s", "_ms", "mfu", "_efficiency")
MAX_FIGURE = 1e15
# Any other metric (a loss that diverged to NaN, a user's own) may be non-finite, but not beyond a double.
MAX_METRIC = 1e300


def _check_bounds(run: RunRecord, name: str) -> None:
    """Values that JSON carries and the store cannot hold, or that no measurement gives: raised as SharingError
    naming the run and the metric before anything is written."""
    where = _where(name, run.index, run.run_name)
    for label, time_ms in (("start_time", run.start_time), ("end_time", run.end_time)):
        if time_ms is not None and time_ms > MAX_STORED_INT:
            raise SharingError(f"{where}: {label} {time_ms} is larger than a store holds (2**63-1)")
    for key, points in run.metrics.items():
        figure = key.endswith(FIGURE_SUFFIXES)
        for number, (step, timestamp, value) in enumerate(points, start=1):
            at = f"{where}: metric `{key}` point {number}"
            for label, whole in (("step", step), ("timestamp", timestamp)):
                if abs(whole) > MAX_STORED_INT:
                    raise SharingError(f"{at}: {label} {whole} is larger than a store holds (2**63-1)")
            if figure and not (math.isfinite(value) and 0 <= value <= MAX_FIGURE):
                raise SharingError(
                    f"{at}: {value:g} is not a measurement (a figure is a finite number from 0 to {MAX_FIGURE:g})"
                )
            if math.isfinite(value) and abs(value) > MAX_METRIC:
                raise SharingError(f"{at}: {value:g} is beyond the largest value a store keeps ({MAX_METRIC:g})")


def _where(name: str, index: int, run_name: Any) -> str:
    # The file's run name on the refusal's one line: a \r or \n in it would draw over what the line says
    shown = untrusted.for_terminal(run_name) if isinstance(run_name, str) else ""
    return f"{name}: run {index}" + (f" ({shown})" if shown else "")


def _check_run(raw: Any, index: int, name: str) -> RunRecord:
    if not isinstance(raw, dict):
        raise SharingError(f"{name}: run {index}: must be an object, not {type(raw).__name__}")
    where = _where(name, index, raw.get("run_name"))

    def bad(what: str) -> SharingError:
        return SharingError(f"{where}: {what}")

    run_id = raw.get("run_id")
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise bad(f"run_id {run_id!r} is not a run id (lowercase hex)")
    run_name = raw.get("run_name")
    if not isinstance(run_name, str):
        raise bad(f"run_name must be a string, not {run_name!r}")
    status = raw.get("status")
    if status not in STATUSES:
        raise bad(f"status {status!r} is not one of {', '.join(STATUSES)}")
    start_time, end_time = raw.get("start_time"), raw.get("end_time")
    if not _is_int(start_time) or start_time < 0:
        raise bad(f"start_time {start_time!r} is not a time in milliseconds (a non-negative integer)")
    if end_time is not None and (not _is_int(end_time) or end_time < 0):
        raise bad(f"end_time {end_time!r} is not a time in milliseconds (a non-negative integer) or null")
    parent = raw.get("parent_run_id")
    if parent is not None and (not isinstance(parent, str) or not RUN_ID.fullmatch(parent)):
        raise bad(f"parent_run_id {parent!r} is not a run id or null")
    if parent == run_id:
        raise bad("parent_run_id is the run itself")
    params = _check_values(raw.get("params"), "param", MAX_PARAM_LENGTH, bad)
    tags = _check_values(raw.get("tags"), "tag", MAX_TAG_LENGTH, bad)
    kind = tags.get("trainbench.kind")
    if kind is not None and kind not in EXPORTED_KINDS:
        raise bad(
            f"tag `trainbench.kind` is {kind!r}: a file holds only cells and sweeps (published figures come only "
            "from the repository's references/published-results.csv, through `trainbench references`)"
        )
    imported_id = tags.get(IMPORT_ID_TAG)
    if imported_id is not None and not RUN_ID.fullmatch(imported_id):
        raise bad(f"tag `{IMPORT_ID_TAG}`: {imported_id!r} is not a run id")
    return RunRecord(
        index=index,
        run_id=run_id,
        run_name=untrusted.redact(run_name),
        status=status,
        start_time=start_time,
        end_time=end_time,
        parent_run_id=parent,
        params={k: untrusted.redact_value(k, v) for k, v in params.items()},  # no secret lands in a store
        tags={k: untrusted.redact_value(k, v) for k, v in tags.items()},
        metrics=_check_metrics(raw.get("metrics"), bad),
        artifacts=_check_artifacts(raw.get("artifacts"), bad),
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _name_problem(key: Any) -> str | None:
    """Why MLflow would refuse `key` as a param, tag or metric name, or None."""
    if not isinstance(key, str) or not key:
        return "a name must be a non-empty string"
    if len(key) > MAX_NAME_LENGTH:
        return f"longer than MLflow's {MAX_NAME_LENGTH} characters"
    if not NAME_CHARACTERS.fullmatch(key):
        return "MLflow allows only letters, digits, spaces and `_ - . / :` in names"
    if posixpath.normpath(key) != key or key.startswith(("/", "..")) or key == ".":
        return "MLflow refuses names that read as another path (`a//b`, `./a`, `..`, a leading `/`)"
    return None


def _check_values(raw: Any, kind: str, limit: int, bad: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise bad(f"{kind}s must be an object of names to strings")
    for key, value in raw.items():
        problem = _name_problem(key)
        if problem:
            raise bad(f"{kind} key `{key}`: {problem}")
        if not isinstance(value, str):
            raise bad(f"{kind} `{key}`: the value must be a string, not {value!r}")
        if len(value) > limit:
            raise bad(f"{kind} `{key}`: the value has {len(value)} characters, MLflow takes at most {limit}")
    return dict(raw)


def _check_metrics(raw: Any, bad: Any) -> dict[str, list[tuple[int, int, float]]]:
    if not isinstance(raw, dict):
        raise bad("metrics must be an object of names to lists of [step, timestamp, value]")
    metrics: dict[str, list[tuple[int, int, float]]] = {}
    for key, points in raw.items():
        problem = _name_problem(key)
        if problem:
            raise bad(f"metric key `{key}`: {problem}")
        if not isinstance(points, list):
            raise bad(f"metric `{key}`: must be a list of [step, timestamp, value]")
        checked = []
        for number, point in enumerate(points, start=1):
            if not isinstance(point, list) or len(point) != 3:
                raise bad(f"metric `{key}` point {number}: {point!r} is not [step, timestamp, value]")
            step, timestamp, value = point
            if not _is_int(step):
                raise bad(f"metric `{key}` point {number}: step {step!r} is not an integer")
            if not _is_int(timestamp) or timestamp < 0:
                raise bad(f"metric `{key}` point {number}: timestamp {timestamp!r} is not a time in milliseconds")
            if isinstance(value, str) and value in SPECIAL_FLOATS:
                value = SPECIAL_FLOATS[value]
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(f"metric `{key}` point {number}: {value!r} is not a number")
            elif isinstance(value, int) and abs(value) > MAX_STORED_INT:  # 10**400 has no float
                raise bad(
                    f"metric `{key}` point {number}: an integer of {len(str(abs(value)))} digits is not a value a store keeps"
                )
            checked.append((step, timestamp, float(value)))
        metrics[key] = checked
    return metrics


def _check_artifacts(raw: Any, bad: Any) -> dict[str, bytes]:
    if not isinstance(raw, dict):
        raise bad("artifacts must be an object of relative paths to {encoding, data}")
    artifacts: dict[str, bytes] = {}
    for path, entry in raw.items():
        if (
            not isinstance(path, str)
            or not path
            or "\\" in path
            or path.startswith("/")
            or re.match(r"[A-Za-z]:", path)
            or posixpath.normpath(path) != path
            or ".." in path.split("/")
        ):
            raise bad(f"artifact path {path!r} is not a relative path inside the run (no `..`, no leading `/`)")
        if not isinstance(entry, dict) or not isinstance(entry.get("data"), str):
            raise bad(f'artifact `{path}`: must be {{"encoding": ..., "data": "..."}}')
        if entry.get("encoding") == "utf-8":
            artifacts[path] = entry["data"].encode("utf-8")
        elif entry.get("encoding") == "base64":
            try:
                artifacts[path] = base64.b64decode(entry["data"], validate=True)
            except (binascii.Error, ValueError):
                raise bad(f"artifact `{path}`: data is not valid base64") from None
        else:
            raise bad(f"artifact `{path}`: encoding {entry.get('encoding')!r} is not utf-8 or base64")
    return artifacts
