"""Writing an export file: a store's finished cells and sweeps, parents first, each run as it was recorded, scrubbed."""

from __future__ import annotations

import base64
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainbench.store.runs import search_all
from trainbench.store.sharing.file_format import (
    DROPPED_TAG_PREFIXES,
    DROPPED_TAGS,
    EXPORTED_KINDS,
    FORMAT,
    LEFT_OUT_TAG,
    MAX_ARTIFACT_BYTES,
    MAX_PARAM_LENGTH,
    MAX_TAG_LENGTH,
    PARENT_TAG,
    UNFINISHED,
    VERSION,
    limited,
)
from trainbench.store.sharing.scrubbing import scrub


@dataclass
class ExportSummary:
    cells: int
    sweeps: int
    unfinished: int  # runs left out because they (or their sweep) were still running

    @property
    def runs(self) -> int:
        return self.cells + self.sweeps


def export_runs(
    client: Any, experiment_id: str, *, store_uri: str, sweep: str | None = None, filter_string: str = ""
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
            found = active_run(client, parent)
            if found is not None and found.info.experiment_id == experiment_id:
                selected[parent] = found
    unfinished = {i for i, r in selected.items() if r.info.status in UNFINISHED}
    unfinished |= {i for i, r in selected.items() if r.data.tags.get(PARENT_TAG) in unfinished}
    kept = [r for i, r in selected.items() if i not in unfinished]
    kept.sort(key=lambda r: (r.data.tags.get(PARENT_TAG) in selected, r.info.start_time, r.info.run_id))
    records = [_run_record(client, run, set(selected) - unfinished, store_uri) for run in kept]
    cells = sum(r.data.tags.get("trainbench.kind") == "cell" for r in kept)
    return records, ExportSummary(cells=cells, sweeps=len(kept) - cells, unfinished=len(unfinished))


def active_run(client: Any, run_id: str) -> Any | None:
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return run if run.info.lifecycle_stage == "active" else None


def _run_record(client: Any, run: Any, exported_ids: set[str], store_uri: str) -> dict[str, Any]:
    run_id = run.info.run_id
    parent = run.data.tags.get(PARENT_TAG)
    tags = {
        key: limited(scrub(value), MAX_TAG_LENGTH)
        for key, value in run.data.tags.items()
        if key not in DROPPED_TAGS and not key.startswith(DROPPED_TAG_PREFIXES)
    }
    artifacts, left_out = _artifacts(client, run_id, artifact_folder(store_uri, run.info.artifact_uri))
    if left_out:
        tags[LEFT_OUT_TAG] = limited(", ".join(left_out), MAX_TAG_LENGTH)
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
        "params": {key: limited(scrub(value), MAX_PARAM_LENGTH) for key, value in run.data.params.items()},
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


OUTSIDE_THE_STORE = "every artifact (the run names a place outside the store's folder: not read)"


@dataclass
class ArtifactFolder:
    """Where a run's artifacts may be read from: its folder on this machine (`root`), which each of its files must
    stay in once links are resolved; None where they come through a server or its cloud store; `refused` where
    none may be read."""

    root: Path | None = None
    refused: bool = False

    def holds(self, path: str) -> bool:
        if self.root is None:
            return True
        return (self.root / path).resolve().is_relative_to(self.root.resolve())


def artifact_folder(store_uri: str, artifact_uri: str) -> ArtifactFolder:
    """A store is data from whoever wrote it: a run whose artifact location names a folder of this machine
    (file:///home/me/.ssh) or a bucket (s3://...) would copy what the user can read there into the export they
    share. A SQLite store's artifacts are read within its file's folder only, as written (trainbench keeps them
    in mlruns/ beside it, which may be a link to a bigger disk), each file within its run's folder; a server's
    through the server or its cloud store, never from a local path it names."""
    import os
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    location = urlparse(artifact_uri or "")
    local = location.scheme in ("", "file")
    if not store_uri.startswith("sqlite:///"):
        return ArtifactFolder() if not local else ArtifactFolder(refused=True)
    if not local:
        return ArtifactFolder(refused=True)
    store_folder = os.path.normpath(os.path.abspath(os.path.dirname(store_uri[len("sqlite:///") :].split("?", 1)[0])))
    folder = os.path.normpath(os.path.abspath(url2pathname(location.path)))
    inside = os.path.commonpath([store_folder, folder]) == store_folder
    return ArtifactFolder(Path(folder)) if inside else ArtifactFolder(refused=True)


def _artifacts(client: Any, run_id: str, where: ArtifactFolder) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Every artifact file of the run up to MAX_ARTIFACT_BYTES: text scrubbed (utf-8), the rest base64; and the
    paths of those left out, with their sizes (or why)."""
    found: dict[str, dict[str, str]] = {}
    left_out: list[str] = []
    if where.refused:
        return found, [OUTSIDE_THE_STORE]
    with tempfile.TemporaryDirectory(prefix="trainbench-export-") as folder:
        for info in _artifact_files(client, run_id):
            if not where.holds(info.path):
                left_out.append(f"{info.path} (a link out of its run's folder)")
                continue
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
