"""The API's functions that read or write a store, and what can be chosen: the command line's subcommands
(`trainbench results`, `export`, `import`, `list`) parse their flags, call these and print what they return.

Bad input raises BadInput (the command line's exit 2) before anything is written; a store that fails midway
raises StoreError with the command line's exit status. Messages hide passwords and the home folder, as the
command line prints them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainbench.api.errors import DEFAULT_EXPERIMENT, BadInput, StoreError

# ------------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class ResultRow:
    """One cell's run, as a row of `trainbench results`."""

    run_id: str
    name: str  # the run's name (its id where it has none)
    outcome: str  # trainbench.outcome
    samples_per_s: float | None
    source: str  # the store or file it was read from, as the command line names it
    values: Mapping[str, str]  # each column of the table, as printed


@dataclass(frozen=True)
class Results:
    """The cells of one or more stores and export files, oldest first, with the columns that tell them apart."""

    columns: tuple[str, ...]
    rows: tuple[ResultRow, ...]

    def markdown(self) -> str:
        """The table `trainbench results` prints (markdown, what results/*.md files are made of, which the docs site
        publishes): a value from a store or a shared file is text there, never HTML, a link or an image."""
        from trainbench.untrusted import markdown_text, redact

        def cell(text: object) -> str:  # secrets masked, as every screen shows them
            return markdown_text(redact(str(text)))

        lines = ["| " + " | ".join(map(cell, self.columns)) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(cell(row.values[name]) for name in self.columns) + " |" for row in self.rows]
        return "\n".join(lines)


def results(
    tracking_uri: str | Sequence[str] | None = None,
    *,
    files: Iterable[str | os.PathLike[str]] = (),
    experiment: str = DEFAULT_EXPERIMENT,
    sweep: str | None = None,
    contributed: bool | None = None,
) -> Results:
    """The runs table of `trainbench results`: the cells of the stores (one URI or several; by default
    $MLFLOW_TRACKING_URI, else the project's), of export files, and of results/contributed/ (contributed=False:
    not those; nor with `sweep`, one sweep run's cells). Files given alone are listed alone: neither the default
    store nor results/contributed/ unless asked for (a file being checked before it is shared reads on its own)."""
    from trainbench.results_table import columns
    from trainbench.store import sources, tracking

    if sweep is not None and not re.fullmatch(r"[0-9a-f]{32}", sweep):  # checked before it goes into a filter
        raise BadInput(f"--sweep {sweep!r} is not a run id (32 hex digits: {WHERE_A_SWEEP_ID_IS})")
    given = [tracking_uri] if isinstance(tracking_uri, str) else list(tracking_uri or [])
    paths = [Path(f) for f in files]
    uris = [tracking.resolve_tracking_uri(uri) for uri in given]
    if not uris and not paths:
        uris = [tracking.resolve_tracking_uri(None)]
    if contributed is None:
        contributed = bool(uris)
    try:
        stores = [sources.open_store(uri) for uri in uris]
        opened: list[Any] = [*stores, *(sources.open_file(path) for path in paths)]
        if contributed and not sweep:
            opened += sources.open_contributed(leaving_out=paths)  # a contributed file named as well is read once
        if not sweep:  # the published runs a sweep imports (and the contributed ones, named by their files above)
            opened += [sources.shared_source(s.client, s.uri, contributed) for s in stores]
    except (tracking.TrackingUnavailable, sources.SourceError) as error:
        raise BadInput(tracking.private(str(error))) from None
    if stores and not paths and not any(s.client.get_experiment_by_name(experiment) for s in stores):
        names = ", ".join(s.name for s in stores)
        raise BadInput(f"no experiment {experiment!r} in {names}: run a cell first")
    if sweep:
        found = sources.search(
            opened, experiment, f"tags.`trainbench.kind` = 'cell' and tags.`mlflow.parentRunId` = '{sweep}'"
        )
    else:  # cells, and the published figures they are compared with
        found = [
            f
            for kind in ("cell", "reference")
            for f in sources.search(opened, experiment, f"tags.`trainbench.kind` = '{kind}'")
        ]
    if sweep and not found:
        _is_a_sweep(sweep, opened, experiment)
    found.sort(key=lambda f: f.run.info.start_time)
    chosen = columns(found, len(opened) > 1)
    rows = tuple(
        ResultRow(
            run_id=f.run.info.run_id,
            name=f.run.info.run_name or f.run.info.run_id,
            outcome=f.run.data.tags.get("trainbench.outcome", ""),
            samples_per_s=f.run.data.metrics.get("samples_per_s"),
            source=f.source.name,
            values={name: cell(f) for name, cell in chosen},
        )
        for f in found
    )
    return Results(tuple(name for name, _ in chosen), rows)


WHERE_A_SWEEP_ID_IS = "a sweep's closing `MLflow:` line names it, `sweep run <id>`"


def _is_a_sweep(sweep: str, opened: list[Any], experiment: str) -> None:
    """Raise BadInput unless `sweep` is a sweep run of the stores and files read (a sweep that left no cell lists
    as an empty table)."""
    from trainbench.store import sources

    sweeps = [run for s in opened for run in s.search(experiment, "tags.`trainbench.kind` = 'sweep'")]
    if any(run.info.run_id == sweep for run in sweeps):
        return
    # An imported sweep has a new id in the store; the one its machine printed is kept in a tag.
    here = [run.info.run_id for run in sweeps if run.data.tags.get(sources.IMPORT_KEY) == sweep]
    if here:
        raise BadInput(f"--sweep {sweep}: that sweep was imported here as {here[0]}: give that id")
    raise BadInput(
        f"--sweep {sweep}: no sweep run of that id in experiment {experiment!r} of "
        f"{', '.join(s.name for s in opened)}: give a sweep run's id ({WHERE_A_SWEEP_ID_IS}), or add its store "
        "with --uri or its export file"
    )


# ---------------------------------------------------------------------------------------- export, import


@dataclass(frozen=True)
class Exported:
    """What `trainbench export` wrote."""

    path: Path
    tracking_uri: str
    experiment: str
    runs: int
    cells: int
    sweeps: int
    unfinished: int  # runs left out because they (or their sweep) were still running


def export(
    path: str | os.PathLike[str],
    *,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    sweep: str | None = None,
    filter: str = "",  # noqa: A002  (the command line's --filter)
) -> Exported:
    """Write a store's finished cells and sweeps (only `sweep`'s, only those matching the MLflow search `filter`)
    to one JSON file that another machine imports (trainbench.import_runs). Refuses to write over anything but a
    plain file, or to write nothing."""
    from trainbench.store import tracking
    from trainbench.store.sharing.exporting import export_runs, output_problem, write_export
    from trainbench.store.sharing.file_format import RUN_ID
    from trainbench.store.sharing.scrubbing import scrubbed_line

    out = Path(path)
    if not out.parent.is_dir():
        raise BadInput(tracking.private(f"cannot write {out}: the folder {out.parent} does not exist"))
    special = output_problem(out)
    if special:
        raise BadInput(tracking.private(f"will not write {out}: {special}; name a new file, e.g. -o export.json"))
    if sweep and not RUN_ID.fullmatch(sweep):
        raise BadInput(f"--sweep {sweep!r} is not a run id (32 hex digits, as the sweep's summary prints it)")
    _quiet()
    uri = tracking.resolve_tracking_uri(tracking_uri)
    shown = tracking.private(uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :].split("?", 1)[0]).exists():
        raise BadInput(f"no MLflow store at {shown}: nothing to export")  # opening it would create an empty one
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        raise BadInput(tracking.private(str(error))) from None
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise BadInput(f"no experiment {experiment!r} in {shown}: nothing to export")
    try:
        runs, summary = export_runs(client, found.experiment_id, store_uri=uri, sweep=sweep, filter_string=filter)
        if not runs:
            also = f" ({summary.unfinished} still running: export them when they end)" if summary.unfinished else ""
            selection = f"sweep {sweep}" if sweep else "cells or sweeps"
            raise BadInput(
                f"no {selection} in experiment {experiment!r} of {shown}"
                + (f" matching {filter!r}" if filter.strip() else "")
                + f"{also}: nothing written"
            )
        write_export(out, experiment, runs)
    except BadInput:
        raise
    except OSError as error:
        raise StoreError(tracking.private(f"cannot write {out}: {error.strerror or error}")) from None
    except Exception as error:  # MLflow raises many types here: connection, SQL, artifact repository
        if filter.strip() and getattr(error, "error_code", None) == "INVALID_PARAMETER_VALUE":
            raise BadInput(f"--filter {filter!r}: {scrubbed_line(error)}") from None  # the selection's own are valid
        raise StoreError(f"reading {shown} failed ({scrubbed_line(error)}): nothing written") from None
    return Exported(out, uri, experiment, summary.runs, summary.cells, summary.sweeps, summary.unfinished)


@dataclass(frozen=True)
class Imported:
    """One export file added to a store by `trainbench import`."""

    path: Path
    name: str  # the file's name as the command line prints it
    imported: int  # runs added now
    already_here: int  # runs the store held already (an import again changes nothing)


def import_runs(
    files: Iterable[str | os.PathLike[str]],
    *,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> tuple[Imported, ...]:
    """Add the runs of `trainbench export` files to a store's experiment (created where missing); every file is
    read whole before the store is touched, and importing a run again changes nothing."""
    from trainbench import untrusted
    from trainbench.store import tracking
    from trainbench.store.import_guard import ImportStopped, StopRequests, import_lock
    from trainbench.store.sharing.file_format import SharingError, load
    from trainbench.store.sharing.importing import ImportFailed, import_files
    from trainbench.store.sharing.scrubbing import scrubbed_line

    problem = untrusted.path_problem(experiment)
    if problem:
        raise BadInput(f"--experiment {experiment!r} must be a name, not a path: it holds {problem}")
    paths = [Path(f) for f in files]
    if not paths:
        raise BadInput("name the files to import (written by trainbench export)")
    try:
        loaded = [load(str(path)) for path in paths]  # every file whole, before the store is touched
    except SharingError as error:
        raise BadInput(tracking.private(f"{error}; nothing was imported")) from None
    _quiet()
    uri = tracking.resolve_tracking_uri(tracking_uri)
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        raise BadInput(tracking.private(f"{error}; nothing was imported")) from None
    try:
        with StopRequests() as stops, import_lock(uri, stops, tracking.private(uri)):
            experiment_id = tracking.experiment_id(client, experiment, uri)
            summaries = import_files(client, experiment_id, loaded, stops)
    except ImportFailed as error:
        raise StoreError(tracking.private(str(error)), _failed_status(error.__cause__)) from None
    except ImportStopped as stop:  # while waiting for the lock or the experiment: nothing written
        raise StoreError(
            f"the import was stopped ({stop}) before it wrote anything: nothing was imported", 128 + stop.signum
        ) from None
    except Exception as error:  # the experiment could not be read or created: nothing written yet
        raise StoreError(
            tracking.private(f"cannot use experiment {experiment!r} in {uri} ({scrubbed_line(error)})")
        ) from None
    return tuple(
        Imported(path, tracking.private(file.name), summary.imported, summary.already_here)
        for path, file, summary in zip(paths, loaded, summaries, strict=True)
    )


def _failed_status(cause: BaseException | None) -> int:
    from trainbench.store.import_guard import ImportStopped

    if isinstance(cause, ImportStopped):
        return 128 + cause.signum
    return 130 if isinstance(cause, KeyboardInterrupt) else 1


def _quiet() -> None:
    """MLflow draws a progress bar on stderr for every artifact it moves: dozens of lines for one export."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


# ------------------------------------------------------------------------------------------------ choices


@dataclass(frozen=True)
class Choice:
    """One thing a cell can be made of, as `trainbench list` prints it."""

    name: str
    description: str  # the first sentence of its config file's opening comment
    override: str  # what chooses it: model=mlp, +experiment=NAME


def choices(what: str | None = None) -> dict[str, tuple[Choice, ...]]:
    """What can be chosen, each list under its name (models, data, tasks, frameworks, devices, precisions,
    optimizers, optimizations, presets), in `trainbench list`'s order; `what`: that list alone."""
    from trainbench.usage import LISTS, description
    from trainbench.usage import choices as names

    if what is not None and what not in LISTS:
        raise BadInput(f"`trainbench list {what}`: list one of {', '.join(LISTS)}")
    chosen = {what: LISTS[what]} if what is not None else LISTS
    return {
        listed: tuple(
            Choice(
                name, description(group, name), f"+experiment={name}" if group == "experiment" else f"{group}={name}"
            )
            for name in names(group)
        )
        for listed, group in chosen.items()
    }


# ------------------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Report:
    """What `trainbench report` wrote, and where it logged it."""

    folder: Path
    files: tuple[Path, ...]  # report.html, report.md, report.json and the plots
    runs: int  # the runs compared (cells and reference runs)
    notes: tuple[str, ...]  # what the reader should know (the command prints each as `note: ...`)
    run_id: str | None  # the report's own MLflow run (trainbench.kind=report); None when not logged
    logged_in: str | None  # "experiment E of STORE", where run_id is
    log_error: str | None  # why logging it failed (the files are written): the command's exit 1


def write_report(
    out: str | os.PathLike[str] = "outputs/report",
    *,
    tracking_uri: str | Sequence[str] | None = None,
    files: Iterable[str | os.PathLike[str]] = (),
    experiment: str = DEFAULT_EXPERIMENT,
    sweep: str | None = None,
    models: Sequence[str] = (),
    filter: str | None = None,  # noqa: A002  (the command line's --filter)
    baseline: str | None = None,
    across: Sequence[str] = (),
    yours: Sequence[str] = (),
    references: bool = True,
    contributed: bool = True,
    log: bool = True,
) -> Report:
    """`trainbench report` (trainbench.report is the package that makes it): compare the cells of the stores and export files with other machines' and published
    reference runs, like with like; write tables, plots and one HTML page into `out`, then log them as a run."""
    from trainbench import untrusted
    from trainbench.report import writing
    from trainbench.report.selection import ReportError, Selection, first_line, select
    from trainbench.store import sources, tracking

    given = [tracking_uri] if isinstance(tracking_uri, str) else list(tracking_uri or [])
    folder = Path(out)
    selection = Selection(experiment, sweep, tuple(models), filter, references, tuple(across))
    try:
        opened = writing.open_sources(given, [Path(f) for f in files], contributed)
        stores = [s for s in opened if isinstance(s, sources.StoreSource)]
        names = ", ".join(s.name for s in opened)
        if sweep:
            writing.check_sweep(stores, sweep)
        if not any(s.client.get_experiment_by_name(experiment) for s in stores) and not any(
            isinstance(s, sources.FileSource) for s in opened
        ):
            raise ReportError(
                f"no experiment `{experiment}` in {names}: run python src/run.py or "
                "python src/references.py first, or name another with --experiment"
            )
        entries, notes = select(
            opened, selection, mine=None if sweep else set(yours) or writing.labels_of_this_machine()
        )
        if not entries:
            raise ReportError(f"nothing to report: no finished cell or reference run matches ({selection.describe()})")
        writing.check_across(entries, selection.across)
        opening, cells = None, None
        if sweep:  # its cells against every machine's runs of their settings, as the sweep's first screen had them
            from trainbench.report import standing

            cells = {e.run_id for e in entries if not e.column.reference}
            everything = Selection(experiment, None, tuple(models), filter, references)
            wide, _ = select(opened, everything, mine_runs=cells, histories=False)
            opening = standing.standings(wide, cells)
        written = writing.write_report(entries, folder, selection, baseline, names, notes, opening, cells)
    except (ReportError, sources.SourceError, tracking.TrackingUnavailable) as error:
        raise BadInput(untrusted.shown(str(error))) from None
    done = Report(folder, tuple(written), len(entries), tuple(notes), None, None, None)
    if not log or not stores:
        return done
    store = stores[0]
    try:
        found = store.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else tracking.experiment_id(store.client, experiment, store.uri)
        run_id = writing.log_report(store.client, experiment_id, written, selection, entries)
    except Exception as error:  # the artifact store may be elsewhere (S3, a server) and fail on its own
        return dataclasses.replace(done, log_error=first_line(str(error)))
    # Under `mlflow run`, its run: in the experiment `mlflow run` chose, which need not be `experiment`.
    logged_in = store.client.get_experiment(store.client.get_run(run_id).info.experiment_id).name
    return dataclasses.replace(done, run_id=run_id, logged_in=f"experiment {logged_in} of {store.name}")
