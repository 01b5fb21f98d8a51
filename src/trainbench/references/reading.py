"""Reading a references CSV: the header, then each non-blank row with its line number."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainbench.config import PROJECT_ROOT

DEFAULT_CSV = PROJECT_ROOT / "references" / "published-results.csv"

# What a figure was measured on and of: the machine, the software, the workload.
SUBJECT_COLUMNS = (
    "system",
    "device_kind",
    "accelerator",
    "framework",
    "framework_version",
    "model",
    "dataset",
    "batch_size",
    "precision",
)
# Every file has these.
COLUMNS = ("source", "reference", *SUBJECT_COLUMNS, "epoch", "metric", "value", "unit", "notes")
# Later additions: a file without them (a colleague's older CSV) reads as if they were blank.
OPTIONAL_COLUMNS = (
    "series",  # the source's own name for the line or column a figure belongs to, e.g. "M1 (Default)"
    "timed_region",  # steps | epoch | fit | build_fit (blank: steps for throughput figures, epoch for epoch times)
    "pipeline",  # device | loader (blank: device)
    "channels_last",  # true | false (blank: false)
    "power_scope",  # gpu | package | board: what a power figure covers (required on power rows)
    "source_line",  # where in the source the figure is: URL + section / line / table
    # the overrides of `python src/run.py` that measure exactly this row's setting here (a preset, narrowed to
    # the row); blank where no local cell can (the row's notes say why)
    "reproduce",
)
EXTRA = "(extra)"  # csv.DictReader's key for fields beyond the header


class BadReferences(ValueError):
    """A CSV the importer refuses. str() is the one line shown to the user."""


@dataclass(frozen=True)
class CsvRow:
    """One figure as written in the CSV (values stripped), and the line it is on."""

    line: int
    values: dict[str, str]

    def __getitem__(self, column: str) -> str:
        return self.values[column]


def read_rows(path: Path) -> tuple[list[CsvRow], list[int]]:
    """The rows of the file, and the lines that have more fields than the header (an unquoted comma)."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as error:
        raise BadReferences(f"cannot read {path}: {error.strerror or error}") from None
    with handle:
        reader = csv.DictReader(handle, restkey=EXTRA)
        _check_header(path, reader.fieldnames or [])
        rows, overfull = [], []
        for raw in reader:
            if raw.get(EXTRA):
                overfull.append(reader.line_num)
            values = {column: (raw.get(column) or "").strip() for column in (*COLUMNS, *OPTIONAL_COLUMNS)}
            if any(values.values()):  # a blank line is no figure
                rows.append(CsvRow(reader.line_num, values))
    return rows, overfull


def _check_header(path: Path, header: Sequence[str]) -> None:
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise BadReferences(
            f"{path} line 1: missing column(s) {', '.join(missing)}; the header must be "
            f"{','.join(COLUMNS)} (optionally followed by {','.join(OPTIONAL_COLUMNS)})"
        )
