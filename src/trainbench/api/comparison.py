"""trainbench.compare: where runs stand against every other machine that ran exactly their setting, as the first
screen after a sweep shows it, typed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainbench.api.errors import DEFAULT_EXPERIMENT, BadInput
from trainbench.api.sweeps import Cell, SweepResult


@dataclass(frozen=True)
class Machine:
    """One bar of a comparison: a machine (and framework) that ran the setting, or this machine's own run."""

    machine: str  # hw.label: "NVIDIA H100 80GB HBM3", "Intel Xeon CPU (2 vCPUs)"
    software: str  # the framework at its major.minor release, "compiled" where its step was, its non-default settings
    backend: str
    kind: str  # yours, this store, imported, contributed, published; history: this machine, earlier runs
    origin: str  # the contributed file, import or publication it came from
    value: float  # the metric (the median of `runs` runs)
    ci95: float | None
    repeats: int | None
    runs: int
    noisy: bool
    speedup: float | None  # against your figure, higher = faster; None where within noise (or yours)
    within_noise: bool  # no speed-up may be claimed: the intervals overlap (or, with no_interval, too close to call)
    no_interval: bool  # this figure or yours has no interval (one measurement): given +-20% (trainbench.figures)
    figure: str  # as the first screen quotes it


@dataclass(frozen=True)
class Comparison:
    """One setting you ran, and every machine that ran exactly it: the first screen's line for that setting."""

    setting_id: str
    title: str  # the setting in words
    metric: str  # samples_per_s, ...
    unit: str
    higher_is_better: bool
    machines: tuple[Machine, ...]  # yours and the other machines, in the page's order
    history: tuple[Machine, ...]  # this machine's earlier runs of the setting, apart from the figure
    nearest: tuple[tuple[Machine, str], ...]  # where no other machine ran it: the closest that did, and how they differ
    lines: tuple[str, ...]  # the first screen's text for this setting

    @property
    def yours(self) -> tuple[Machine, ...]:
        return tuple(m for m in self.machines if m.kind == "yours")

    @property
    def others(self) -> tuple[Machine, ...]:
        return tuple(m for m in self.machines if m.kind != "yours")


def compare(
    runs: SweepResult | Cell | str | Iterable[str] | None = None,
    *,
    setting: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
) -> tuple[Comparison, ...]:
    """Where runs stand against every other machine that ran exactly their setting (this store, its imported and
    published runs, results/contributed/): the first screen after a sweep, as typed rows, one per setting.

    runs: a SweepResult, a Cell, a cell's or a sweep's run id, or several run ids; with none, this machine's latest
    run of each setting in the experiment. setting: only that setting (its id, as Cell.setting_id and the dry run
    give it). tracking_uri: else the run's store (a SweepResult's), $MLFLOW_TRACKING_URI or the project's store.
    Raises BadInput for a run id the store does not hold or a setting id that is not 12 hex digits."""
    from trainbench.report import standing
    from trainbench.store import tracking
    from trainbench.store.setting import setting_id as id_of

    if setting is not None and (len(setting) != 12 or any(c not in "0123456789abcdef" for c in setting)):
        raise BadInput(f"setting {setting!r}: a setting id is 12 hex digits (Cell.setting_id, sweep.dry_run=true)")
    if isinstance(runs, SweepResult):
        tracking_uri = tracking_uri or runs.tracking_uri
        ids: list[str] | None = list(runs.run_ids)
    elif isinstance(runs, Cell):
        ids = [runs.result_run_id] if runs.result_run_id else []
    elif isinstance(runs, str):
        ids = [runs]
    else:
        ids = None if runs is None else list(runs)
    uri = tracking.resolve_tracking_uri(tracking_uri)
    client = tracking.client(uri)
    name = experiment or DEFAULT_EXPERIMENT
    if ids is not None:
        mine, name = _cell_runs(client, uri, ids, experiment)
    else:
        mine = _latest_here(client, name)
    found = standing.compared(client, uri, name, mine) if mine else []
    rows = tuple(_comparison(s, id_of(s.setting)) for s in found)
    return tuple(r for r in rows if setting is None or r.setting_id == setting)


def _cell_runs(client: Any, uri: str, ids: list[str], experiment: str | None) -> tuple[set[str], str]:
    """The cells' run ids behind `ids` (a sweep's run stands for its cells, a skipped cell for the run holding its
    result), and their experiment's name."""
    from trainbench.store import tracking

    mine: set[str] = set()
    name = experiment
    for run_id in ids:
        try:
            run = client.get_run(run_id)
        except Exception as error:
            if isinstance(error, tracking.StoreFailed):
                raise
            raise BadInput(f"run {run_id}: not in {tracking.private(uri)}") from None
        experiment_id = run.info.experiment_id
        name = name or client.get_experiment(experiment_id).name
        tags = run.data.tags
        if tags.get("trainbench.kind") == "sweep":
            cells = client.search_runs([experiment_id], f"tags.`trainbench.sweep_id` = '{run_id}'", max_results=10_000)
            runs = [c for c in cells if c.data.tags.get("trainbench.outcome") in ("finished", "skipped")]
        else:
            runs = [run]
        for cell in runs:
            mine.add(cell.data.tags.get("trainbench.result_run_id") or cell.info.run_id)
    return mine, name or DEFAULT_EXPERIMENT


def _latest_here(client: Any, experiment: str) -> set[str]:
    """This machine's latest finished run of each setting and framework in the store's experiment (a contributed
    file from a machine of the same name is another machine's run, as on the first screen)."""
    from trainbench.report.writing import labels_of_this_machine
    from trainbench.store.runs import search_all
    from trainbench.store.setting import setting, setting_id

    found = client.get_experiment_by_name(experiment)
    if found is None:
        return set()
    labels = labels_of_this_machine()
    cells = "tags.`trainbench.kind` = 'cell' and tags.`trainbench.outcome` = 'finished'"
    newest: dict[tuple[str, str | None], Any] = {}
    for run in search_all(client, [found.experiment_id], cells):
        if run.data.tags.get("hw.label") not in labels:
            continue
        key = (setting_id(setting(run.data.params, run.data.tags)), run.data.params.get("framework.name"))
        if key not in newest or run.info.start_time > newest[key].info.start_time:
            newest[key] = run
    return {run.info.run_id for run in newest.values()}


def _comparison(found: Any, setting_id: str) -> Comparison:
    from trainbench.report import standing

    return Comparison(
        setting_id=setting_id,
        title=found.title,
        metric=found.metric.name,
        unit=found.metric.unit,
        higher_is_better=found.metric.higher_is_better,
        machines=tuple(_machine(b) for b in found.bars),
        history=tuple(_machine(b) for b in found.history),
        nearest=tuple((_machine(n.bar), n.differs) for n in found.nearest),
        lines=tuple(standing.terminal_lines([found])),
    )


def _machine(bar: Any) -> Machine:
    return Machine(
        machine=bar.column.hw_label,
        software=bar.column.software,
        backend=bar.column.backend,
        kind=bar.kind,
        origin=bar.origin,
        value=bar.value,
        ci95=bar.ci95,
        repeats=bar.repeats,
        runs=bar.runs,
        noisy=bar.noisy,
        speedup=bar.speedup,
        within_noise=bar.within_noise,
        no_interval=bar.no_interval,
        figure=bar.figure,
    )
