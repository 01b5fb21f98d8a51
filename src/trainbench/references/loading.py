"""A CSV of reference figures read whole: every row validated, then grouped into reference runs (what the
`references` command, the Python API and the import of others' runs write)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainbench.config import choices
from trainbench.references.mapping import EXTERNAL_MODELS, ReferenceRun, group, reference_run
from trainbench.references.reading import BadReferences, read_rows
from trainbench.references.validating import row_problem


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


def model_notes(runs: list[ReferenceRun]) -> list[str]:
    known = set(choices("model")) | set(EXTERNAL_MODELS) | {"matmul"}
    unknown = sorted({r.tags["trainbench.model"] for r in runs} - known)
    return [f"model `{m}` has no conf/model/{m}.yaml; imported under that name" for m in unknown]
