"""The API's functions that get a store or a machine ready to compare: published figures into a store
(`trainbench references`) and a dataset's files onto disk (`trainbench download`). The subcommands parse their
arguments, call these and print what they return.

Bad input raises BadInput (the command line's exit 2) before anything is written; a store that fails midway
raises StoreError. Messages hide passwords and the home folder, as the command line prints them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainbench.api.errors import DEFAULT_EXPERIMENT, BadInput, StoreError

# --------------------------------------------------------------------------------------------- references


@dataclass(frozen=True)
class ReferenceRun:
    """One reference run a CSV makes: one published machine's figures for one setting."""

    name: str  # the run's name: {framework}-{model}-{backend}-bs{batch_size}
    machine: str  # hw.label
    source: str  # reference.source: who published it
    lines: tuple[int, ...]  # the CSV's lines it was made of


@dataclass(frozen=True)
class References:
    """What `trainbench references` read, and what it wrote (nothing on a dry run)."""

    path: Path  # the CSV
    runs: tuple[ReferenceRun, ...]
    notes: tuple[str, ...]  # what the reader should know (the command prints each as `note: ...`)
    written: bool  # False on a dry run: the store was not opened
    tracking_uri: str | None  # the store written (None on a dry run)
    experiment: str
    created: int = 0
    replaced: int = 0  # a changed figure: its old run deleted, a new one made
    unchanged: int = 0  # an import again changes nothing
    removed: int = 0  # runs of the CSV's sources that none of its rows makes any more


def import_references(
    csv: str | os.PathLike[str] | None = None,
    *,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    dry_run: bool = False,
) -> References:
    """Validate a CSV of published (or your own) figures whole, then write its reference runs into a store's
    experiment (trainbench.kind=reference): importing the same file again changes nothing, a changed figure
    replaces its run. csv: by default references/published-results.csv. dry_run: validate and list, write nothing.
    Raises BadInput naming the first bad line (nothing written) or a store that cannot be opened."""
    from trainbench.references.loading import load, model_notes
    from trainbench.references.reading import DEFAULT_CSV, BadReferences
    from trainbench.references.writing import write
    from trainbench.store import tracking

    path = Path(csv) if csv is not None else DEFAULT_CSV
    try:
        made = load(path)
    except BadReferences as error:
        raise BadInput(str(error)) from None
    runs = tuple(
        ReferenceRun(r.name, r.tags["hw.label"], r.tags.get("reference.source", ""), tuple(r.lines)) for r in made
    )
    notes = tuple(model_notes(made))
    if dry_run:
        return References(path, runs, notes, False, None, experiment)
    uri = tracking.resolve_tracking_uri(tracking_uri)
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        raise BadInput(str(error)) from None
    try:
        summary = write(made, client, tracking.experiment_id(client, experiment, uri))
    except Exception as error:  # MLflow raises many types here: connection, SQL
        from trainbench.store.sharing.scrubbing import scrubbed_line

        raise StoreError(
            tracking.private(f"writing reference runs into {uri} failed ({scrubbed_line(error)})")
        ) from None
    return References(
        path, runs, notes, True, uri, experiment, summary.created, summary.replaced, summary.unchanged, summary.removed
    )


# ------------------------------------------------------------------------------------------------ download


@dataclass(frozen=True)
class Downloaded:
    """A dataset's files on disk, as `trainbench download` left them, checked."""

    dataset: str  # the data config's name: cifar10, mnist, sst2, ...
    done: Literal["present", "extracted", "downloaded"]  # present: there already (or generated), nothing fetched
    folder: Path | None  # where its files are (None: a generated data set, nothing on disk)
    archive: Path | None  # the archive in data.root it was extracted from


def download(overrides: Sequence[str] = (), *, output: Literal["show", "quiet"] = "show") -> Downloaded:
    """Fetch a dataset's files now into data.root (`overrides`: the command line's, data=NAME, data.root=PATH,
    ...), or extract them from its archive already in data.root, then check that they read whole. Files already
    there and readable are left alone. output="show" prints what it extracts or fetches as it starts, as the
    command does. Raises BadInput for bad overrides, and for files or an archive that cannot be used (one line
    naming the file and what to do)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data
    from trainbench.config import CONF_DIR, ConfigError
    from trainbench.config.explain import compose_or_explain
    from trainbench.data.files import files_of
    from trainbench.store.tracking import private

    if isinstance(overrides, str):
        raise TypeError('overrides is a list of key=value strings, e.g. ["data=cifar10", "data.root=data"]')
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            composed = compose_or_explain(lambda job: compose(config_name="config", overrides=job), list(overrides))
        cfg = composed.data
        data_cfg = OmegaConf.to_object(cfg)
        missing = data.missing_files(data_cfg)
        if missing is None:
            data.check_files(data_cfg)
            files = files_of(data_cfg)
            return Downloaded(str(cfg.name), "present", files.folder if files is not None else None, None)
        archive = data.archive_on_disk(data_cfg)
        if archive is not None and output == "show":
            print(f"{cfg.name}: extracting {private(str(archive))}", flush=True, file=sys.stdout)
        data.download(data_cfg)
        data.check_files(data_cfg)
    except (ConfigError, data.DatasetError) as error:
        raise BadInput(str(error)) from None
    return Downloaded(str(cfg.name), "extracted" if archive else "downloaded", Path(missing[1]), archive)
