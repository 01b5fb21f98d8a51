"""Which runs the report compares, and each one as the report sees it (an Entry)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from trainbench.runs import comparison_key, comparison_settings, model_variant, search_all

CELLS = "tags.`trainbench.kind` = 'cell' AND tags.`trainbench.outcome` = 'finished'"
REFERENCES = "tags.`trainbench.kind` = 'reference'"
SAMPLE_KINDS = {"img/s": "images", "images/s": "images", "seq/s": "sequences", "sequences/s": "sequences"}


class ReportError(ValueError):
    """Nothing sensible to report. str() is the one line shown to the user."""


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


@dataclass(frozen=True, order=True)
class Column:
    """One device as the tables show it: local columns first, then references."""

    reference: bool
    hw_label: str
    backend: str
    framework: str
    source: str = ""
    series: str = ""  # the publication's own name for a line, when one source has several on one device

    @property
    def label(self) -> str:
        text = f"{self.hw_label} ({self.backend}, {self.framework})"
        if self.reference:
            text += f" [ref: {self.source}{': ' + self.series if self.series else ''}]"
        return text


@dataclass
class Entry:
    """One run, as the report sees it."""

    run_id: str
    run_name: str
    column: Column
    settings: dict[str, str]  # trainbench.runs.comparison_settings
    key: tuple[str, ...]  # trainbench.runs.comparison_key: equal keys, comparable figures
    variant: str  # the model's shape ("depth 5 x 1024"), part of the key
    params: dict[str, str]
    metrics: dict[str, float]
    citation: str = ""
    source_line: str = ""
    sample_kind: str | None = None  # images or sequences, where a reference says so
    epoch_times: list[tuple[int, float]] = field(default_factory=list)
    tflops: list[tuple[int, float]] = field(default_factory=list)

    @property
    def task(self) -> str:
        return self.settings["trainbench.task"]

    @property
    def model(self) -> str:
        if self.task == "matmul":  # a matmul cell's model is configured but not used
            return f"matmul_{self.settings['trainbench.matmul_shape']}"
        return self.settings["trainbench.model"]

    @property
    def batch_size(self) -> int | None:
        return _int(self.settings["trainbench.batch_size"])

    @property
    def depth(self) -> int | None:
        return _int(self.params.get("model.depth"))

    def value(self, metric: str) -> float | None:
        if metric == "epoch_time_s" and self.epoch_times:
            steady = self.epoch_times[1:] or self.epoch_times  # as samples_per_s: first epoch left out
            return statistics.fmean(v for _, v in steady)
        return self.metrics.get(metric)


def select(client: Any, experiment_id: str, selection: Selection) -> tuple[list[Entry], list[str]]:
    """The finished cells and reference runs the selection names (references: those of the sweep's models),
    and notes on the runs left out."""
    from mlflow.exceptions import MlflowException

    extra = f" AND {selection.filter}" if selection.filter else ""
    cell_filter = CELLS + (f" AND tags.`mlflow.parentRunId` = '{selection.sweep}'" if selection.sweep else "")
    try:
        cells = search_all(client, [experiment_id], cell_filter + extra)
        references = search_all(client, [experiment_id], REFERENCES + extra) if selection.references else []
    except MlflowException as error:
        raise ReportError(f"bad --filter {selection.filter!r}: {first_line(error.message)}") from None
    if selection.models:
        cells = [r for r in cells if _model_of(r) in selection.models]
        references = [r for r in references if _model_of(r) in selection.models]
    if selection.sweep:
        swept = {_model_of(r) for r in cells}
        references = [r for r in references if _model_of(r) in swept]
    untrained = [r for r in cells if _untrained(r)]
    notes = (
        [
            f"left out {len(untrained)} cell(s) with epochs=0 (the model was built, not trained: no figures): "
            + ", ".join(sorted(r.info.run_name for r in untrained))
        ]
        if untrained
        else []
    )
    kept = [r for r in cells if not _untrained(r)] + references
    return [entry(client, run) for run in kept], notes


def entry(client: Any, run: Any) -> Entry:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    reference = tags.get("trainbench.kind") == "reference"
    column = Column(
        reference=reference,
        hw_label=tags.get("hw.label", "unknown device"),
        backend=tags.get("trainbench.backend", "?"),
        framework=tags.get("trainbench.framework", params.get("framework.name", "?")),
        source=tags.get("reference.source", "") if reference else "",
        series=tags.get("reference.series", "") if reference else "",
    )
    units = tags.get("reference.units", "")
    kinds = {kind for unit, kind in SAMPLE_KINDS.items() if f"={unit}" in units}
    settings = comparison_settings(tags, params)
    return Entry(
        run_id=run.info.run_id,
        run_name=run.info.run_name or run.info.run_id,
        column=column,
        settings=settings,
        key=comparison_key(tags, params),
        variant="" if settings["trainbench.task"] == "matmul" else model_variant(params),
        params=dict(params),
        metrics=dict(metrics),
        citation=tags.get("reference.citation", ""),
        source_line=tags.get("reference.source_line", ""),
        sample_kind=next(iter(kinds)) if len(kinds) == 1 else None,
        epoch_times=_history(client, run.info.run_id, "epoch_time_s") if "epoch_time_s" in metrics else [],
        tflops=_history(client, run.info.run_id, "tflops") if "tflops" in metrics else [],
    )


def _untrained(run: Any) -> bool:
    """A train cell with epochs=0 built and logged its model, and measured nothing."""
    tags, params = run.data.tags, run.data.params
    settings = comparison_settings(tags, params)
    return settings["trainbench.task"] == "train" and settings["trainbench.epochs"] == "0"


def _model_of(run: Any) -> str | None:
    return run.data.tags.get("trainbench.model")


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None  # "null" (mlp has no depth), "" (not applicable)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
