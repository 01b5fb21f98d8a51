"""`trainbench export` and `trainbench import`: their command lines, their one-line errors and exit statuses."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from trainbench import untrusted
from trainbench.store import tracking
from trainbench.store.import_guard import ImportStopped, StopRequests, import_lock
from trainbench.store.sharing.exporting import export_runs, output_problem, write_export
from trainbench.store.sharing.file_format import RUN_ID, SharingError, load
from trainbench.store.sharing.importing import ImportFailed, import_files
from trainbench.store.sharing.scrubbing import scrubbed_line

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
    if args.sweep and not RUN_ID.fullmatch(args.sweep):
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
            return _fail(f"--filter {args.filter!r}: {scrubbed_line(error)}")  # the selection's own clauses are valid
        return _fail(f"reading {uri} failed ({scrubbed_line(error)}): nothing written", EXIT_FAILED)
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
        return _fail(f"cannot use experiment {args.experiment!r} in {uri} ({scrubbed_line(error)})", EXIT_FAILED)
    for exported, summary in zip(files, summaries, strict=True):
        print(
            f"{tracking.private(exported.name)}: {summary.imported} runs imported, {summary.already_here} already here "
            f"(experiment {args.experiment}, {tracking.private(uri)})"
        )
    return EXIT_OK
