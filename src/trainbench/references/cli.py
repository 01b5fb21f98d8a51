"""`python src/references.py`: validate the whole CSV, then write its reference runs (or, --dry-run, list them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainbench.references.reading import DEFAULT_CSV
from trainbench.store import mlflow_project, tracking

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def main(argv: list[str] | None = None) -> int:
    from trainbench.store.tracking.redaction import redact_output

    redact_output()  # a CSV's text in an error or the dry run's table reaches the terminal with no escape live
    parser = argparse.ArgumentParser(
        prog="python src/references.py",
        description="Import published (or your own) training-speed figures into MLflow as reference runs.",
    )
    parser.add_argument(
        "csv",
        nargs="?",
        type=Path,
        default=DEFAULT_CSV,
        help="figures to import, one per row (default: references/published-results.csv)",
    )
    parser.add_argument("--experiment", default="trainbench", help="MLflow experiment (default: trainbench)")
    parser.add_argument("--dry-run", action="store_true", help="validate and list the runs; write nothing")
    args = parser.parse_args(argv)
    from trainbench import api

    try:
        done = api.import_references(args.csv, experiment=args.experiment, dry_run=args.dry_run)
    except api.BadInput as error:
        print(f"trainbench: {error}", file=sys.stderr)
        mlflow_project.record_refusal(str(error))
        return EXIT_BAD_INPUT
    except api.StoreError as error:
        print(f"trainbench: {error}", file=sys.stderr)
        return error.exit_status
    for note in done.notes:
        print(f"note: {note}", file=sys.stderr)
    if not done.written:
        for run in done.runs:
            print(f"{run.name:40s} {run.machine:28s} lines {','.join(map(str, run.lines))}")
        print(f"{len(done.runs)} reference runs from {args.csv} are valid; nothing written (--dry-run)")
        return EXIT_OK
    summary = (
        f"{len(done.runs)} reference runs from {args.csv}: {done.created} created, {done.replaced} replaced, "
        f"{done.unchanged} unchanged, {done.removed} removed (experiment {args.experiment}"
    )
    print(f"{summary}, {done.tracking_uri})")
    project_run = mlflow_project.run_id()
    if project_run and done.tracking_uri:  # the run `mlflow run -e references` names says what was imported, and where
        mlflow_project.describe(
            tracking.client(done.tracking_uri),
            project_run,
            "finished",
            None,
            f"trainbench imported {summary}), as runs tagged `trainbench.kind=reference`.",
        )
    return EXIT_OK
