"""`trainbench results`: parse the flags, print trainbench.api.results() (the table of trainbench.results_table)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from trainbench import api, results_table, untrusted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="trainbench results", description=" ".join((results_table.__doc__ or "").split("\n\n")[0].split())
    )
    parser.add_argument(
        "files", nargs="*", type=Path, metavar="EXPORT_FILE", help="export files (trainbench export) to list too"
    )
    parser.add_argument(
        "--uri",
        action="append",
        default=[],
        help="a tracking store; repeat for several (default: $MLFLOW_TRACKING_URI, else this project's)",
    )
    parser.add_argument("--experiment", default="trainbench")
    parser.add_argument("--sweep", default=None, help="only the cells of this sweep run")
    parser.add_argument(
        "--contributed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="list the runs of results/contributed/ too, as the first screen and the report read them (the "
        "default, except where only EXPORT_FILEs are given: then they are listed alone; --no-contributed: never)",
    )
    args = parser.parse_args(argv)
    try:
        table = api.results(
            args.uri, files=args.files, experiment=args.experiment, sweep=args.sweep, contributed=args.contributed
        )
    except api.BadInput as error:
        parser.exit(2, f"trainbench: {untrusted.shown(str(error))}\n")
    print(table.markdown())
    return 0
