"""The comparison model: tables whose rows hold only runs that measured the same quantity.

A table is one task, one model and one metric. A row is one comparison setting (trainbench.store.setting: the
whole config less the speed-neutral fields, the framework and the device asked for). A column is one machine
(hw.label with its cores or memory), backend and framework release; a reference column also names its source.
Several runs in one cell are repeats of the same measurement: the cell shows their median. Speed-ups compare
cells of one row only, and each row says what differs between the columns it holds (framework, version,
what each framework's fast mode switched on).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainbench.figures import APART, TOO_CLOSE, ci95, half_width, judged, noisy, span
from trainbench.report.selection import Column, Entry, ReportError
from trainbench.store.runs import task_kind
from trainbench.store.setting import describe, differences


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
    noisy: bool = False  # a run of it was tagged trainbench.noisy (trainbench.figures)
    ci95: float | None = None  # one run's recorded 95% half-width, or the spread of several runs' figures
    within_noise: bool = False  # its interval and the baseline's overlap: no speed-up is quoted
    no_interval: bool = False  # it or the baseline has no interval (one measurement): judged as figures.judged


@dataclass
class Row:
    key: tuple[tuple[str, str], ...]
    settings: dict[str, str]  # the setting in words (trainbench.store.runs.comparison_settings)
    variant: str
    setting: dict[str, str] = field(default_factory=dict)  # trainbench.store.setting.setting
    cells: dict[str, Cell] = field(default_factory=dict)  # column label -> cell
    commands: list[str] = field(default_factory=list)  # how to measure it here, when no local run has
    columns_differ: str = ""  # what differs between the columns of this row, beyond the machine
    distinct: str = ""  # what tells it apart from rows that read the same in the head (`optim.name=adam`)


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


def headline(e: Entry) -> str | None:
    """The metric a run's figure is: the one its task declares (TaskConfig.headline: a matmul sweep's peak
    TFLOPS, as its total time is the whole sweep's), else the first of TABLE_METRICS it has."""
    declared = task_kind(e.task).headline
    if declared is not None and e.value(declared) is not None:
        return str(declared)
    return next((m.name for m in TABLE_METRICS if e.value(m.name) is not None), None)


def build_tables(entries: list[Entry], baseline: str | None, notes: list[str]) -> list[Table]:
    """One table per task, model and metric; see TABLE_METRICS for which metric a run's figure goes into."""
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.task, e.model)].append(e)
    tables: list[Table] = []
    for (task, model), group in sorted(groups.items()):
        firsts = set()
        for e in group:
            first = headline(e)
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
    # Tables with the selection's own runs first; those of published figures only after them.
    tables.sort(key=lambda t: all(c.reference for c in t.columns))
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
    columns = sorted({e.column for e in members}, key=Column.order)
    by_key: dict[tuple[tuple[str, str], ...], list[Entry]] = defaultdict(list)
    for e in members:
        by_key[e.key].append(e)
    rows = sorted((build_row(entries, metric.name) for entries in by_key.values()), key=display_order)
    base, reason = choose_baseline(columns, rows, baseline)
    if base:
        for row in rows:
            add_speedups(row, base, metric.higher_is_better)
    kinds = sorted({e.sample_kind for e in members if e.sample_kind}) if metric.name == "samples_per_s" else []
    return Table(task, model, metric, columns, base, name_look_alikes(rows), kinds, reason)


def name_look_alikes(rows: list[Row]) -> list[Row]:
    """Rows that read the same in the head (batch, precision, data, timing, flags) but are different settings
    (SGD and Adam, two learning rates) each get the keys that tell them apart (`optim.name=adam`)."""
    alike: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for row in rows:
        alike[(row.variant, *(row.settings[k] for k in DISPLAY_ORDER), row.settings["trainbench.batch_size"])].append(
            row
        )
    for group in alike.values():
        if len(group) > 1:
            keys = differences([row.setting for row in group])
            for row in group:
                row.distinct = describe(row.setting, keys)
    return rows


def run_flags() -> tuple[str, ...]:
    """How each framework ran a setting, as its runs tag it: told per row where the columns differ. The flags
    every framework records, then each registered framework's own (FrameworkConfig.run_flags)."""
    from trainbench.config.plugins import SCHEMAS
    from trainbench.config.schema import SHARED_RUN_FLAGS, FrameworkConfig

    frameworks = [config for config in SCHEMAS.get("framework", {}).values() if issubclass(config, FrameworkConfig)]
    declared = (flag for config in frameworks for flag in config.run_flags)
    return tuple(dict.fromkeys((*SHARED_RUN_FLAGS, *declared)))


def build_row(members: list[Entry], metric: str) -> Row:
    first = members[0]
    by_column: dict[Column, list[Entry]] = defaultdict(list)
    for e in members:
        by_column[e.column].append(e)
    row = Row(first.key, first.settings, first.variant, first.setting)
    for column, runs in sorted(by_column.items(), key=lambda item: item[0].order()):
        measured = [(v, ci95(e.metrics, metric)) for e in runs if (v := e.value(metric)) is not None]
        value = statistics.median(v for v, _ in measured)
        is_noisy = any(noisy(e.tags) for e in runs)
        several = span([v for v, _ in measured], [c for _, c in measured], is_noisy) if len(measured) > 1 else None
        row.cells[column.label] = Cell(
            value,
            [e.run_id for e in runs],
            source_lines=[e.source_line for e in runs if e.source_line],
            noisy=is_noisy,
            ci95=half_width(value, *several) if several else ci95(runs[0].metrics, metric),
        )
    if not any(not column.reference for column in by_column):
        row.commands = reproduce_commands([e for e in members if e.column.reference])
    row.columns_differ = columns_differ(by_column)
    return row


def columns_differ(by_column: dict[Column, list[Entry]]) -> str:
    """What differs between a row's columns besides the machine: the framework and its release, the
    framework's own settings, the settings compared across, and what each run switched on as it ran (a flag
    some runs do not record is left out rather than shown as a difference)."""
    if len(by_column) < 2:
        return ""
    ordered = [(c, runs) for c, runs in sorted(by_column.items(), key=lambda item: item[0].order())]
    parts = []
    releases = _distinct(f"{c.framework} {c.release}" for c, _ in ordered)
    if len(releases) > 1:
        parts.append(
            f"{'framework' if len({c.framework for c, _ in ordered}) > 1 else 'version'}: {' / '.join(releases)}"
        )
    for name, values in (
        ("framework settings", _distinct(c.knobs or "defaults" for c, _ in ordered)),
        ("compared", _distinct(c.across for c, _ in ordered)),
        *(
            (flag.split(".", 1)[1], _distinct(e.tags[flag] for _, runs in ordered for e in runs if flag in e.tags))
            for flag in run_flags()
        ),
    ):
        if len(values) > 1:
            parts.append(f"{name}: {' / '.join(values)}")
    return "; ".join(parts)


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


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
    best = min(columns, key=lambda c: (-counts[c], not c.mine, c.reference, c.backend != "cpu", c.label))
    return best, ""


def add_speedups(row: Row, baseline: Column, higher_is_better: bool) -> None:
    """Against the baseline's value in this row; a row without one, or with nothing else, gets none."""
    base = row.cells.get(baseline.label)
    if base is None or len(row.cells) < 2:
        return
    for label, cell in row.cells.items():
        if label == baseline.label or cell.value <= 0 or base.value <= 0:
            continue
        # as the first screen: a ratio only where the 95% intervals separate
        verdict = judged(cell.value, cell.ci95, cell.noisy, base.value, base.ci95, base.noisy)
        cell.no_interval = cell.ci95 is None or base.ci95 is None
        if verdict != APART:
            cell.within_noise = True
            cell.no_interval = verdict == TOO_CLOSE
            continue
        cell.speedup = cell.value / base.value if higher_is_better else base.value / cell.value


# ----------------------------------------------------------------------------------- measuring it here


def reproduce_commands(references: list[Entry]) -> list[str]:
    """The `python src/run.py` line that measures a row of published figures here: each reference's own
    command (the CSV's `reproduce` column: the preset that composes exactly that setting, narrowed to it)."""
    from trainbench.references.commands import reproducible

    commands = {e.reproduce: line for e in references if e.reproduce and (line := reproducible(e.reproduce))}
    if not commands:
        sources = ", ".join(sorted({e.column.source for e in references}))
        if any(e.reproduce for e in references):  # a store's tag can say anything: not printed to be pasted
            return [f"(no command printed: {sources}'s `reproduce` sets more than the cell; its notes say what it ran)"]
        return [f"(no command measures this setting here: {sources} gives no `reproduce`; its notes say what it ran)"]
    return list(commands.values())


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
    shown = (*(row.settings[k] for k in DISPLAY_ORDER), row.variant, row.settings["trainbench.batch_size"])
    return _natural((*shown, *(f"{k}={v}" for k, v in row.key)))


def _natural(key: tuple[str, ...]) -> list[list[tuple[int, int | str]]]:
    """Sort keys with numbers as numbers: batch 64 before 512, depth 5 before depth 10."""
    return [[(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text)] for text in key]
