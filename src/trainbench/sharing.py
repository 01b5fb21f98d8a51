"""`trainbench export` and `trainbench import`: runs carried between stores as one JSON file, no server needed.

A colleague's laptop, a cloud box that is about to be deleted, a cluster without a route to the team server:
each exports its cells and sweeps to a file, and any store (a local `mlflow.db` or a server) imports it.
mlflow-export-import would do the copying, but against a local store it fails, and what it imports carries
the importer's user name and the import time; this keeps each run as it was recorded (start and end times,
whole metric histories with their steps and timestamps, params, tags, small artifacts, sweep -> cell links).

The file (format `trainbench-export`, version 1) is one JSON document:

    {"format": "trainbench-export", "version": 1, "exported_at": "<UTC ISO time>", "experiment": "<name>",
     "runs": [{"run_id", "run_name", "status", "start_time" (ms), "end_time" (ms or null), "parent_run_id",
               "params": {k: v}, "tags": {k: v}, "metrics": {key: [[step, timestamp_ms, value], ...]},
               "artifacts": {relative_path: {"encoding": "utf-8" | "base64", "data": "..."}}}]}

JSON has no NaN or infinity: such metric values are the strings "NaN", "Infinity", "-Infinity".

What leaves the machine (docs/privacy.md): no user name, host name or absolute path. The tags that name them
(`mlflow.user`, `mlflow.source.*`, `trainbench.process`, ...) are dropped, and every param value, tag value,
run name and text artifact goes through `scrub`: tracking.private (project -> `./`, home -> `~`, credentials
masked), then any absolute path left becomes `<path>`, and this machine's host name `<host>` and login name
`<user>` (see `scrub` for the exact rules).

Importing is idempotent: each imported run carries `trainbench.import.run_id`, the id it had where it was
first recorded (kept through a chain of machines), and a run whose id is already in the store, or already
imported into the experiment, is skipped. Every file is checked whole before anything is written.

Light on purpose (the parent process imports trainbench modules): MLflow is imported inside functions only.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import math
import os
import posixpath
import re
import socket
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from trainbench import tracking, untrusted
from trainbench.import_guard import ImportStopped, StopRequests, import_lock
from trainbench.runs import SETTING_NAME_TAG, search_all, setting_name

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
# MLflow's allowed characters in param, metric and tag names (outside Windows): letters, digits, `_ - . / :`
# and spaces; and a name must not change under posixpath.normpath (no `a//b`, `./a`, `..`, leading `/`).
_NAME = re.compile(r"[/\w.\- :]+")
_RUN_ID = re.compile(r"[0-9a-f]{1,64}")
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# An absolute path: a POSIX path starting at `/` where no word, `.`, `~`, `/` or `<` comes before it (so not the
# path of a URL, `http://host:5000/api/...`, nor `./a/b`, `~/a`, `1/2`, `samples/s`, an HTML closing tag `</p>`),
# including the path of a `file://` or `sqlite:////` URI; or a Windows path `C:\...`. It ends at whitespace, a
# quote or `, ; : | < > ( ) [ ] { }`. The operating system's own folders (/sys, /proc, /dev, /etc, /usr) name no
# one and are kept.
_ABSOLUTE_PATH = re.compile(
    r"(?:(?<=file://)|(?<=:///)|(?<![\w.~/\\<-]))"
    r"(?:/(?!(?:sys|proc|dev|etc|usr)(?:/|\b))(?=[\w.~@+-])|[A-Za-z]:\\)"
    r"[^\s\"'`,;:|<>()\[\]{}]*"
)
# Names too common to replace as a host or user name (they would also hit ordinary words).
_GENERIC_NAMES = frozenset({"localhost", "root", "user", "admin", "ubuntu", "debian", "linux", "runner", "none"})


class SharingError(ValueError):
    """A file that cannot be imported, or input that cannot be exported. str() is the one line shown to the user."""


# ----------------------------------------------------------------------------------------------- privacy


def scrub(text: str) -> str:
    """`text` as it may leave this machine: tracking.private (project path -> `./`, home -> `~`, credentials
    masked); then every absolute path left (see _ABSOLUTE_PATH) -> `<path>`; then this machine's host name
    (and its short form) -> `<host>` and login name -> `<user>`, each only as a whole token, case-sensitive, and
    only when longer than 3 characters and not a generic name like `localhost` or `root`."""
    text = _ABSOLUTE_PATH.sub("<path>", tracking.private(text))
    for name, placeholder in _own_names():
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", placeholder, text)
    return text


def _own_names() -> list[tuple[str, str]]:
    import getpass

    names: list[tuple[str, str]] = []
    host = socket.gethostname()
    for candidate in (host, host.split(".", 1)[0]):
        names.append((candidate, "<host>"))
    with contextlib.suppress(KeyError, OSError):  # no login name (a container's uid without a passwd entry)
        names.append((getpass.getuser(), "<user>"))
    return [(n, p) for n, p in names if len(n) > 3 and n.lower() not in _GENERIC_NAMES]


def _reason(error: BaseException) -> str:
    """The first line of what went wrong, with no credential or absolute path of this machine."""
    text = str(error).strip()
    return scrub(text.splitlines()[0][:300] if text else type(error).__name__)


def _limited(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------------------ export


@dataclass
class ExportSummary:
    cells: int
    sweeps: int
    unfinished: int  # runs left out because they (or their sweep) were still running

    @property
    def runs(self) -> int:
        return self.cells + self.sweeps


def export_runs(
    client: Any, experiment_id: str, *, sweep: str | None = None, filter_string: str = ""
) -> tuple[list[dict[str, Any]], ExportSummary]:
    """The experiment's cells and sweeps (a sweep's run and its cells with `sweep`; only those matching
    `filter_string`, an MLflow search filter, too), as the file's `runs`, parents first.

    A selected cell's sweep run comes along even when the filter does not select it, so that the cell stays
    under its sweep. Runs still running are left out, and so are the cells of a sweep still running: an import
    skips runs it has already, so a half-finished copy would never be completed by a later export."""
    selected: dict[str, Any] = {}
    for kind in EXPORTED_KINDS:
        clauses = [f"tags.`trainbench.kind` = '{kind}'"]
        if sweep:
            clauses.append(f"attributes.run_id = '{sweep}'" if kind == "sweep" else f"tags.`{PARENT_TAG}` = '{sweep}'")
        if filter_string.strip():
            clauses.append(filter_string.strip())
        for run in search_all(client, [experiment_id], " AND ".join(clauses)):
            selected[run.info.run_id] = run
    for run in list(selected.values()):
        parent = run.data.tags.get(PARENT_TAG)
        if parent and parent not in selected:
            found = _active_run(client, parent)
            if found is not None and found.info.experiment_id == experiment_id:
                selected[parent] = found
    unfinished = {i for i, r in selected.items() if r.info.status in UNFINISHED}
    unfinished |= {i for i, r in selected.items() if r.data.tags.get(PARENT_TAG) in unfinished}
    kept = [r for i, r in selected.items() if i not in unfinished]
    kept.sort(key=lambda r: (r.data.tags.get(PARENT_TAG) in selected, r.info.start_time, r.info.run_id))
    records = [_run_record(client, run, set(selected) - unfinished) for run in kept]
    cells = sum(r.data.tags.get("trainbench.kind") == "cell" for r in kept)
    return records, ExportSummary(cells=cells, sweeps=len(kept) - cells, unfinished=len(unfinished))


def _active_run(client: Any, run_id: str) -> Any | None:
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return run if run.info.lifecycle_stage == "active" else None


def _run_record(client: Any, run: Any, exported_ids: set[str]) -> dict[str, Any]:
    run_id = run.info.run_id
    parent = run.data.tags.get(PARENT_TAG)
    tags = {
        key: _limited(scrub(value), MAX_TAG_LENGTH)
        for key, value in run.data.tags.items()
        if key not in DROPPED_TAGS and not key.startswith(DROPPED_TAG_PREFIXES)
    }
    artifacts, left_out = _artifacts(client, run_id)
    if left_out:
        tags[LEFT_OUT_TAG] = _limited(", ".join(left_out), MAX_TAG_LENGTH)
    metrics = {
        key: [
            [m.step, m.timestamp, _json_number(m.value)]
            for m in sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        ]
        for key in sorted(run.data.metrics)
    }
    return {
        "run_id": run_id,
        "run_name": scrub(run.info.run_name or ""),
        "status": run.info.status,
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "parent_run_id": parent if parent in exported_ids else None,
        "params": {key: _limited(scrub(value), MAX_PARAM_LENGTH) for key, value in run.data.params.items()},
        "tags": tags,
        "metrics": metrics,
        "artifacts": artifacts,
    }


def _json_number(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _artifacts(client: Any, run_id: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Every artifact file of the run up to MAX_ARTIFACT_BYTES: text scrubbed (utf-8), the rest base64; and the
    paths of those left out, with their sizes."""
    found: dict[str, dict[str, str]] = {}
    left_out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainbench-export-") as folder:
        for info in _artifact_files(client, run_id):
            if info.file_size is not None and info.file_size > MAX_ARTIFACT_BYTES:
                left_out.append(f"{info.path} ({_kib(info.file_size)})")
                continue
            data = Path(client.download_artifacts(run_id, info.path, folder)).read_bytes()
            if len(data) > MAX_ARTIFACT_BYTES:  # a store that does not report sizes
                left_out.append(f"{info.path} ({_kib(len(data))})")
                continue
            found[info.path] = _encoded(data)
    return found, left_out


def _artifact_files(client: Any, run_id: str, path: str | None = None) -> Iterable[Any]:
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            yield from _artifact_files(client, run_id, info.path)
        else:
            yield info


def _kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB"


def _encoded(data: bytes) -> dict[str, str]:
    """Text (UTF-8 without NUL bytes) as scrubbed text; anything else (a plot) as base64, byte for byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}
    return {"encoding": "utf-8", "data": scrub(text)}


def write_export(path: Path, experiment: str, runs: list[dict[str, Any]]) -> None:
    """The file, written beside its place and renamed into it: a reader never sees half a file."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "experiment": scrub(experiment),
        "runs": runs,
    }
    # A new file of a name no one can have prepared (a link planted at `<name>.partial` is never followed).
    handle, partial_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    partial = Path(partial_name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=1, allow_nan=False, ensure_ascii=False)
            out.write("\n")
        os.chmod(partial, 0o666 & ~_umask())  # as a plain open() would have made it, not mkstemp's 0600
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def output_problem(path: Path) -> str | None:
    """Why `export -o` must not write `path`: it is a link, or exists and is not a regular file (a device such
    as /dev/full, a FIFO, a socket, a folder: replacing it would destroy it); None for a new or regular file."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"it cannot be examined ({error.strerror or error})"
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a device, FIFO or socket, not a regular file"
        return f"it is {kind}"
    return None


# -------------------------------------------------------------------------------------------- reading


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
    return f"{name}: run {index}" + (f" ({run_name})" if isinstance(run_name, str) and run_name else "")


def _check_run(raw: Any, index: int, name: str) -> RunRecord:
    if not isinstance(raw, dict):
        raise SharingError(f"{name}: run {index}: must be an object, not {type(raw).__name__}")
    where = _where(name, index, raw.get("run_name"))

    def bad(what: str) -> SharingError:
        return SharingError(f"{where}: {what}")

    run_id = raw.get("run_id")
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
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
    if parent is not None and (not isinstance(parent, str) or not _RUN_ID.fullmatch(parent)):
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
    if imported_id is not None and not _RUN_ID.fullmatch(imported_id):
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
    if not _NAME.fullmatch(key):
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


# --------------------------------------------------------------------------------- an export as runs


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
    tags[IMPORTED_FROM_TAG] = _limited(exported.origin, MAX_TAG_LENGTH)
    if tags.get("trainbench.kind") in ("cell", "reference"):  # files exported before the tag existed
        tags.setdefault(SETTING_NAME_TAG, setting_name(tags, record.params))
    return tags


# ------------------------------------------------------------------------------------------------ import


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
    found = _active_run(client, key)
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
    closed: until then no sweep's check for vanished runs (trainbench.runner.liveness) takes it for a cell whose
    process died, and an import cut short leaves no run that a later import would take as already here."""
    from mlflow.entities import Metric, Param

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
    for start in range(0, len(params), PARAMS_PER_BATCH):
        stops.check()
        client.log_batch(run_id, params=params[start : start + PARAMS_PER_BATCH])
    metrics = [
        Metric(key, value, timestamp, step)
        for key, points in record.metrics.items()
        for step, timestamp, value in points
    ]
    for start in range(0, len(metrics), METRICS_PER_BATCH):
        stops.check()
        client.log_batch(run_id, metrics=metrics[start : start + METRICS_PER_BATCH])
    stops.check()
    _log_tags(client, run_id, tags)
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


def _log_tags(client: Any, run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    batch = [RunTag(k, v) for k, v in tags.items()]
    for start in range(0, len(batch), TAGS_PER_BATCH):
        client.log_batch(run_id, tags=batch[start : start + TAGS_PER_BATCH])


def _rolled_back(client: Any, created: list[str], where: str, error: BaseException) -> str:
    """Close and delete the runs this import created; say what failed and what was undone."""
    reason = "interrupted" if isinstance(error, KeyboardInterrupt) else _reason(error)
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


# --------------------------------------------------------------------------------------------- commands

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CTRL_C = 0, 1, 2, 130


def _quiet() -> None:
    """MLflow draws a progress bar on stderr for every artifact it moves: dozens of lines for one export."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def _fail(message: str, status: int = EXIT_BAD_INPUT) -> int:
    print(f"trainbench: {tracking.private(message)}", file=sys.stderr, flush=True)
    return status


def export_main(argv: Sequence[str] | None = None) -> int:
    """`trainbench export [--uri URI] [--experiment E] [--sweep RUN_ID] [--filter F] -o FILE`."""
    parser = argparse.ArgumentParser(
        prog="trainbench export", description="Write a store's cells and sweeps to one JSON file to import elsewhere."
    )
    parser.add_argument(
        "--uri", default=None, help="tracking store (default: $MLFLOW_TRACKING_URI, else this project's)"
    )
    parser.add_argument("--experiment", default="trainbench")
    parser.add_argument("--sweep", default=None, help="only this sweep run and its cells")
    parser.add_argument("--filter", default="", help="an MLflow search filter, ANDed to the selection")
    parser.add_argument("-o", "--output", required=True, help="the file to write (JSON)")
    args = parser.parse_args(argv)
    out = Path(args.output)
    if not out.parent.is_dir():
        return _fail(f"cannot write {args.output}: the folder {out.parent} does not exist")
    special = output_problem(out)
    if special:
        return _fail(f"will not write {args.output}: {special}; name a new file, e.g. -o export.json")
    if args.sweep and not _RUN_ID.fullmatch(args.sweep):
        return _fail(f"--sweep {args.sweep!r} is not a run id (32 hex digits, as the sweep's summary prints it)")
    _quiet()
    uri = tracking.resolve_tracking_uri(args.uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :].split("?", 1)[0]).exists():
        return _fail(f"no MLflow store at {uri}: nothing to export")  # opening it would create an empty one
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        return _fail(str(error))
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        return _fail(f"no experiment {args.experiment!r} in {uri}: nothing to export")
    try:
        runs, summary = export_runs(client, experiment.experiment_id, sweep=args.sweep, filter_string=args.filter)
        if not runs:
            also = f" ({summary.unfinished} still running: export them when they end)" if summary.unfinished else ""
            selection = f"sweep {args.sweep}" if args.sweep else "cells or sweeps"
            return _fail(
                f"no {selection} in experiment {args.experiment!r} of {uri}"
                + (f" matching {args.filter!r}" if args.filter.strip() else "")
                + f"{also}: nothing written"
            )
        write_export(out, args.experiment, runs)
    except OSError as error:
        return _fail(f"cannot write {args.output}: {error.strerror or error}")
    except Exception as error:  # MLflow raises many types here: connection, SQL, artifact repository
        if args.filter.strip() and getattr(error, "error_code", None) == "INVALID_PARAMETER_VALUE":
            return _fail(f"--filter {args.filter!r}: {_reason(error)}")  # the selection's own clauses are valid
        return _fail(f"reading {uri} failed ({_reason(error)}): nothing written", EXIT_FAILED)
    note = f"; left out {summary.unfinished} still running" if summary.unfinished else ""
    print(
        f"exported {summary.runs} runs ({summary.cells} cells, {summary.sweeps} sweeps) from "
        f"{tracking.private(uri)} to {tracking.private(args.output)}{note}"
    )
    return EXIT_OK


def _failed_status(cause: BaseException | None) -> int:
    if isinstance(cause, ImportStopped):
        return 128 + cause.signum
    return EXIT_CTRL_C if isinstance(cause, KeyboardInterrupt) else EXIT_FAILED


def import_main(argv: Sequence[str] | None = None) -> int:
    """`trainbench import FILE... [--uri URI] [--experiment E]`."""
    parser = argparse.ArgumentParser(
        prog="trainbench import", description="Add the runs of `trainbench export` files to a store (idempotent)."
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="files written by trainbench export")
    parser.add_argument(
        "--uri", default=None, help="tracking store (default: $MLFLOW_TRACKING_URI, else this project's)"
    )
    parser.add_argument("--experiment", default="trainbench", help="the experiment to add the runs to (created)")
    args = parser.parse_args(argv)
    experiment_problem = untrusted.path_problem(args.experiment)
    if experiment_problem:
        return _fail(f"--experiment {args.experiment!r} must be a name, not a path: it holds {experiment_problem}")
    try:
        files = [load(path) for path in args.files]  # every file whole, before the store is touched
    except SharingError as error:
        return _fail(f"{error}; nothing was imported")
    _quiet()
    uri = tracking.resolve_tracking_uri(args.uri)
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        return _fail(f"{error}; nothing was imported")
    try:
        with StopRequests() as stops, import_lock(uri, stops, tracking.private(uri)):
            experiment_id = tracking.experiment_id(client, args.experiment, uri)
            summaries = import_files(client, experiment_id, files, stops)
    except ImportFailed as error:
        return _fail(str(error), _failed_status(error.__cause__))
    except ImportStopped as stop:  # while waiting for the lock or the experiment: nothing written
        return _fail(
            f"the import was stopped ({stop}) before it wrote anything: nothing was imported", 128 + stop.signum
        )
    except Exception as error:  # the experiment could not be read or created: nothing written yet
        return _fail(f"cannot use experiment {args.experiment!r} in {uri} ({_reason(error)})", EXIT_FAILED)
    for exported, summary in zip(files, summaries, strict=True):
        print(
            f"{tracking.private(exported.name)}: {summary.imported} runs imported, {summary.already_here} already here "
            f"(experiment {args.experiment}, {tracking.private(uri)})"
        )
    return EXIT_OK
