"""The comparison model: tables whose rows hold only runs that measured the same quantity.

A table is one task, one model and one metric. A row is one comparison key (trainbench.runs): the data,
image size or sequence length, samples per epoch, epochs, precision, batch size, compile / optimize,
channels_last, pipeline, timed region, device count and the model's shape. A column is one device
(hw.label, backend, framework; a reference column also names its source). Several runs in one cell are
repeats of the same measurement: the cell shows their median. Speed-ups compare cells of one row only.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from trainbench.config import choices
from trainbench.report.selection import Column, Entry, ReportError
from trainbench.runs import UNKNOWN


@dataclass(frozen=True)
class TableMetric:
    name: str
    title: str
    unit: str
    higher_is_better: bool


# In order of preference: a run appears in the table of the first metric it has (and in the later
# ones where that metric's table exists for its task and model anyway).
TABLE_METRICS = (
    TableMetric("samples_per_s", "throughput", "samples/s", True),
    TableMetric("epoch_time_s", "mean epoch time (the epochs after the first, when there are several)", "s", False),
    TableMetric("total_time_s", "total training time", "s", False),
    TableMetric("peak_tflops", "peak matmul throughput", "TFLOPS", True),
)


@dataclass
class Cell:
    value: float
    runs: list[str]
    speedup: float | None = None
    source_lines: list[str] = field(default_factory=list)


@dataclass
class Row:
    key: tuple[str, ...]
    settings: dict[str, str]
    variant: str
    cells: dict[str, Cell] = field(default_factory=dict)  # column label -> cell
    commands: list[str] = field(default_factory=list)  # how to measure it here, when no local run has


@dataclass
class Table:
    task: str
    model: str
    metric: TableMetric
    columns: list[Column]
    baseline: Column | None
    rows: list[Row]
    sample_kinds: list[str]
    baseline_reason: str = ""  # why there are no speed-ups, when there are none

    @property
    def title(self) -> str:
        return f"{self.model} ({self.task}): {self.metric.name}"


def build_tables(entries: list[Entry], baseline: str | None, notes: list[str]) -> list[Table]:
    """One table per task, model and metric; see TABLE_METRICS for which metric a run's figure goes into."""
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.task, e.model)].append(e)
    tables: list[Table] = []
    for (task, model), group in sorted(groups.items()):
        firsts = set()
        for e in group:
            first = next((m.name for m in TABLE_METRICS if e.value(m.name) is not None), None)
            if first is None:
                notes.append(
                    f"{e.run_name} ({e.column.label}) has none of "
                    f"{', '.join(m.name for m in TABLE_METRICS)}: left out of the tables"
                )
            firsts.add(first)
        for metric in TABLE_METRICS:
            if metric.name in firsts:
                members = [e for e in group if e.value(metric.name) is not None]
                tables.append(build_table(task, model, metric, members, baseline))
    for table in tables:
        if len(table.sample_kinds) > 1:
            notes.append(
                f"the {table.title} table mixes {' and '.join(table.sample_kinds)} per second "
                "(published units): compare within one kind only"
            )
    if baseline and tables and not any(t.baseline for t in tables):
        labels = sorted({c.hw_label for t in tables for c in t.columns})
        raise ReportError(
            f"--baseline {baseline!r} matches no column; use a column label or one of: " + ", ".join(labels)
        )
    return tables


def build_table(task: str, model: str, metric: TableMetric, members: list[Entry], baseline: str | None) -> Table:
    columns = sorted({e.column for e in members})
    by_key: dict[tuple[str, ...], list[Entry]] = defaultdict(list)
    for e in members:
        by_key[e.key].append(e)
    rows = sorted((build_row(entries, metric.name) for entries in by_key.values()), key=display_order)
    base, reason = choose_baseline(columns, rows, baseline)
    if base:
        for row in rows:
            add_speedups(row, base, metric.higher_is_better)
    kinds = sorted({e.sample_kind for e in members if e.sample_kind}) if metric.name == "samples_per_s" else []
    return Table(task, model, metric, columns, base, rows, kinds, reason)


def build_row(members: list[Entry], metric: str) -> Row:
    first = members[0]
    by_column: dict[Column, list[Entry]] = defaultdict(list)
    for e in members:
        by_column[e.column].append(e)
    row = Row(first.key, first.settings, first.variant)
    for column, runs in sorted(by_column.items()):
        values = [e.value(metric) for e in runs]
        row.cells[column.label] = Cell(
            statistics.median(v for v in values if v is not None),
            [e.run_id for e in runs],
            source_lines=[e.source_line for e in runs if e.source_line],
        )
    if not any(not column.reference for column in by_column):
        row.commands = reproduce_commands([e for e in members if e.column.reference])
    return row


def choose_baseline(columns: list[Column], rows: list[Row], wanted: str | None) -> tuple[Column | None, str]:
    """--baseline when given; else the column with a value in the most rows that compare two or more devices
    (local before reference, CPU before GPU on a tie), so that speed-ups exist wherever they can."""
    if wanted:
        match = next((c for c in columns if wanted.lower() in (c.label.lower(), c.hw_label.lower())), None)
        return match, "" if match else f"no {wanted} column in this table (--baseline)"
    compared = [row for row in rows if len(row.cells) > 1]
    if not compared:
        return None, "no row has two or more devices to compare"
    counts = {c: sum(c.label in row.cells for row in compared) for c in columns}
    best = min(columns, key=lambda c: (-counts[c], c.reference, c.backend != "cpu", c.label))
    return best, ""


def add_speedups(row: Row, baseline: Column, higher_is_better: bool) -> None:
    """Against the baseline's value in this row; a row without one, or with nothing else, gets none."""
    base = row.cells.get(baseline.label)
    if base is None or len(row.cells) < 2:
        return
    for label, cell in row.cells.items():
        if label != baseline.label:
            cell.speedup = cell.value / base.value if higher_is_better else base.value / cell.value


# ----------------------------------------------------------------------------------- measuring it here


def reproduce_commands(references: list[Entry]) -> list[str]:
    """The `python src/run.py` line that would give a row of published figures a local run to compare with."""
    commands: dict[tuple[str, str], str] = {}
    for e in references:
        device = "cpu" if e.column.backend == "cpu" else "gpu"
        commands.setdefault((e.column.framework, device), command_for(e, device))
    return list(commands.values())


def command_for(e: Entry, device: str) -> str:
    s, p = e.settings, e.params
    framework, task, precision = e.column.framework, e.task, s["trainbench.precision"]
    if task == "matmul":
        return (
            f"python src/run.py framework={framework} device={device} task=matmul "
            f"task.shape={s['trainbench.matmul_shape']} precision={precision}"
        )
    missing = [
        f"conf/{group}/{name}.yaml"
        for group, name in (("model", s["trainbench.model"]), ("data", s["trainbench.data"]), ("framework", framework))
        if name not in choices(group)
    ]
    if missing:
        return f"(not runnable here yet: no {' or '.join(missing)})"
    parts = [
        f"framework={framework}",
        f"device={device}",
        f"model={s['trainbench.model']}",
        f"data={s['trainbench.data']}",
        f"task={task}",
        f"batch_size={s['trainbench.batch_size']}",
        f"precision={precision}",
    ]
    parts += _model_overrides(p)
    if task == "train" and s["trainbench.epochs"] not in ("", UNKNOWN):
        parts.append(f"task.epochs={s['trainbench.epochs']}")
    parts += _data_overrides(s, p)
    parts += _timing_overrides(task, s)
    fast = s["trainbench.optimize"] == "fast" or s["trainbench.compile"] == "true"
    if fast:
        parts.append("optimize=fast")
    if s["trainbench.channels_last"] == "true" and framework == "pytorch" and not fast:
        parts.append("optimize.channels_last=true")  # the fast mode sets it; Keras and MLX are always NHWC
    return "python src/run.py " + " ".join(parts)


def _model_overrides(params: dict[str, str]) -> list[str]:
    depth, width = params.get("model.depth"), params.get("model.width")
    if depth not in (None, "", "null", "None"):
        return [f"model.depth={depth}", f"model.width={width}"]
    return []


def _data_overrides(settings: dict[str, str], params: dict[str, str]) -> list[str]:
    parts = []
    if settings["trainbench.image_size"] not in ("", UNKNOWN):
        parts.append(f"data.image_size={settings['trainbench.image_size']}")
    if settings["trainbench.seq_len"] not in ("", UNKNOWN):
        parts.append(f"model.seq_len={settings['trainbench.seq_len']}")
    if params.get("data.num_samples") not in (None, "", "null", "None"):
        parts.append(f"data.num_samples={params['data.num_samples']}")
    if params.get("data.grayscale_to_rgb") == "True":
        parts.append("data.grayscale_to_rgb=true")
    return parts


def _timing_overrides(task: str, settings: dict[str, str]) -> list[str]:
    """What the published figure timed, where that is not the task's default: the timed region (Keras fit,
    build + fit) and the input pipeline (a loader with workers), as overrides."""
    parts = []
    region = settings["trainbench.timed_region"]
    if region not in ("", UNKNOWN, "epoch" if task == "train" else "steps"):
        parts.append(f"task.timed_region={region}")
    if settings["trainbench.pipeline"] not in ("", UNKNOWN, "device"):
        parts.append(f"data.pipeline={settings['trainbench.pipeline']}")
    return parts


# Rows read best grouped by what was run and how it was timed, then precision, model shape and batch size.
DISPLAY_ORDER = (
    "trainbench.data",
    "trainbench.image_size",
    "trainbench.seq_len",
    "trainbench.samples_per_epoch",
    "trainbench.epochs",
    "trainbench.timed_region",
    "trainbench.pipeline",
    "trainbench.num_devices",
    "trainbench.compile",
    "trainbench.optimize",
    "trainbench.channels_last",
    "trainbench.matmul_shape",
    "trainbench.precision",
)


def display_order(row: Row) -> list[list[tuple[int, int | str]]]:
    return _natural((*(row.settings[k] for k in DISPLAY_ORDER), row.variant, row.settings["trainbench.batch_size"]))


def _natural(key: tuple[str, ...]) -> list[list[tuple[int, int | str]]]:
    """Sort keys with numbers as numbers: batch 64 before 512, depth 5 before depth 10."""
    return [[(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text)] for text in key]
