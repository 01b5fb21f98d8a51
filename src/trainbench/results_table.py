"""The cells of one or more stores and export files, and the published rows in the stores, as a table in the terminal (markdown, what results/*.md
files are made of), with the columns that tell its rows apart: the settings that differ between them, the
machine, the framework release (with `compiled` where the step was, and the framework's settings that are not its
defaults, as the report names them), the date and the versions. `step/epoch cv %` is how much a benchmark's timed
steps varied, or a train run's epochs (those its samples/s is of).

trainbench results                                     # this machine's store, experiment trainbench
trainbench results --uri sqlite:///path/to/mlflow.db --uri http://team:5000 colleague.json --sweep RUN_ID

trainbench.api.results() builds the table with `columns`; trainbench.results_command is the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainbench import figures
from trainbench.measure import hardware
from trainbench.report.selection import entry
from trainbench.store import sources
from trainbench.store.setting import describe, differences, setting

Column = tuple[str, Callable[[Any], str]]


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _metric(key: str, digits: int = 1) -> Callable[[Any], str]:
    return lambda found: _number(found.run.data.metrics.get(key), digits)


def _figure(key: str, per_repeat: bool = True) -> Callable[[Any], str]:
    """As every screen quotes a run's figure (trainbench.figures): interval, repeats (where the figure is made of
    repeats: not a total time, one measurement of the whole run), noise."""

    def cell(found: Any) -> str:
        data = found.run.data
        value = data.metrics.get(key)
        if value is None:
            return ""
        if _published(found):  # a number from a paper or a blog: how many repeats made it is not known
            return figures.quoted(value)
        count = figures.repeats(data.params, key) if per_repeat else None
        return figures.quoted(value, figures.ci95(data.metrics, key), count, figures.noisy(data.tags))

    return cell


def _published(found: Any) -> bool:
    return found.run.data.tags.get("trainbench.kind") == "reference"


def _source(found: Any) -> str:
    """Where a row comes from: a published row its publication (not the store it was imported into)."""
    tags = found.run.data.tags
    if _published(found):
        return f"published: {tags.get('reference.source', '?')}"
    return tags.get(sources.IMPORTED_FROM) or found.source.name


def _date(found: Any) -> str:
    """When the run was measured; a published row's import time is not when it was measured: left blank."""
    if _published(found):
        return ""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(found.run.info.start_time / 1000))


def _spread(found: Any) -> str:
    """How much the timed steps varied (benchmark), else the epochs that make samples/s (train)."""
    metrics = found.run.data.metrics
    return _number(metrics.get("step_time_cv_pct", metrics.get("epoch_time_cv_pct")), 2)


def _tag(key: str) -> Callable[[Any], str]:
    return lambda found: found.run.data.tags.get(key, "")


def version_tags() -> set[str]:
    """The `sw.*` tags naming each framework's own releases, as each framework's config declares them."""
    from trainbench.config.plugins import SCHEMAS
    from trainbench.config.schema import FrameworkConfig

    return {
        tag
        for config in SCHEMAS["framework"].values()
        if issubclass(config, FrameworkConfig)
        for tag in config.version_tags
    }


def columns(found: list[sources.Found], several_sources: bool) -> list[Column]:
    """Every column that has a value in some row; `setting` names only what differs between the rows."""
    shown_versions = version_tags()
    settings = {f.run.info.run_id: setting(f.run.data.params, f.run.data.tags) for f in found}
    keys = differences(list(settings.values()))
    # The report's own column for the run (trainbench.report.selection.Column.software): its words, its defaults.
    software = {f.run.info.run_id: entry(f, histories=False).column.software for f in found}
    chosen: list[Column] = [
        ("cell", lambda f: f.run.info.run_name or f.run.info.run_id),
        ("outcome", _tag("trainbench.outcome")),
        ("setting", lambda f: describe(settings[f.run.info.run_id], keys)),
        ("machine", lambda f: hardware.run_label(f.run.data.tags)),
        ("framework", lambda f: software[f.run.info.run_id]),
        ("date", _date),
        ("samples/s", _figure("samples_per_s")),
        ("total s", _figure("total_time_s", per_repeat=False)),
        ("step ms p50", _metric("step_time_ms_p50", 2)),
        ("step/epoch cv %", _spread),
        ("peak GPU MB", _metric("peak_device_memory_mb")),
        ("MFU", _metric("mfu", 3)),
        ("avg W", _metric("avg_power_w")),
        ("samples/J", _metric("samples_per_j", 2)),
        ("energy", _tag("energy.source")),
        ("peak TFLOPS", _metric("peak_tflops")),
        (
            "versions",
            lambda f: " ".join(f"{k[3:]} {v}" for k, v in sorted(f.run.data.tags.items()) if k in shown_versions),
        ),
    ]
    if several_sources or any(_published(f) for f in found):
        chosen.append(("from", _source))
    return [(name, cell) for name, cell in chosen if name == "cell" or any(cell(f) for f in found)]
