"""Plots a person can read: small multiples, one panel per comparable setting, one legend for the figure.

A panel holds only runs of one comparison key (less the quantity on its x axis), so two sample counts,
two timed regions or two precisions never share an axis. Each device keeps its colour in every panel.
Each plot is written with the data behind it: {panel title: {series: [[x, y], ...]}}.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainbench import untrusted
from trainbench.report.selection import Entry
from trainbench.store.runs import flags, task_kind, threads_text

Series = dict[str, list[list[float]]]
Panels = dict[str, Series]  # panel title -> series label -> points

PANEL_WIDTH_IN, PANEL_HEIGHT_IN, MAX_COLUMNS, DPI = 5.0, 3.4, 3, 100
TITLE_WIDTH_CHARS = 60
LEGEND_CHAR_IN = 0.075  # about one character of a 9-point legend, in inches


def setting_text(e: Entry, leave_out: tuple[str, ...] = ()) -> str:
    """A panel's title: what its runs share, e.g. "mlp_deep, cifar10 32 px, 50000 x 3 epochs, bs32, fp32, build_fit"."""
    s = e.settings
    parts = [e.model if "model" not in leave_out else ""]
    if e.variant and "variant" not in leave_out:
        parts.append(e.variant)
    size = (
        f" {s['trainbench.image_size']} px"
        if s["trainbench.image_size"]
        else (f" {s['trainbench.seq_len']} tokens" if s["trainbench.seq_len"] else "")
    )
    if task_kind(e.task).uses_model:
        parts.append(f"{s['trainbench.data']}{size}")
    if s["trainbench.samples_per_epoch"]:  # blank for every task but train: the others have no epochs
        epochs = s["trainbench.epochs"]
        parts.append(f"{s['trainbench.samples_per_epoch']} samples x {epochs} epoch{'' if epochs == '1' else 's'}")
    if s["trainbench.batch_size"] and "batch_size" not in leave_out:
        parts.append(f"bs{s['trainbench.batch_size']}")
    parts.append(s["trainbench.precision"])
    parts.append(f"timed: {s['trainbench.timed_region']}")
    parts += flags({**s, "trainbench.num_devices": ""} if "num_devices" in leave_out else s, "applied" not in leave_out)
    parts.append(threads_text(e.params))
    return ", ".join(p for p in parts if p)


# The setting keys each plot's x axis varies: a panel holds runs equal in everything else.
FREE_KEYS = {
    "trainbench.batch_size": ("batch_size",),
    "variant": ("model.depth", "model.width", "model.hidden_sizes"),
    "trainbench.num_devices": ("device.count",),
}


def _panel_key(e: Entry, free: str) -> tuple[tuple[str, str], ...]:
    """The comparison setting without the keys on the x axis."""
    return tuple(item for item in e.key if item[0] not in FREE_KEYS[free])


def throughput_panels(entries: list[Entry]) -> Panels:
    """samples_per_s vs batch size, a panel per setting where some device has two or more batch sizes."""
    groups: dict[tuple[tuple[str, str], ...], list[Entry]] = defaultdict(list)
    for e in entries:
        if e.metrics.get("samples_per_s") is not None and e.batch_size is not None:
            groups[_panel_key(e, "trainbench.batch_size")].append(e)
    panels: Panels = {}
    for members in groups.values():
        series = _medians(members, lambda e: e.batch_size, lambda e: e.metrics["samples_per_s"])
        if any(len(points) > 1 for points in series.values()):  # single points are the tables' job
            panels[setting_text(members[0], ("batch_size",))] = series
    return dict(sorted(panels.items()))


def depth_panels(entries: list[Entry]) -> Panels:
    """total_time_s vs model.depth (the published M1 MLP depth chart), a panel per setting."""
    groups: dict[tuple[tuple[str, str], ...], list[Entry]] = defaultdict(list)
    for e in entries:
        if e.depth is not None and e.metrics.get("total_time_s") is not None and task_kind(e.task).uses_model:
            groups[_panel_key(e, "variant")].append(e)
    return dict(
        sorted(
            (setting_text(m[0], ("variant",)), _medians(m, lambda e: e.depth, lambda e: e.metrics["total_time_s"]))
            for m in groups.values()
        )
    )


def matmul_panels(entries: list[Entry]) -> Panels:
    """TFLOPS vs n, a panel per shape and precision; published peaks as flat lines across the measured sizes."""
    curves: dict[str, Series] = defaultdict(dict)
    peaks: dict[str, dict[str, float]] = defaultdict(dict)
    for e in (e for e in entries if e.task == "matmul"):
        title = f"matmul {e.settings['trainbench.matmul_shape']}, {e.settings['trainbench.precision']}"
        if e.tflops:
            curves[title][_unique_label(curves[title], e.column.label)] = [[n, t] for n, t in e.tflops]
        elif e.column.reference and "peak_tflops" in e.metrics:
            peaks[title][f"{e.column.label} (peak_tflops)"] = e.metrics["peak_tflops"]
    for title, series in curves.items():
        sizes = [n for points in series.values() for n, _ in points]
        for label, peak in peaks.get(title, {}).items():
            series[label] = [[min(sizes), peak], [max(sizes), peak]]
    return dict(sorted(curves.items()))


def epoch_panels(entries: list[Entry]) -> Panels:
    """epoch_time_s per epoch, one series per run of two or more epochs, a panel per setting."""
    panels: Panels = defaultdict(dict)
    for e in sorted(entries, key=lambda e: (e.column, e.run_id)):
        if len(e.epoch_times) > 1:
            series = panels[setting_text(e)]
            series[_unique_label(series, e.column.label)] = [[step, value] for step, value in e.epoch_times]
    return dict(sorted(panels.items()))


def scaling_panels(entries: list[Entry]) -> tuple[Panels, Panels]:
    """(samples/s vs devices, scaling efficiency vs devices): a panel per setting where some device ran at two
    or more device counts. Efficiency = samples/s at N / (N x samples/s at 1), from the runs shown (1 at N=1);
    a device without a 1-device run has no efficiency line."""
    groups: dict[tuple[tuple[str, str], ...], list[Entry]] = defaultdict(list)
    for e in entries:
        if e.metrics.get("samples_per_s") is not None and _devices(e) is not None and task_kind(e.task).uses_model:
            groups[_panel_key(e, "trainbench.num_devices")].append(e)
    throughput: Panels = {}
    efficiency: Panels = {}
    for members in groups.values():
        series = _medians(members, _devices, lambda e: e.metrics["samples_per_s"])
        if not any(len(points) > 1 for points in series.values()):
            continue
        title = setting_text(members[0], ("num_devices",))
        throughput[title] = series
        ratios = {label: _efficiency(points) for label, points in series.items() if len(points) > 1}
        ratios = {label: points for label, points in ratios.items() if points}
        if ratios:
            efficiency[title] = ratios
    return dict(sorted(throughput.items())), dict(sorted(efficiency.items()))


def _efficiency(points: list[list[float]]) -> list[list[float]]:
    """[[devices, samples/s], ...] -> [[devices, samples/s / (devices x samples/s at 1)], ...]; [] without 1."""
    single = next((rate for devices, rate in points if devices == 1), None)
    return [[devices, rate / (devices * single)] for devices, rate in points] if single else []


def _devices(e: Entry) -> int | None:
    value = e.settings.get("trainbench.num_devices", "")
    return int(value) if value.isdigit() else None


def _medians(members: list[Entry], x: Callable[[Entry], Any], y: Callable[[Entry], float]) -> Series:
    """One series per device: the median of repeated runs at each x."""
    points: dict[str, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in members:
        points[e.column.label][x(e)].append(y(e))
    return {
        label: [[xv, statistics.median(ys)] for xv, ys in sorted(by_x.items())]
        for label, by_x in sorted(points.items())
    }


def _unique_label(series: Series, label: str) -> str:
    unique, copy = label, 2
    while unique in series:
        unique, copy = f"{label} #{copy}", copy + 1
    return unique


# --------------------------------------------------------------------------------------------- drawing


def draw(
    path: Path, panels: Panels, *, xlabel: str, ylabel: str, log_x: int | None = None, integer_x: bool = False
) -> None:
    """Small multiples with one legend below them; a device has one colour throughout."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    labels = sorted({label.split(" #")[0] for series in panels.values() for label in series})
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colours = {label: palette(i % palette.N) for i, label in enumerate(labels)}
    columns = min(MAX_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    # Wide enough for the longest legend entry; as many legend columns as fit side by side.
    entry_in = LEGEND_CHAR_IN * max(len(label) for label in labels) + 0.6
    width_in = max(PANEL_WIDTH_IN * columns, entry_in + 0.4)
    legend_columns = max(1, min(len(labels), int(width_in // entry_in)))
    legend_in = 0.3 + 0.22 * math.ceil(len(labels) / legend_columns)
    height_in = PANEL_HEIGHT_IN * rows + legend_in
    figure, axes = plt.subplots(rows, columns, figsize=(width_in, height_in), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels.items(), strict=False):
        for label, points in series.items():
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                markersize=4,
                color=colours[label.split(" #")[0]],
                linestyle="--" if "(peak_tflops)" in label else "-",
            )
        ax.set_title("\n".join(textwrap.wrap(untrusted.for_terminal(title), TITLE_WIDTH_CHARS)), fontsize=9)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.tick_params(labelsize=8)
        if log_x:
            ax.set_xscale("log", base=log_x)
            if integer_x:  # device counts: 1 2 4 8, not 2^0 ... 2^3
                ax.xaxis.set_major_formatter(FormatStrFormatter("%d"))
        elif integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colours[label], marker="o", label=label) for label in labels]
    figure.legend(handles=handles, loc="lower center", ncol=legend_columns, fontsize=9, frameon=False)
    figure.tight_layout(rect=(0, legend_in / height_in, 1, 1))
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def write_plots(entries: list[Entry], out: Path, notes: list[str]) -> list[Path]:
    """Write each plot that has data, with its .json; say why a plot was skipped."""
    written: list[Path] = []
    scaling, efficiency = scaling_panels(entries)
    plots = (
        (
            "throughput",
            throughput_panels(entries),
            dict(xlabel="batch size", ylabel="samples/s", log_x=2),
            "no setting has samples_per_s at two or more batch sizes on one device",
        ),
        (
            "mlp_depth",
            depth_panels(entries),
            dict(xlabel="model.depth (hidden layers)", ylabel="total_time_s (s)"),
            "no selected run has a model.depth param and total_time_s",
        ),
        (
            "matmul",
            matmul_panels(entries),
            dict(xlabel="matrix size n", ylabel="TFLOPS", log_x=10),
            "no selected run with task=matmul has a `tflops` history yet",
        ),
        (
            "scaling",
            scaling,
            dict(xlabel="devices (data-parallel)", ylabel="samples/s (all devices)", log_x=2, integer_x=True),
            "no setting has samples_per_s at two or more device counts on one machine",
        ),
        (
            "scaling_efficiency",
            efficiency,
            dict(xlabel="devices (data-parallel)", ylabel="scaling efficiency (1 = linear)", log_x=2, integer_x=True),
            "no setting has samples_per_s at 1 device and at more on one machine",
        ),
        (
            "epoch_times",
            epoch_panels(entries),
            dict(xlabel="epoch", ylabel="epoch_time_s (s)", integer_x=True),
            "no selected run has epoch_time_s for two or more epochs",
        ),
    )
    for name, panels, style, why_not in plots:
        if not panels:
            notes.append(f"skipped {name}.png: {why_not}")
            continue
        (out / f"{name}.json").write_text(json.dumps(panels, indent=1) + "\n")
        draw(out / f"{name}.png", panels, **style)
        written += [out / f"{name}.png", out / f"{name}.json"]
    return written
