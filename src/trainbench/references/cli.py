"""`python src/references.py`: validate the whole CSV, then write its reference runs (or, --dry-run, list them)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainbench.config import choices
from trainbench.references.mapping import EXTERNAL_MODELS, ReferenceRun, group, reference_run
from trainbench.references.reading import DEFAULT_CSV, BadReferences, read_rows
from trainbench.references.validating import row_problem
from trainbench.store import mlflow_project, tracking

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def load(path: Path) -> list[ReferenceRun]:
    """Every row validated, then grouped into reference runs. Raises BadReferences naming the first bad line.
    A file composed before (the same bytes, the same code and conf/) is read back from the cache instead."""
    from trainbench.references import cache

    cached_at = cache.cache_file(path)
    cached = cache.read(cached_at)
    if cached is not None:
        return cached
    rows, overfull = read_rows(path)
    errors = [
        f"line {line}: more fields than the header's columns (an unquoted comma in a value?)" for line in overfull
    ]
    errors += [f"line {row.line}: {problem}" for row in rows if (problem := row_problem(row))]
    runs: list[ReferenceRun] = []
    if not errors:
        with composing():  # each row's `reproduce` command is composed: one Hydra for all of them
            for cell in group(rows):
                try:
                    runs.append(reference_run(cell))
                except BadReferences as error:
                    errors.append(str(error))
    if errors:
        errors.sort(key=lambda text: int(text.split()[1].rstrip(":")))
        more = f" (and {len(errors) - 1} more bad row(s))" if len(errors) > 1 else ""
        raise BadReferences(f"{path} {errors[0]}{more}; nothing was imported")
    if not runs:
        raise BadReferences(f"{path} has no rows; nothing was imported")
    cache.write(cached_at, runs)
    return runs


@contextmanager
def composing() -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def main(argv: list[str] | None = None) -> int:
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


def model_notes(runs: list[ReferenceRun]) -> list[str]:
    known = set(choices("model")) | set(EXTERNAL_MODELS) | {"matmul"}
    unknown = sorted({r.tags["trainbench.model"] for r in runs} - known)
    return [f"model `{m}` has no conf/model/{m}.yaml; imported under that name" for m in unknown]
