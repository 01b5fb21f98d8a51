"""`python src/report.py`: select, compare, plot, render; then log the report as a run `trainbench.kind=report`.

It reads every source given (tracking stores with --uri, export files, and the repository's contributed files
unless --no-contributed: the sources the sweep's first screen reads) and opens with where this machine stands: each setting it ran next to every other machine's.
Exit status: 0 written (and logged); 1 written, but logging it to MLflow failed; 2 bad input, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainbench import untrusted
from trainbench.report.writing import (  # noqa: F401  (the report's functions, read by src/report.py and the tests)
    DEFAULT_OUT,
    EXIT_BAD_INPUT,
    EXIT_NOT_LOGGED,
    EXIT_OK,
    check_across,
    check_sweep,
    labels_of_this_machine,
    log_report,
    open_sources,
    publications,
    write_report,
)
from trainbench.store import mlflow_project


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


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, write the report through trainbench.api.write_report, print what it did."""
    from trainbench import api
    from trainbench.store.tracking.redaction import redact_output

    redact_output()  # a shared file's names in a note reach the terminal with no escape live

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
