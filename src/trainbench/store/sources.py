"""Where compared runs come from: tracking stores (SQLite, a server) and export files, read alike.

`python src/report.py --uri A --uri B colleague.json` and `trainbench results` read several at once; the
sweep's comparison page reads its store and the repository's contributed files (results/contributed/). A run
found twice (a store that imported a file, and the file itself) counts once: runs are keyed by the id they
were first recorded under (`trainbench.import.run_id`, else their own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trainbench.config import PROJECT_ROOT

CONTRIBUTED = PROJECT_ROOT / "results" / "contributed"  # export files from machines we do not have
SHARED_EXPERIMENT = "trainbench-shared"  # where sweeps import the published and contributed runs (shared_runs)
IMPORT_KEY = "trainbench.import.run_id"  # an imported run's original id (trainbench.store.sharing)
IMPORTED_FROM = "trainbench.imported_from"


class SourceError(ValueError):
    """A source that cannot be read. str() is the one line shown to the user."""


class Source(Protocol):
    name: str  # what the user typed, credentials and home folder hidden
    contributed: bool

    def search(self, experiment: str, filter_string: str) -> list[Any]:
        """The experiment's active runs matching an MLflow filter (mlflow.entities.Run)."""

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of a metric of one of its runs, by step."""


@dataclass
class StoreSource:
    uri: str
    name: str
    contributed: bool = False
    client: Any = None
    experiment: str | None = None  # this experiment whatever is asked: the store's other machines' runs
    references_only: bool = False  # its published reference runs, not its cells (`--no-contributed`)

    def search(self, experiment: str, filter_string: str) -> list[Any]:
        from trainbench.store.runs import search_all

        found = self.client.get_experiment_by_name(self.experiment or experiment)
        runs = search_all(self.client, [found.experiment_id], filter_string) if found else []
        return [r for r in runs if r.data.tags.get("trainbench.kind") == "reference"] if self.references_only else runs

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in self.client.get_metric_history(run_id, key))


@dataclass
class FileSource:
    path: Path
    name: str
    contributed: bool = False
    exported: Any = field(default=None, repr=False)

    def search(self, experiment: str, filter_string: str) -> list[Any]:
        """Every run of the file, whatever experiment it was exported from: the file is what was shared."""
        from mlflow.utils.search_utils import SearchUtils

        return list(SearchUtils.filter(self.exported.runs, filter_string)) if filter_string else self.exported.runs

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return list(self.exported.history(run_id, key))


def open_store(uri: str) -> StoreSource:
    from trainbench.store import tracking

    return StoreSource(uri, tracking.private(uri), client=tracking.open_store(uri))


def open_file(path: Path, contributed: bool = False) -> FileSource:
    from trainbench.store.sharing.file_format import SharingError
    from trainbench.store.sharing.importing import read_export

    try:
        exported = read_export(path)
    except SharingError as error:
        raise SourceError(str(error)) from None
    except OSError as error:
        raise SourceError(f"cannot read {path}: {error.strerror or error}") from None
    shown = f"results/contributed/{path.name}" if contributed else str(path)
    return FileSource(path, shown, contributed, exported)


def contributed_files(folder: Path = CONTRIBUTED) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def readable_contributed() -> list[FileSource]:
    """results/contributed/'s files that read, each that does not left out with one line on stderr (a broken
    file must not hide a comparison): its name and what is wrong, paths made private, escapes spelled out."""
    import sys

    from trainbench import untrusted
    from trainbench.store import tracking

    opened = []
    for path in contributed_files():
        try:
            opened.append(open_file(path, contributed=True))
        except SourceError as error:
            said = untrusted.for_terminal(tracking.private(f"{path.name}: {error}"))
            sys.stderr.write(f"trainbench: left out results/contributed/{said}\n")
    return opened


def shared_source(client: Any, uri: str, contributed: bool = True) -> StoreSource:
    """The store's experiment of published and contributed runs (trainbench.store.shared_runs), read as one source:
    its runs that are not published references came from results/contributed/, and are shown as contributed
    (`contributed=False`: its published rows only)."""
    from trainbench.store.tracking import private

    name = f"{private(uri)} (experiment {SHARED_EXPERIMENT})"
    return StoreSource(uri, name, True, client, experiment=SHARED_EXPERIMENT, references_only=not contributed)


def compared_with(client: Any, uri: str) -> list[Any]:
    """What a sweep's cells are set against on its first screen and in its suite summary: this store,
    results/contributed/ (each file that reads, its runs named by their file), and the published and contributed
    runs a sweep imports into the store (a run read twice counts once: first_key)."""
    from trainbench.store.tracking import private

    return [StoreSource(uri, private(uri), client=client), *readable_contributed(), shared_source(client, uri)]


def open_contributed(folder: Path = CONTRIBUTED, leaving_out: Iterable[Path] = ()) -> list[FileSource]:
    """results/contributed/'s files, less those in `leaving_out` (files opened already, by another name too)."""
    opened = {path.resolve() for path in leaving_out}
    return [open_file(path, contributed=True) for path in contributed_files(folder) if path.resolve() not in opened]


def first_key(run: Any) -> str:
    """The id a run was first recorded under, wherever it has travelled since; a published row's own key
    (`python src/references.py` and a sweep's import of the same CSV row into two experiments are one row)."""
    tags = run.data.tags
    published = tags.get("reference.key") if tags.get("trainbench.kind") == "reference" else None
    if published:  # the same row with the same figures; a corrected row of a newer CSV is another run
        return f"reference:{published}:{tags.get('reference.content_hash', run.info.run_id)}"
    return str(tags.get(IMPORT_KEY) or run.info.run_id)


@dataclass
class Found:
    """A run and the source it was read from."""

    run: Any
    source: Any

    def history(self, key: str) -> list[tuple[int, float]]:
        return self.source.history(self.run.info.run_id, key)


def search(sources: list[Any], experiment: str, filter_string: str) -> list[Found]:
    """The matching runs of every source, each once (the first source that has it wins)."""
    seen: set[str] = set()
    found: list[Found] = []
    for source in sources:
        for run in source.search(experiment, filter_string):
            key = first_key(run)
            if key not in seen:
                seen.add(key)
                found.append(Found(run, source))
    return found
