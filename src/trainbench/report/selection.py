"""Which runs the report compares, and each one as the report sees it (an Entry).

Runs come from every source given (stores and export files, trainbench.store.sources), each once. An Entry's row
is its comparison setting (trainbench.store.setting: the whole config less the speed-neutral fields and what is
compared) and its column is the machine (trainbench.measure.hardware.label of its tags), the backend that ran and the
framework at its major.minor release, plus the settings the report was asked to compare across.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from trainbench import untrusted
from trainbench.measure import hardware
from trainbench.store.runs import comparison_settings, model_variant, task_kind
from trainbench.store.setting import describe, framework_knobs, normal, release, setting, setting_key, step_compiled
from trainbench.store.sources import IMPORTED_FROM, FileSource, Found, search

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
    across: tuple[str, ...] = ()  # settings compared as columns instead of rows (e.g. precision.name)

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
        if self.across:
            parts.append(f"compared across {', '.join(self.across)}")
        return "; ".join(parts)


@dataclass(frozen=True, order=True)
class Column:
    """One machine and framework as the tables show it."""

    reference: bool
    hw_label: str  # trainbench.measure.hardware.label: the machine, with what changes its speed
    backend: str
    framework: str
    release: str = ""  # the framework's major.minor ("2.14"), or "version unknown"
    knobs: str = ""  # the framework's settings that are not its defaults ("cudnn_benchmark=false")
    across: str = ""  # the values of the settings compared across (`--across precision.name`)
    source: str = ""
    series: str = ""  # the publication's own name for a line, when one source has several on one device
    mine: bool = False  # this machine (or the sweep being shown)
    # Runs of results/contributed/ (a colleague's machine, even of this machine's label): a column of their own,
    # never in yours; this machine's earlier runs of a setting are `history`, apart from the figure that is yours.
    contributed: bool = False
    history: bool = False
    # Whether the run's step was compiled (tag trainbench.compile: XLA, torch.compile): Keras on JAX always is, so
    # one setting's JAX and PyTorch figures side by side can be compiled against eager, and say so.
    compiled: bool = False

    @property
    def software(self) -> str:
        version = f" {self.release}" if self.release and self.release != "version unknown" else ", version unknown"
        extra = ", ".join(part for part in ("compiled" if self.compiled else "", self.knobs, self.across) if part)
        return f"{self.framework}{version}" + (f", {extra}" if extra else "")

    @property
    def label(self) -> str:
        text = f"{self.hw_label}: {self.software} ({self.backend})"
        if self.reference:
            text += f" [ref: {self.source}{': ' + self.series if self.series else ''}]"
        elif self.contributed:
            text += " [contributed]"
        elif self.history:
            text += " [earlier here]"
        return untrusted.for_terminal(text)  # from other machines' tags: shown in tables, plots and screens

    def order(self) -> tuple[Any, ...]:
        """Yours first, then this machine's earlier runs, other machines' runs, published figures."""
        return (
            not self.mine,
            not self.history,
            self.reference,
            self.hw_label,
            self.framework,
            self.release,
            self.label,
        )


@dataclass
class Entry:
    """One run, as the report sees it."""

    run_id: str
    run_name: str
    column: Column
    settings: dict[str, str]  # trainbench.store.runs.comparison_settings: the setting in words, for display
    key: tuple[tuple[str, str], ...]  # trainbench.store.setting.setting_key: equal keys, comparable figures
    variant: str  # the model's shape ("depth 5 x 1024")
    params: dict[str, str]
    metrics: dict[str, float]
    setting: dict[str, str] = field(
        default_factory=dict
    )  # trainbench.store.setting.setting, less what is compared across
    tags: dict[str, str] = field(default_factory=dict)
    citation: str = ""
    source_line: str = ""
    reproduce: str = ""  # a reference's `python src/run.py ...` that measures its setting here
    sample_kind: str | None = None  # images or sequences, where a reference says so
    origin: str = ""  # where an imported or contributed run came from
    origin_kind: str = ""  # "imported" (into a store read here) or "contributed" (a file of results/contributed/)
    epoch_times: list[tuple[int, float]] = field(default_factory=list)
    tflops: list[tuple[int, float]] = field(default_factory=list)
    start_time: int = 0  # ms since the epoch: which of this machine's runs of a setting is the latest

    @property
    def task(self) -> str:
        return self.settings["trainbench.task"]

    @property
    def model(self) -> str:
        kind = task_kind(self.task)
        if not kind.uses_model:  # its model is configured but not used: its own settings name what it ran
            return "_".join([self.task, *(self.settings[tag] for tag in kind.setting_tags)])
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


def select(
    sources: list[Any],
    selection: Selection,
    mine: set[str] | None = None,
    mine_runs: set[str] | None = None,
    histories: bool = True,
) -> tuple[list[Entry], list[str]]:
    """The finished cells and reference runs the selection names (references: those of the sweep's models),
    and notes on the runs left out. Whose columns are highlighted: `mine_runs` (run ids), else with a sweep
    its own cells, else `mine` (the hw.labels of this machine). `histories`: read epoch times and matmul
    curves (one request per run)."""
    from mlflow.exceptions import MlflowException

    extra = f" AND {selection.filter}" if selection.filter else ""
    cell_filter = CELLS + (f" AND tags.`mlflow.parentRunId` = '{selection.sweep}'" if selection.sweep else "")
    try:
        cells = search(sources, selection.experiment, cell_filter + extra)
        references = search(sources, selection.experiment, REFERENCES + extra) if selection.references else []
    except MlflowException as error:
        raise ReportError(f"bad --filter {selection.filter!r}: {first_line(error.message)}") from None
    # A store may hold a "reference" imported before `trainbench import` refused them: never published.
    travelled = [f for f in references if _travelled(f)]
    references = [f for f in references if not _travelled(f)]
    if selection.models:
        cells = [f for f in cells if _model_of(f) in selection.models]
        references = [f for f in references if _model_of(f) in selection.models]
    if selection.sweep:
        swept = {_model_of(f) for f in cells}
        references = [f for f in references if _model_of(f) in swept]
    untrained = [f for f in cells if _untrained(f.run)]
    notes = (
        [
            f"left out {len(untrained)} cell(s) with epochs=0 (the model was built, not trained: no figures): "
            + ", ".join(sorted(f.run.info.run_name for f in untrained))
        ]
        if untrained
        else []
    )
    if travelled:
        notes.append(
            f"left out {len(travelled)} reference run(s) that came from an export file: published figures come only "
            "from the repository's references/published-results.csv"
        )
    kept = [f for f in cells if not _untrained(f.run)] + references
    ids = mine_runs or ({f.run.info.run_id for f in cells} if selection.sweep else set())
    # A column is a kind of machine: the runs' machines are "yours", with any other run of theirs.
    labels = {hardware.run_label(f.run.data.tags) for f in cells if f.run.info.run_id in ids} if ids else mine
    return [entry(f, selection.across, labels or set(), histories) for f in kept], notes


def _travelled(found: Found) -> bool:
    """Whether a run came from an export file (imported into a store, or the file read itself)."""
    return IMPORTED_FROM in found.run.data.tags or isinstance(found.source, FileSource)


def entry(found: Found, across: tuple[str, ...] = (), mine: set[str] | None = None, histories: bool = True) -> Entry:
    run = found.run
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    reference = tags.get("trainbench.kind") == "reference"
    full = setting(params, tags)
    hw_label = hardware.run_label(tags)
    framework = tags.get("trainbench.framework", params.get("framework.name", "?"))
    # results/contributed/ (read as files, or imported into the store's shared experiment) holds other machines'
    # runs, even where one has this machine's label: never yours, nor this machine's history.
    contributed = bool(getattr(found.source, "contributed", False))
    column = Column(
        reference=reference,
        hw_label=hw_label,
        backend=tags.get("trainbench.backend", "?"),
        framework=framework,
        release=release(tags.get("trainbench.framework_version")),
        knobs=", ".join(f"{k}={v}" for k, v in framework_knobs(params).items() if not _default_knob(framework, k, v)),
        across=describe(full, list(across)),
        source=tags.get("reference.source", "") if reference else "",
        series=tags.get("reference.series", "") if reference else "",
        mine=not reference and not contributed and hw_label in (mine or set()),
        contributed=contributed and not reference,
        compiled=step_compiled(tags),
    )
    compared = {key: value for key, value in full.items() if not _across(key, across)}
    units = tags.get("reference.units", "")
    kinds = {kind for unit, kind in SAMPLE_KINDS.items() if f"={unit}" in units}
    settings = comparison_settings(tags, params)
    return Entry(
        run_id=run.info.run_id,
        run_name=run.info.run_name or run.info.run_id,
        column=column,
        settings=settings,
        key=setting_key(compared),
        variant=model_variant(params) if task_kind(settings["trainbench.task"]).uses_model else "",
        params=dict(params),
        metrics=dict(metrics),
        setting=compared,
        tags=dict(tags),
        citation=tags.get("reference.citation", ""),
        source_line=tags.get("reference.source_line", ""),
        reproduce=tags.get("reference.reproduce", ""),
        sample_kind=next(iter(kinds)) if len(kinds) == 1 else None,
        origin=tags.get(IMPORTED_FROM, ""),
        origin_kind="contributed" if contributed else ("imported" if IMPORTED_FROM in tags else ""),
        epoch_times=found.history("epoch_time_s") if histories and "epoch_time_s" in metrics else [],
        tflops=found.history("tflops") if histories and "tflops" in metrics else [],
        start_time=run.info.start_time or 0,
    )


def _across(key: str, across: tuple[str, ...]) -> bool:
    """Whether `key` is compared across: named, or a field of a group whose choice is (`precision.name`
    takes precision.tf32 and precision.autocast with it)."""
    return any(key == a or (a.endswith(".name") and key.startswith(a.removesuffix("name"))) for a in across)


def _default_knob(framework: str, knob: str, value: str) -> bool:
    """Whether a framework setting has its schema's default (a column names only the ones that do not)."""
    from trainbench.config.plugins import SCHEMAS

    cls = SCHEMAS.get("framework", {}).get(framework)
    if cls is None:
        return False
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return knob in defaults and normal(defaults[knob]) == value


def _untrained(run: Any) -> bool:
    """A train cell with epochs=0 built and logged its model, and measured nothing."""
    settings = comparison_settings(run.data.tags, run.data.params)
    return settings["trainbench.task"] == "train" and settings["trainbench.epochs"] == "0"


def _model_of(found: Found) -> str | None:
    return found.run.data.tags.get("trainbench.model")


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None  # "null" (mlp has no depth), "" (not applicable)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
