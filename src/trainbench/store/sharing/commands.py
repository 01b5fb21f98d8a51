"""`trainbench export` and `trainbench import`: their command lines, their one-line errors and exit statuses; the
work is trainbench.api.export and trainbench.api.import_runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trainbench import api
from trainbench.store import tracking
from trainbench.untrusted import for_terminal

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CTRL_C = 0, 1, 2, 130


def _fail(message: str, status: int = EXIT_BAD_INPUT) -> int:
    # One line, whatever a file put in the message (a run name's \r would draw "imported OK" over it)
    print(f"trainbench: {for_terminal(tracking.private(message))}", file=sys.stderr, flush=True)
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
    try:
        done = api.export(
            args.output, tracking_uri=args.uri, experiment=args.experiment, sweep=args.sweep, filter=args.filter
        )
    except api.BadInput as error:
        return _fail(str(error))
    except api.StoreError as error:
        return _fail(str(error), error.exit_status)
    note = f"; left out {done.unfinished} still running" if done.unfinished else ""
    print(
        f"exported {done.runs} runs ({done.cells} cells, {done.sweeps} sweeps) from "
        f"{tracking.private(done.tracking_uri)} to {tracking.private(args.output)}{note}"
    )
    return EXIT_OK


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
    try:
        done = api.import_runs(args.files, tracking_uri=args.uri, experiment=args.experiment)
    except api.BadInput as error:
        return _fail(str(error))
    except api.StoreError as error:
        return _fail(str(error), error.exit_status)
    uri = tracking.resolve_tracking_uri(args.uri)
    for imported in done:
        print(
            f"{imported.name}: {imported.imported} runs imported, {imported.already_here} already here "
            f"(experiment {args.experiment}, {tracking.private(uri)})"
        )
    return EXIT_OK
