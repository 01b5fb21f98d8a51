"""`python src/report.py`: select, compare, plot, render; then log the report as a run `trainbench.kind=report`.

It reads every source given (tracking stores with --uri, export files, and the repository's contributed files
unless --no-contributed: the sources the sweep's first screen reads) and opens with where this machine stands: each setting it ran next to every other machine's.
Exit status: 0 written (and logged); 1 written, but logging it to MLflow failed; 2 bad input, nothing written.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainbench import untrusted
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
    entries: list[Entry], out: Path, selection: Selection, baseline: str | None, uri: str, notes: list[str]
) -> list[Path]:
    """Write every file of the report into `out`; return the files. `notes` gains what the reader should know."""
    tables = build_tables(entries, baseline, notes)
    if not tables:
        raise ReportError(
            f"nothing to report: none of the {len(entries)} selected runs has "
            f"{', '.join(m.name for m in TABLE_METRICS)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = write_plots(entries, out, notes)
    local = sum(not e.column.reference for e in entries)
    summary = (
        f"{local} cell(s) and {len(entries) - local} reference run(s) from {uri} "
        f"({selection.describe()}), {time.strftime('%Y-%m-%d %H:%M')}. Reference columns are marked "
        "[ref: source]; their figures were published elsewhere, with other software and settings."
    )
    found = standing.standings(entries) if any(e.column.mine for e in entries) else None
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python src/report.py",
        description="Compare this machine's cells with other machines' and with published reference runs, like "
        "with like: where this machine stands, tables with speed-ups, plots, one HTML page.",
    )
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="EXPORT_FILE",
        help="export files (`trainbench export`) to compare too, read directly (nothing is imported)",
    )
    parser.add_argument(
        "--uri",
        action="append",
        default=[],
        metavar="URI",
        help="a tracking store to read; repeat for several (default: $MLFLOW_TRACKING_URI, else this project's)",
    )
    parser.add_argument(
        "--contributed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the export files in results/contributed/ (machines this project does not have), as the "
        "sweep's first screen and `trainbench results` do; --no-contributed leaves them out",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder to write the report into (default: {DEFAULT_OUT}, git-ignored in the project)",
    )
    parser.add_argument("--experiment", default="trainbench", help="MLflow experiment (default: trainbench)")
    parser.add_argument("--sweep", metavar="RUN_ID", help="only the cells of this sweep (and references of its models)")
    parser.add_argument(
        "--model", nargs="+", action="extend", default=[], metavar="NAME", help="only these models (trainbench.model)"
    )
    parser.add_argument(
        "--filter",
        metavar="MLFLOW_FILTER",
        help="an MLflow search filter added to the selection, e.g. \"tags.`trainbench.backend` = 'cuda'\"",
    )
    parser.add_argument(
        "--baseline",
        metavar="LABEL",
        help="speed-ups against this column (its label or its hw.label); default, per table: yours, else the "
        "column with a value in the most rows that compare devices",
    )
    parser.add_argument(
        "--across",
        action="append",
        default=[],
        metavar="SETTING",
        help="compare this setting as columns rather than rows, e.g. --across precision.name (fp32 on one "
        "machine against tf32 on another, as a study did)",
    )
    parser.add_argument(
        "--yours",
        action="append",
        default=[],
        metavar="HW_LABEL",
        help="whose standing the report opens with (default: this machine's hw.label; with --sweep, its cells)",
    )
    parser.add_argument("--no-references", action="store_true", help="leave the reference runs out")
    parser.add_argument("--no-log", action="store_true", help="do not log the report as an MLflow run")
    return parser.parse_args(argv)


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
    found += [sources.open_file(path) for path in files]
    if contributed:
        found += sources.open_contributed()
    return found


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, write the report through trainbench.api.write_report, print what it did."""
    from trainbench import api

    args = parse(argv)
    try:
        done = api.write_report(
            args.out,
            tracking_uri=args.uri,
            files=args.files,
            experiment=args.experiment,
            sweep=args.sweep,
            models=args.model,
            filter=args.filter,
            baseline=args.baseline,
            across=args.across,
            yours=args.yours,
            references=not args.no_references,
            contributed=args.contributed,
            log=not args.no_log,
        )
    except api.BadInput as error:
        print(f"trainbench: {error}", file=sys.stderr)
        mlflow_project.record_refusal(str(error))
        return EXIT_BAD_INPUT
    for note in done.notes:
        print(f"note: {untrusted.shown(note)}", file=sys.stderr)
    print(f"report: {done.runs} runs -> {args.out / 'report.html'} (and report.md, report.json, plots)")
    if done.log_error:
        print(
            f"trainbench: the report is in {args.out}, but logging it to MLflow failed: {done.log_error}",
            file=sys.stderr,
        )
        return EXIT_NOT_LOGGED
    if done.run_id:
        print(f"logged as run {done.run_id} (trainbench.kind=report) in {done.logged_in}")
    return EXIT_OK


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
