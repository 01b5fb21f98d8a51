"""Every dataset and pretrained weights file a sweep needs, on disk and readable before its first cell runs."""

from __future__ import annotations

from typing import Any

from trainbench.config import CellConfig, PlainError
from trainbench.store import tracking


def fetch_or_refuse_missing_files(cells: list[CellConfig]) -> None:
    """Every dataset and weights file the sweep needs, on disk and readable before the first cell and before
    any run is created: a dataset's archive lying in data.root is extracted (one line says so), else the files
    are downloaded once here when allowed and online; then every file is checked (trainbench.data.check_files:
    headers, sizes, counts) and each cell's data.num_samples / num_val_samples against what the files hold.
    Otherwise one line (PlainError, exit 2) naming each folder or file, what is wrong and what to do."""
    from trainbench import data as datasets

    problems: list[str] = []
    held: dict[str, tuple[int, int] | None] = {}
    for cell in cells:
        if not getattr(cell.task, "uses_model", True):
            continue
        files = datasets.files_of(cell.data)
        key = str(files.folder) if files is not None else f"{type(cell.data).__name__}:{cell.data.name}"
        if key not in held:
            try:
                held[key] = _fetch_and_check(cell.data)
            except datasets.DatasetError as error:
                held[key] = None
                problems.append(str(error))
        counts = held[key]
        if counts is not None:
            try:
                datasets.check_counts(cell.data, counts)
            except datasets.DatasetBroken as error:
                if str(error) not in problems:
                    problems.append(str(error))
        weights = _missing_weights(cell)
        if weights and weights not in problems:
            problems.append(weights)
    if problems:
        raise PlainError("data", " | ".join(tracking.private(p) for p in problems))


def _fetch_and_check(cfg: Any) -> tuple[int, int] | None:
    """The samples (training, validation) a dataset's files hold, once they are on disk and checked; None for
    generated data. Raises trainbench.data.DatasetError."""
    from trainbench import data as datasets

    missing = datasets.missing_files(cfg)
    if missing:
        what, folder, files, url = missing
        archive = datasets.archive_on_disk(cfg)
        if archive is not None:
            print(
                f"trainbench: {what} is not in {tracking.private(str(folder))}: extracting it from "
                f"{tracking.private(str(archive))}",
                flush=True,
            )
            datasets.extract_archive(cfg)
        elif getattr(cfg, "download", False):
            print(
                f"trainbench: {what} is not in {tracking.private(str(folder))}: downloading it once for the "
                "whole sweep",
                flush=True,
            )
            datasets.download(cfg)
        else:
            raise datasets.DatasetMissing(
                f"{what} not found: expected {', '.join(files)} in {folder} (data.download=false); download with "
                f"`trainbench download data={cfg.name}` or from {url}"
            )
    return datasets.check_files(cfg)


def _missing_weights(cell: CellConfig) -> str | None:
    from trainbench.config.schema import VisionModel

    model = cell.model
    if not isinstance(model, VisionModel) or not model.pretrained:
        return None
    found = cell.framework.pretrained_weights(str(model.weights_file))
    if found is None or found[0].exists():  # a framework that loads none was refused when the cell was judged
        return None
    path, address = found
    return (
        f"pretrained weights for {model.name} not found: expected {path.name} in "
        f"{tracking.private(str(path.parent))}; download {address} there once when online, or set "
        "model.pretrained=false"
    )
