"""The comparison report: local cells and published reference runs side by side.

    python src/report.py --out DIR [--experiment trainbench] [--sweep RUN_ID] [--model NAME ...]
                         [--filter "tags.`hw.label` = 'X'"] [--baseline LABEL] [--no-references] [--no-log]

Reads finished cells (`trainbench.kind=cell`, `trainbench.outcome=finished`) and reference runs
(`trainbench.kind=reference`, see trainbench.references) from MLflow and writes into DIR:
  report.md, report.html  tables by model and batch size, one column per device (hw.label, backend,
                          framework; references marked), with speed-ups against a baseline column.
                          report.html is self-contained: inline CSS, the plots embedded.
  report.json             the tables' data (values, run counts, speed-ups, run ids)
  throughput.png/.json    samples_per_s vs batch size, per device
  mlp_depth.png/.json     total training time vs model.depth (the published M1 MLP depth chart)
  matmul.png/.json        TFLOPS vs matrix size n (task=matmul runs), when there are any
  epoch_times.png/.json   epoch_time_s per epoch, per run
Each .json holds the data behind its plot: {series label: [[x, y], ...]}. The files are also logged as
artifacts of a new run `trainbench.kind=report` in the same experiment.

One table shows one metric, never two: samples_per_s where a run has it; runs that only have epoch
times (published train-only figures) get an epoch_time_s table of their model, in which every run with
epoch times appears; runs with only a total time, a total_time_s table.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainbench import tracking
from trainbench.references import NOTES_SEPARATOR, all_runs

EXIT_OK, EXIT_NOT_LOGGED, EXIT_BAD_INPUT = 0, 1, 2
CELLS = "tags.`trainbench.kind` = 'cell' AND tags.`trainbench.outcome` = 'finished'"
REFERENCES = "tags.`trainbench.kind` = 'reference'"
SAMPLE_KINDS = {"img/s": "images", "images/s": "images", "seq/s": "sequences", "sequences/s": "sequences"}


class ReportError(ValueError):
    """Nothing sensible to report. str() is the one line shown to the user."""


@dataclass(frozen=True)
class TableMetric:
    name: str
    title: str
    unit: str
    higher_is_better: bool


# In order of preference: a run appears in the table of the first metric it has (and in the later
# ones where that metric's table exists for its model anyway).
TABLE_METRICS = (
    TableMetric("samples_per_s", "throughput", "samples/s", True),
    TableMetric("epoch_time_s", "mean epoch time (the epochs after the first, when there are several)", "s", False),
    TableMetric("total_time_s", "total training time", "s", False),
    TableMetric("peak_tflops", "peak matmul throughput", "TFLOPS", True),
)


@dataclass(frozen=True, order=True)
class Column:
    """One device as the tables show it: local columns first, then references."""

    reference: bool
    label: str
    hw_label: str
    backend: str
    framework: str
    source: str


@dataclass
class Entry:
    """One run, as the report sees it."""

    run_id: str
    run_name: str
    column: Column
    model: str
    depth: int | None
    batch_size: int | None
    precision: str
    data: str
    task: str
    epochs: int | None
    citation: str
    sample_kind: str | None
    metrics: dict[str, float]
    epoch_times: list[tuple[int, float]] = field(default_factory=list)
    tflops: list[tuple[int, float]] = field(default_factory=list)

    @property
    def variant(self) -> str:
        return self.model + (f" depth {self.depth}" if self.depth is not None else "")

    @property
    def setting(self) -> str:
        """What a series or row is, besides the device: "mlp_deep depth 5, bs32, fp32, cifar10"."""
        batch = f", bs{self.batch_size}" if self.batch_size is not None else ""
        return f"{self.variant}{batch}, {self.precision}, {self.data}"

    def value(self, metric: str) -> float | None:
        if metric == "epoch_time_s" and self.epoch_times:
            steady = self.epoch_times[1:] or self.epoch_times  # as samples_per_s: first epoch left out
            return statistics.fmean(v for _, v in steady)
        return self.metrics.get(metric)


@dataclass
class Cell:
    value: float
    runs: list[str]
    speedup: float | None = None


@dataclass
class Row:
    model: str
    depth: int | None
    batch_size: int | None
    precision: str
    data: str
    cells: dict[str, Cell] = field(default_factory=dict)  # column label -> cell


@dataclass
class Table:
    model: str
    metric: TableMetric
    columns: list[Column]
    baseline: Column | None
    rows: list[Row]
    sample_kinds: list[str]


# ------------------------------------------------------------------------------------------ selection


@dataclass(frozen=True)
class Selection:
    experiment: str
    sweep: str | None = None
    models: tuple[str, ...] = ()
    filter: str | None = None
    references: bool = True

    def describe(self) -> str:
        parts = [f"experiment {self.experiment}"]
        if self.sweep:
            parts.append(f"sweep {self.sweep}")
        if self.models:
            parts.append(f"models {', '.join(self.models)}")
        if self.filter:
            parts.append(f"filter {self.filter}")
        if not self.references:
            parts.append("no references")
        return "; ".join(parts)


def select(client: Any, experiment_id: str, selection: Selection) -> list[Entry]:
    """The finished cells and reference runs the selection names (references: those of the sweep's models)."""
    from mlflow.exceptions import MlflowException

    extra = f" AND {selection.filter}" if selection.filter else ""
    cell_filter = CELLS + (f" AND tags.`mlflow.parentRunId` = '{selection.sweep}'" if selection.sweep else "")
    try:
        cells = all_runs(client, [experiment_id], cell_filter + extra)
        references = all_runs(client, [experiment_id], REFERENCES + extra) if selection.references else []
    except MlflowException as error:
        raise ReportError(f"bad --filter {selection.filter!r}: {_first_line(error.message)}") from None
    if selection.models:
        wanted = set(selection.models)
        cells = [r for r in cells if r.data.tags.get("trainbench.model") in wanted]
        references = [r for r in references if r.data.tags.get("trainbench.model") in wanted]
    if selection.sweep:
        swept = {r.data.tags.get("trainbench.model") for r in cells}
        references = [r for r in references if r.data.tags.get("trainbench.model") in swept]
    return [entry(client, run) for run in cells + references]


def entry(client: Any, run: Any) -> Entry:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    reference = tags.get("trainbench.kind") == "reference"
    hw_label = tags.get("hw.label", "unknown device")
    backend = tags.get("trainbench.backend", "?")
    framework = tags.get("trainbench.framework", params.get("framework.name", "?"))
    source = tags.get("reference.source", "") if reference else ""
    label = f"{hw_label} ({backend}, {framework})" + (f" [ref: {source}]" if reference else "")
    units = tags.get("reference.units", "")
    kinds = {kind for unit, kind in SAMPLE_KINDS.items() if f"={unit}" in units}
    history = _history(client, run.info.run_id, "epoch_time_s") if "epoch_time_s" in metrics else []
    tflops = _history(client, run.info.run_id, "tflops") if "tflops" in metrics else []
    task = tags.get("trainbench.task", params.get("task.name", "?"))
    model = tags.get("trainbench.model", params.get("model.name", "?"))
    depth = _int(params.get("model.depth"))
    batch_size = _int(params.get("batch_size", tags.get("trainbench.batch_size")))
    data = params.get("data.name", tags.get("trainbench.data", "?"))
    if task == "matmul":  # a matmul cell's model, data and batch size are configured but not used
        shape = tags.get("trainbench.matmul_shape", params.get("task.shape", "square"))
        model, depth, batch_size, data = f"matmul_{shape}", None, None, shape
    return Entry(
        run_id=run.info.run_id,
        run_name=run.info.run_name or run.info.run_id,
        column=Column(reference, label, hw_label, backend, framework, source),
        model=model,
        depth=depth,
        batch_size=batch_size,
        precision=tags.get("trainbench.precision", params.get("precision.name", "?")),
        data=data,
        task=task,
        epochs=_int(params.get("epochs")),
        citation=tags.get("reference.citation", ""),
        sample_kind=next(iter(kinds)) if len(kinds) == 1 else None,
        metrics=dict(metrics),
        epoch_times=history,
        tflops=tflops,
    )


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None  # "null" (mlp has no depth), "None"


# ---------------------------------------------------------------------------------------------- tables


def tables(entries: list[Entry], baseline: str | None, notes: list[str]) -> list[Table]:
    """One table per model and metric; see the module docstring for which metrics get a table."""
    by_model: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_model[e.model].append(e)
    built: list[Table] = []
    for model in sorted(by_model):
        group = by_model[model]
        firsts = set()
        for e in group:
            first = next((m.name for m in TABLE_METRICS if e.value(m.name) is not None), None)
            if first is None:
                notes.append(f"{e.run_name} ({e.column.label}) has none of "
                             f"{', '.join(m.name for m in TABLE_METRICS)}: left out of the tables")
            firsts.add(first)
        for metric in TABLE_METRICS:
            if metric.name in firsts:
                built.append(_table(model, metric, [e for e in group if e.value(metric.name) is not None], baseline))
    for table in built:
        if len(table.sample_kinds) > 1:
            notes.append(f"the {table.model} samples_per_s table mixes {' and '.join(table.sample_kinds)} per "
                         "second (published units): compare within one kind only")
    if baseline and built and not any(t.baseline for t in built):
        labels = sorted({c.hw_label for t in built for c in t.columns})
        raise ReportError(f"--baseline {baseline!r} matches no column; use a column label or one of: "
                          + ", ".join(labels))
    return built


def _table(model: str, metric: TableMetric, members: list[Entry], baseline: str | None) -> Table:
    columns = sorted({e.column for e in members})
    values: dict[tuple[Any, ...], dict[Column, list[Entry]]] = defaultdict(lambda: defaultdict(list))
    for e in members:
        values[(e.depth or 0, e.batch_size or 0, e.precision, e.data)][e.column].append(e)
    if baseline:
        wanted = baseline.lower()
        matches = [c for c in columns if wanted in (c.label.lower(), c.hw_label.lower())]
    else:
        matches = [c for c in columns if c.backend == "cpu"]
    base = matches[0] if matches else None
    rows = []
    for key in sorted(values):
        first = next(iter(values[key].values()))[0]
        row = Row(model, first.depth, first.batch_size, first.precision, first.data)
        for column, runs in values[key].items():
            row.cells[column.label] = Cell(statistics.median(e.value(metric.name) for e in runs),
                                           [e.run_id for e in runs])
        reference_cell = row.cells.get(base.label) if base else None
        if reference_cell:
            for cell in row.cells.values():
                ratio = cell.value / reference_cell.value if metric.higher_is_better else reference_cell.value / cell.value
                cell.speedup = ratio
        rows.append(row)
    kinds = sorted({e.sample_kind for e in members if e.sample_kind}) if metric.name == "samples_per_s" else []
    return Table(model, metric, columns, base, rows, kinds)


# ----------------------------------------------------------------------------------------------- plots


Series = dict[str, list[list[float]]]


def throughput_series(entries: list[Entry]) -> dict[str, Series]:
    """model -> {"setting | device": [[batch_size, samples_per_s], ...]}"""
    points: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for e in entries:
        value = e.metrics.get("samples_per_s")
        if value is not None and e.batch_size is not None:
            label = f"{e.variant}, {e.precision}, {e.data} | {e.column.label}"
            points[e.model][label][e.batch_size].append(value)
    return {model: _medians(series) for model, series in sorted(points.items())}


def depth_series(entries: list[Entry]) -> Series:
    """{"device, bs, epochs, data": [[model.depth, total_time_s], ...]}"""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in entries:
        total = e.metrics.get("total_time_s")
        if e.depth is not None and total is not None and e.task != "matmul":
            epochs = f", {e.epochs} epochs" if e.epochs else ""
            points[f"{e.column.label}, {e.model} bs{e.batch_size}{epochs}, {e.data}"][e.depth].append(total)
    return _medians(points)


def epoch_series(entries: list[Entry]) -> dict[str, Series]:
    """model -> {"device | setting": [[epoch, epoch_time_s], ...]}, one series per run of 2+ epochs.

    A single epoch is no curve: such runs (e.g. the published one-epoch MPS study) are in the tables.
    """
    by_model: dict[str, Series] = defaultdict(dict)
    for e in sorted(entries, key=lambda e: (e.model, e.column, e.setting)):
        if len(e.epoch_times) > 1:
            series = by_model[e.model]
            label = base = f"{e.column.label} | {e.setting}"
            copy = 2
            while label in series:
                label, copy = f"{base} #{copy}", copy + 1
            series[label] = [[step, value] for step, value in e.epoch_times]
    return dict(by_model)


def matmul_series(entries: list[Entry]) -> dict[str, Series]:
    """shape -> {"device, precision, shape": [[n, tflops], ...]}, plus, on the square panel, the published
    peak_tflops of reference runs as flat lines across the measured sizes."""
    curves: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    matmul = [e for e in entries if e.task == "matmul"]
    for e in matmul:
        for n, value in e.tflops:
            curves[e.data][f"{e.column.label}, {e.precision}, {e.data}"][n].append(value)
    panels = {shape: _medians(series) for shape, series in sorted(curves.items())}
    for shape, series in panels.items():
        sizes = [x for points in series.values() for x, _ in points]
        for e in matmul:
            if e.data == shape and not e.tflops and "peak_tflops" in e.metrics:
                series[f"{e.column.label}, {e.precision}, {e.data} (peak_tflops)"] = [
                    [min(sizes), e.metrics["peak_tflops"]], [max(sizes), e.metrics["peak_tflops"]]]
    return panels


def _medians(points: dict[str, dict[int, list[float]]]) -> Series:
    return {label: [[x, statistics.median(ys)] for x, ys in sorted(by_x.items())] for label, by_x in sorted(points.items())}


def plot(path: Path, panels: dict[str, Series], xlabel: str, ylabel: str, log_x: int | None = None,
         log_y: Callable[[Series], bool] | None = None, integer_x: bool = False) -> None:
    """One figure, one panel per entry of `panels`, one line (or marker set) per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(len(panels), 1, figsize=(11, 4.2 * len(panels)), squeeze=False)
    for ax, (title, series) in zip(axes[:, 0], panels.items(), strict=True):
        for label, points in series.items():
            xs, ys = zip(*points, strict=True)
            dashed = "(peak_tflops)" in label
            ax.plot(xs, ys, "--" if dashed else "-o", label=label, markersize=4)
        if integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if log_x:
            ax.set_xscale("log", base=log_x)
        if log_y and log_y(series):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def _wide(series: Series) -> bool:
    ys = [y for points in series.values() for _, y in points if y > 0]
    return bool(ys) and max(ys) / min(ys) > 20


def plots(entries: list[Entry], out: Path, notes: list[str]) -> list[Path]:
    """Write each plot that has data, with its .json; say why a plot was skipped."""
    written: list[Path] = []

    def save(name: str, data: Any, panels: dict[str, Series], **style: Any) -> None:
        (out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        plot(out / f"{name}.png", panels, **style)
        written.extend([out / f"{name}.png", out / f"{name}.json"])

    by_model = throughput_series(entries)
    if by_model:
        flat = {label: points for series in by_model.values() for label, points in series.items()}
        save("throughput", flat, {f"{m}: samples_per_s vs batch size": s for m, s in by_model.items()},
             xlabel="batch size", ylabel="samples/s", log_x=2, log_y=_wide)
    else:
        notes.append("skipped throughput.png: no selected run has samples_per_s and a batch size")
    depth = depth_series(entries)
    if depth:
        save("mlp_depth", depth, {"total training time vs MLP depth (model.depth)": depth},
             xlabel="model.depth (hidden layers)", ylabel="total_time_s (s)")
    else:
        notes.append("skipped mlp_depth.png: no selected run has a model.depth param and total_time_s")
    matmul = matmul_series(entries)
    if matmul:
        flat = {label: points for series in matmul.values() for label, points in series.items()}
        save("matmul", flat, {f"matmul ({shape}): TFLOPS vs matrix size n": s for shape, s in matmul.items()},
             xlabel="matrix size n", ylabel="TFLOPS", log_x=10)
    else:
        notes.append("skipped matmul.png: no selected run with task=matmul has a `tflops` history yet")
    epochs = epoch_series(entries)
    if epochs:
        flat = {label: points for series in epochs.values() for label, points in series.items()}
        save("epoch_times", flat, {f"{m}: epoch_time_s per epoch": s for m, s in epochs.items()},
             xlabel="epoch", ylabel="epoch_time_s (s)", integer_x=True)
    else:
        notes.append("skipped epoch_times.png: no selected run has epoch_time_s for two or more epochs")
    return written


# ---------------------------------------------------------------------------------------------- output


def number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def cell_text(cell: Cell | None) -> str:
    if cell is None:
        return ""
    text = number(cell.value)
    if len(cell.runs) > 1:
        text += f" (median of {len(cell.runs)})"
    if cell.speedup is not None:
        text += f" ({cell.speedup:.2f}×)"
    return text


def caption(table: Table) -> str:
    kind = f" ({', '.join(table.sample_kinds)})" if table.sample_kinds else ""
    better = "higher" if table.metric.higher_is_better else "lower"
    text = f"`{table.metric.name}`: {table.metric.title}, {table.metric.unit}{kind}; {better} is better."
    if table.baseline:
        ratio = "value / baseline" if table.metric.higher_is_better else "baseline / value"
        text += f" Speed-up (×) against **{table.baseline.label}** = {ratio}."
    else:
        text += " No speed-ups: this table has no CPU column (choose one with --baseline)."
    return text


HEAD = ("model", "batch size", "precision", "data")


def row_head(row: Row) -> list[str]:
    variant = row.model + (f" depth {row.depth}" if row.depth is not None else "")
    return [variant, str(row.batch_size) if row.batch_size is not None else "-", row.precision, row.data]


def markdown(built: list[Table], summary: str, notes: list[str], sources: dict[str, set[str]],
             images: list[str]) -> str:
    def md(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["# trainbench report", "", summary, ""]
    for table in built:
        lines += [f"## {table.model}: {table.metric.name}", "", caption(table), ""]
        labels = [c.label for c in table.columns]
        lines.append("| " + " | ".join([*HEAD, *map(md, labels)]) + " |")
        lines.append("|" + "---|" * 2 + "---|" * 2 + "---:|" * len(labels))
        for row in table.rows:
            lines.append("| " + " | ".join([*map(md, row_head(row)), *(cell_text(row.cells.get(c)) for c in labels)]) + " |")
        lines.append("")
    for name in images:
        lines += [f"![{name}]({name})", ""]
    if sources:
        lines += ["## Sources of the reference runs", ""]
        lines += [f"- **{source}**: {md('; '.join(sorted(texts)))}" for source, texts in sorted(sources.items())]
        lines.append("")
    if notes:
        lines += ["## Notes", ""] + [f"- {md(n)}" for n in notes] + [""]
    return "\n".join(lines)


CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f3f3f3; vertical-align: bottom; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
th.ref, td.ref { background: #fff8e6; }
td.base { font-weight: bold; }
p.caption { font-size: 0.9em; color: #444; }
img { max-width: 100%; border: 1px solid #eee; margin: 1em 0; }
li { font-size: 0.9em; margin: 0.2em 0; }
"""


def html_page(built: list[Table], summary: str, notes: list[str], sources: dict[str, set[str]],
              images: dict[str, bytes]) -> str:
    e = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8"><title>trainbench report</title>',
             f"<style>{CSS}</style></head><body>", "<h1>trainbench report</h1>", f"<p>{e(summary)}</p>"]
    for table in built:
        parts.append(f"<h2>{e(table.model)}: {e(table.metric.name)}</h2>")
        text = re.sub(r"`([^`]+)`", r"<code>\1</code>", re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", e(caption(table))))
        parts.append(f'<p class="caption">{text}</p><table><tr>')
        parts += [f"<th>{e(h)}</th>" for h in HEAD]
        parts += [f'<th class="{"ref" if c.reference else ""}">{e(c.label)}</th>' for c in table.columns]
        parts.append("</tr>")
        for row in table.rows:
            parts.append("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row_head(row)))
            for c in table.columns:
                classes = ["num"] + (["ref"] if c.reference else []) + (["base"] if c == table.baseline else [])
                parts.append(f'<td class="{" ".join(classes)}">{e(cell_text(row.cells.get(c.label)))}</td>')
            parts.append("</tr>")
        parts.append("</table>")
    for name, png in images.items():
        parts.append(f'<img alt="{e(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    if sources:
        parts.append("<h2>Sources of the reference runs</h2><ul>")
        parts += [f"<li><b>{e(s)}</b>: {e('; '.join(sorted(t)))}</li>" for s, t in sorted(sources.items())]
        parts.append("</ul>")
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def tables_json(built: list[Table]) -> list[dict[str, Any]]:
    return [{
        "model": t.model,
        "metric": t.metric.name,
        "unit": t.metric.unit,
        "higher_is_better": t.metric.higher_is_better,
        "baseline": t.baseline.label if t.baseline else None,
        "columns": [{"label": c.label, "hw_label": c.hw_label, "backend": c.backend, "framework": c.framework,
                     "reference": c.reference, "source": c.source or None} for c in t.columns],
        "rows": [{
            "model": r.model, "depth": r.depth, "batch_size": r.batch_size, "precision": r.precision, "data": r.data,
            "cells": {label: {"value": c.value, "speedup": c.speedup, "runs": c.runs} for label, c in r.cells.items()},
        } for r in t.rows],
    } for t in built]


def write(entries: list[Entry], out: Path, selection: Selection, baseline: str | None, uri: str) -> tuple[list[Path], list[str]]:
    """Write every file of the report into `out`; return (the files, the notes)."""
    notes: list[str] = []
    built = tables(entries, baseline, notes)
    if not built:
        raise ReportError(f"nothing to report: none of the {len(entries)} selected runs has "
                          f"{', '.join(m.name for m in TABLE_METRICS)}")
    out.mkdir(parents=True, exist_ok=True)
    written = plots(entries, out, notes)
    local = sum(not e.column.reference for e in entries)
    summary = (f"{local} local cell(s) and {len(entries) - local} reference run(s) from {uri} "
               f"({selection.describe()}), {time.strftime('%Y-%m-%d %H:%M')}. Reference columns are marked "
               "[ref: source]; their figures were published elsewhere, with other software and settings.")
    sources: dict[str, set[str]] = defaultdict(set)
    for e in entries:
        if e.column.reference:
            # the publications; each run's own notes stay on the run (reference.citation)
            sources[e.column.source].update(e.citation.split(NOTES_SEPARATOR)[0].split("; "))
    pngs = [p for p in written if p.suffix == ".png"]
    files = {
        "report.md": markdown(built, summary, notes, sources, [p.name for p in pngs]),
        "report.html": html_page(built, summary, notes, sources, {p.name: p.read_bytes() for p in pngs}),
        "report.json": json.dumps({"selection": selection.describe(), "tracking_uri": uri,
                                   "tables": tables_json(built), "notes": notes}, indent=1) + "\n",
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written, notes


def log_report(client: Any, experiment_id: str, files: Iterable[Path], selection: Selection, entries: list[Entry]) -> str:
    """A run `trainbench.kind=report` holding the files; under `mlflow run`, the run it created."""
    tags = {"trainbench.kind": "report", "trainbench.outcome": "running",
            "report.selection": selection.describe()[:5000], "git.commit": tracking.git_commit()}
    adopted = os.environ.get("MLFLOW_RUN_ID")
    if adopted:
        run_id = adopted
        tracking.set_tags(client, run_id, tags)
    else:
        run_id = client.create_run(experiment_id, run_name=f"report-{time.strftime('%Y%m%d-%H%M%S')}",
                                   tags=tags).info.run_id
    for path in files:
        client.log_artifact(run_id, str(path))
    local = sum(not e.column.reference for e in entries)
    tracking.log_metrics(client, run_id, {"report_local_runs": local, "report_reference_runs": len(entries) - local})
    if adopted:  # `mlflow run` closes its own run
        tracking.set_tags(client, run_id, {"trainbench.outcome": "finished"})
    else:
        tracking.close(client, run_id, "finished")
    return run_id


# ------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python src/report.py",
        description="Compare local cells and published reference runs: tables with speed-ups, plots, one HTML page.",
    )
    parser.add_argument("--out", required=True, type=Path, help="folder to write the report into")
    parser.add_argument("--experiment", default="trainbench", help="MLflow experiment (default: trainbench)")
    parser.add_argument("--sweep", metavar="RUN_ID", help="only the cells of this sweep (and references of its models)")
    parser.add_argument("--model", nargs="+", action="extend", default=[], metavar="NAME",
                        help="only these models (trainbench.model)")
    parser.add_argument("--filter", metavar="MLFLOW_FILTER",
                        help="an MLflow search filter added to the selection, e.g. \"tags.`hw.label` = 'Apple M1 GPU'\"")
    parser.add_argument("--baseline", metavar="LABEL",
                        help="speed-ups against this column (its label or its hw.label); default: the first CPU column")
    parser.add_argument("--no-references", action="store_true", help="leave the reference runs out")
    parser.add_argument("--no-log", action="store_true", help="do not log the report as an MLflow run")
    args = parser.parse_args(argv)
    selection = Selection(args.experiment, args.sweep, tuple(args.model), args.filter, not args.no_references)
    try:
        uri = tracking.resolve_tracking_uri(None)
        client = tracking.connect(uri)
        experiment = client.get_experiment_by_name(args.experiment)
        if experiment is None:
            raise ReportError(f"no experiment `{args.experiment}` in {uri}: run python src/run.py or "
                              "python src/references.py first, or name another with --experiment")
        if args.sweep:
            _check_sweep(client, args.sweep)
        entries = select(client, experiment.experiment_id, selection)
        if not entries:
            raise ReportError(f"nothing to report: no finished cell or reference run matches ({selection.describe()})")
        files, notes = write(entries, args.out, selection, args.baseline, uri)
    except (ReportError, tracking.TrackingUnavailable) as error:
        print(f"trainbench: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"report: {len(entries)} runs -> {args.out / 'report.html'} (and report.md, report.json, plots)")
    if args.no_log:
        return EXIT_OK
    try:
        run_id = log_report(client, experiment.experiment_id, files, selection, entries)
    except Exception as error:  # the artifact store may be elsewhere (S3, a server) and fail on its own
        print(f"trainbench: the report is in {args.out}, but logging it to MLflow failed: "
              f"{_first_line(str(error))}", file=sys.stderr)
        return EXIT_NOT_LOGGED
    print(f"logged as run {run_id} (trainbench.kind=report) in experiment {args.experiment}")
    return EXIT_OK


def _check_sweep(client: Any, run_id: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
    except MlflowException:
        raise ReportError(f"--sweep {run_id}: no such run in this tracking store") from None


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
