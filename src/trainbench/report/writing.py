"""Writing the report (trainbench.api.write_report, `python src/report.py`): open the sources, select, compare, plot,
render, then log the report as a run `trainbench.kind=report`. Its command line is trainbench.report.cli."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainbench.measure import hardware
from trainbench.references.mapping import NOTES_SEPARATOR
from trainbench.report import standing
from trainbench.report.comparison import TABLE_METRICS, build_tables
from trainbench.report.plots import write_plots
from trainbench.report.render import Document, html_page, markdown, report_json
from trainbench.report.selection import Entry, ReportError, Selection
from trainbench.store import mlflow_project, sources, tracking

EXIT_OK, EXIT_NOT_LOGGED, EXIT_BAD_INPUT = 0, 1, 2
# Relative to where it is run: in the project, outputs/ is git-ignored (as Hydra's output folders are).
DEFAULT_OUT = Path("outputs") / "report"


def write_report(
    entries: list[Entry],
    out: Path,
    selection: Selection,
    baseline: str | None,
    uri: str,
    notes: list[str],
    standings: list[standing.Standing] | None = None,
    yours: set[str] | None = None,
) -> list[Path]:
    """Write every file of the report into `out`; return the files. `notes` gains what the reader should know.
    `standings`: its opening section where the caller made it (a sweep's, against every source); else this
    machine's runs among `entries`. `yours`: the runs that are yours (a sweep's cells), else this machine's latest
    of each setting."""
    shown = standing.history_apart(entries, yours)
    tables = build_tables(shown, baseline, notes)
    if not tables:
        raise ReportError(
            f"nothing to report: none of the {len(entries)} selected runs has "
            f"{', '.join(m.name for m in TABLE_METRICS)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = write_plots(shown, out, notes)
    local = sum(not e.column.reference for e in entries)
    summary = (
        f"{local} cell(s) and {len(entries) - local} reference run(s) from {uri} "
        f"({selection.describe()}), {time.strftime('%Y-%m-%d %H:%M')}. Reference columns are marked "
        "[ref: source]; their figures were published elsewhere, with other software and settings."
    )
    found = standings
    if found is None and any(e.column.mine for e in entries):
        found = standing.standings(entries)
    doc = Document(
        summary,
        tables,
        notes,
        publications(entries),
        {p.name: p.read_bytes() for p in written if p.suffix == ".png"},
        found,
    )
    for name, text in (
        ("report.md", markdown(doc)),
        ("report.html", html_page(doc)),
        ("report.json", report_json(doc, selection.describe(), uri)),
    ):
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written


def publications(entries: list[Entry]) -> dict[str, list[str]]:
    """reference.source -> its publications (each run's own notes stay on the run: reference.citation)."""
    found: dict[str, dict[str, None]] = {}
    for e in entries:
        if e.column.reference:
            for publication in e.citation.split(NOTES_SEPARATOR)[0].split("; "):
                found.setdefault(e.column.source, {})[publication] = None
    return {source: list(publications) for source, publications in found.items()}


def log_report(
    client: Any, experiment_id: str, files: Iterable[Path], selection: Selection, entries: list[Entry]
) -> str:
    """A run `trainbench.kind=report` holding the files; under `mlflow run`, the run it created."""
    tags = {
        "trainbench.kind": "report",
        "trainbench.outcome": "running",
        "report.selection": selection.describe()[:5000],
        "git.commit": tracking.git_commit(),
    }
    adopted = mlflow_project.run_id()
    if adopted:
        run_id = adopted
        tracking.set_tags(client, run_id, tags)
    else:
        run_id = client.create_run(
            experiment_id, run_name=f"report-{time.strftime('%Y%m%d-%H%M%S')}", tags=tags
        ).info.run_id
    for path in files:
        client.log_artifact(run_id, str(path))
    local = sum(not e.column.reference for e in entries)
    tracking.log_metrics(client, run_id, {"report_local_runs": local, "report_reference_runs": len(entries) - local})
    if adopted:  # `mlflow run` closes its own run
        tracking.set_tags(client, run_id, {"trainbench.outcome": "finished"})
    else:
        tracking.close(client, run_id, "finished")
    return run_id


def open_sources(uris_given: list[str], files: list[Path], contributed: bool) -> list[Any]:
    """The stores and files to read, in that order (a run in two of them counts once). Without a URI: this
    project's store (or $MLFLOW_TRACKING_URI), unless only export files are given and no such store exists."""
    found: list[Any] = []
    uris = [tracking.resolve_tracking_uri(uri) for uri in uris_given] or [tracking.resolve_tracking_uri(None)]
    for uri in uris:
        local = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
        if not uris_given and files and local is not None and not local.exists():
            continue
        found.append(sources.open_store(uri))
    stores = list(found)
    found += [sources.open_file(path) for path in files]
    if contributed:
        found += sources.open_contributed()
    # the published (and contributed) runs every sweep imports there, as its first screen read them; a contributed
    # run is named by its file above
    return found + [sources.shared_source(store.client, store.uri, contributed) for store in stores]


def labels_of_this_machine() -> set[str]:
    """hw.label of this machine's CPU and GPUs, as its cells record them."""
    host = hardware.host_tags()
    return hardware.labels_for("cpu", host) | hardware.labels_for("gpu", host)


def check_across(entries: list[Entry], across: tuple[str, ...]) -> None:
    known = {key for e in entries for key in e.params} | {key for e in entries for key in e.setting}
    for key in across:
        if key not in known:
            examples = ", ".join(k for k in ("precision.name", "optim.name", "batch_size") if k in known)
            raise ReportError(f"--across {key}: no selected run has that setting; e.g. --across {examples}")


def check_sweep(stores: list[Any], run_id: str) -> None:
    from mlflow.exceptions import MlflowException

    for store in stores:
        try:
            store.client.get_run(run_id)
            return
        except MlflowException:
            continue
    raise ReportError(f"--sweep {run_id}: no such run in {', '.join(s.name for s in stores) or 'any store given'}")
