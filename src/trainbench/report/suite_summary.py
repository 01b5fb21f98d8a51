"""After `trainbench suite`: each workload, this machine against every machine that ran it, and one line per
machine -- the geometric mean of its ratios to a named reference machine over the workloads both ran.

Runs of another suite version never compare (tags trainbench.suite, trainbench.suite_version: the suite's
set of workloads changed); runs of this version do, and so do runs outside any suite and published reference
rows whose setting equals a workload's (the default cell run by hand is the suite's MLP workload). Where the reference machine ran none of this sweep's workloads, this machine is the
reference. Ratios are "higher = faster" whatever the metric (a total time is inverted).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trainbench import figures as quoting
from trainbench import suite
from trainbench.report.comparison import TABLE_METRICS, TableMetric, headline
from trainbench.report.selection import Entry

REFERENCE_MACHINE = (
    "NVIDIA H100 80GB HBM3"  # trainbench.measure.hardware.label of the reference, when it ran the workloads
)
THIS_MACHINE = "this machine"


@dataclass
class Workload:
    """One workload of the suite: its figure on every machine that ran its setting."""

    title: str
    metric: TableMetric
    values: dict[str, float] = field(default_factory=dict)  # machine -> median figure
    runs: dict[str, int] = field(default_factory=dict)
    ci95: dict[str, float | None] = field(default_factory=dict)  # one run's recorded interval, or its span's wider side
    noisy: dict[str, bool] = field(default_factory=dict)
    repeats: dict[str, int | None] = field(default_factory=dict)  # the timed repeats of a machine's one run
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # several runs: what they measured

    def quoted(self, machine: str) -> str:
        """The figure as the first screen quotes it (trainbench.figures.quoted): interval, repeats or runs, NOISY."""
        runs = self.runs.get(machine, 1)
        count = self.repeats.get(machine) if runs == 1 else None
        noisy = self.noisy.get(machine, False)
        return quoting.quoted(self.values[machine], self.ci95.get(machine), count, noisy, runs, self.spans.get(machine))

    def against(self, machine: str, reference: str) -> str:
        """`machine`'s ratio to `reference` where a speed-up may be claimed (trainbench.figures.judged), else the
        words for why not."""
        ratio = self.ratio(machine, reference)
        if ratio is None:
            return ""
        a, b = (self.values[m] for m in (machine, reference))
        verdict = quoting.judged(
            a,
            self.ci95.get(machine),
            self.noisy.get(machine, False),
            b,
            self.ci95.get(reference),
            self.noisy.get(reference, False),
        )
        if verdict == quoting.WITHIN_NOISE:
            return f"within noise of {reference}"
        if verdict == quoting.TOO_CLOSE:
            return f"too close to call against {reference} (no interval recorded)"
        alone = self.ci95.get(machine) is None or self.ci95.get(reference) is None
        return f"{ratio:.3g}x {reference}" + ("; no interval recorded" if alone else "")

    def ratio(self, machine: str, reference: str) -> float | None:
        """How many times faster `machine` is than `reference` here (None where either did not run it)."""
        mine, theirs = self.values.get(machine), self.values.get(reference)
        if not mine or not theirs:
            return None
        return mine / theirs if self.metric.higher_is_better else theirs / mine

    def ratio_bounds(self, machine: str, reference: str) -> tuple[float, float]:
        """The lowest and highest ratio both figures' 95% intervals allow (a figure without one is given
        +-trainbench.figures.WITHOUT_INTERVAL of itself): 0 or infinity where an interval reaches zero."""

        def span(m: str) -> tuple[float, float]:
            value = self.values[m]
            spread = quoting.judged_interval(value, self.ci95.get(m), self.noisy.get(m, False))
            return max(value - spread, 0.0), value + spread

        (mine_low, mine_high), (theirs_low, theirs_high) = span(machine), span(reference)
        if not self.metric.higher_is_better:
            (mine_low, mine_high), (theirs_low, theirs_high) = (theirs_low, theirs_high), (mine_low, mine_high)
        return mine_low / theirs_high, (mine_high / theirs_low if theirs_low > 0 else math.inf)


@dataclass
class MachineLine:
    """A machine's geometric mean of its ratios to the reference, and the interval the workloads' intervals
    allow it: the geometric means of their lowest and of their highest ratios (every ratio within its bounds
    puts the mean within these)."""

    machine: str
    geomean: float
    workloads: int
    low: float = math.nan
    high: float = math.nan

    def said(self) -> str:
        interval = f"{_bound(self.low)}-{_bound(self.high)}"
        if self.low <= 1.0 <= self.high:
            return f"{self.geomean:.3g}x, too close to call ({interval})"
        return f"{self.geomean:.3g}x ({interval})"


@dataclass
class SuiteSummary:
    workloads: list[Workload]
    reference: str
    lines: list[MachineLine]
    this_machine: str


def comparable(e: Entry, version: str = str(suite.SUITE_VERSION)) -> bool:
    """A run of this suite version, or a run outside any suite (its setting equal to a workload's is the same
    measurement: the default cell run by hand, a published row); never a run of another suite or version."""
    if "trainbench.suite" not in e.tags:
        return True
    return e.tags.get("trainbench.suite") == suite.SUITE_NAME and e.tags.get("trainbench.suite_version") == version


def machine_of(e: Entry) -> str:
    name = e.column.hw_label
    if e.column.reference:
        return f"{name} [published: {e.column.source}]"
    return name if e.column.framework == default_framework() else f"{name} ({e.column.framework})"


@functools.cache
def default_framework() -> str | None:
    """The framework a cell runs unless told (conf/config.yaml): its machines need no framework named."""
    from trainbench.config.catalogue import default_choice

    return default_choice("framework")


def summarise(entries: list[Entry], mine_runs: set[str], reference: str = REFERENCE_MACHINE) -> SuiteSummary:
    """The suite's standing from `entries` (trainbench.report.selection): the workloads of `mine_runs` (this
    sweep's finished cells), each with every machine's median figure, and the per-machine geometric means."""
    mine = [e for e in entries if e.run_id in mine_runs]
    this_machine = machine_of(mine[0]) if mine else THIS_MACHINE
    this_label = mine[0].column.hw_label if mine else None
    by_key: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Entry]] = defaultdict(list)
    for e in entries:
        swept = e.run_id in mine_runs
        if swept or comparable(e):
            if not swept and machine_of(e) == this_machine and e.origin_kind != "contributed":
                continue  # this machine's earlier runs are history, not this sweep's figure
            by_key[(e.task, e.model, e.key)].append(e)
    workloads = []
    for members in by_key.values():
        ours = [e for e in members if e.run_id in mine_runs]
        metric = next((m for m in TABLE_METRICS if ours and m.name == headline(ours[0])), None)
        if metric is None:
            continue
        figures: dict[str, list[float]] = defaultdict(list)
        runs_of: dict[str, list[Entry]] = defaultdict(list)
        for e in members:
            value = e.value(metric.name)
            if value is not None and value > 0:
                machine = THIS_MACHINE if e.run_id in mine_runs else machine_of(e)
                if machine != THIS_MACHINE and e.origin_kind == "contributed" and e.column.hw_label == this_label:
                    machine += " (contributed)"  # a colleague's machine of this one's name, in any framework
                figures[machine].append(value)
                runs_of[machine].append(e)
        workload = Workload(_title(ours[0]), metric)
        for machine, values in figures.items():
            workload.values[machine] = statistics.median(values)
            workload.runs[machine] = len(values)
            one = runs_of[machine][0] if len(values) == 1 else None
            if one:
                workload.ci95[machine] = quoting.ci95(one.metrics, metric.name)
            else:
                intervals = [quoting.ci95(e.metrics, metric.name) for e in runs_of[machine]]
                measured = quoting.span(values, intervals, any(quoting.noisy(e.tags) for e in runs_of[machine]))
                workload.spans[machine] = measured
                workload.ci95[machine] = quoting.half_width(workload.values[machine], *measured)
            workload.repeats[machine] = quoting.repeats(one.params, metric.name) if one else None
            workload.noisy[machine] = any(quoting.noisy(e.tags) for e in runs_of[machine])
        workloads.append(workload)
    workloads.sort(key=lambda w: w.title)
    ran = {m for w in workloads for m in w.values}
    chosen = reference_machine(workloads, reference)
    lines = []
    for machine in sorted(ran, key=lambda m: (m != THIS_MACHINE, m)):
        lines.extend(machine_line(machine, chosen, workloads))
    return SuiteSummary(workloads, chosen, lines, this_machine)


def machine_line(machine: str, reference: str, workloads: list[Workload]) -> list[MachineLine]:
    """`machine`'s line against `reference` over the workloads both ran (none where they share none)."""
    shared = [(w, r) for w in workloads if (r := w.ratio(machine, reference)) is not None]
    if not shared:
        return []
    line = MachineLine(machine, geometric_mean([r for _, r in shared]), len(shared))
    if machine != reference:
        bounds = [w.ratio_bounds(machine, reference) for w, _ in shared]
        line.low, line.high = geometric_mean([b[0] for b in bounds]), geometric_mean([b[1] for b in bounds])
    return [line]


def reference_machine(workloads: list[Workload], preferred: str) -> str:
    """The machine every line is set against: `preferred` where it ran as many of this sweep's workloads as any
    other machine, else the one that ran the most (a mean over one shared workload says little) and, of those,
    the one with the fewest noisy figures (a loaded machine's wide intervals widen every line's range), then the
    most runs behind its figures (a 2-vCPU VM's one suite run against six of an H200's); else this one."""
    ran: dict[str, int] = defaultdict(int)
    noisy: dict[str, int] = defaultdict(int)
    runs: dict[str, int] = defaultdict(int)
    for w in workloads:
        for machine in w.values:
            if machine != THIS_MACHINE:
                ran[machine] += 1
                noisy[machine] += w.noisy.get(machine, False)
                runs[machine] += w.runs.get(machine, 1)
    if not ran:
        return THIS_MACHINE
    most = max(ran.values())
    if ran.get(preferred) == most:
        return preferred
    return min((noisy[m], -runs[m], m) for m, n in ran.items() if n == most)[2]


def geometric_mean(ratios: list[float]) -> float:
    """0 where a ratio is 0, infinity where one is infinite (and none is 0)."""
    if any(r == 0 for r in ratios):
        return 0.0
    if any(math.isinf(r) for r in ratios):
        return math.inf
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def _bound(ratio: float) -> str:
    return "unbounded" if math.isinf(ratio) else f"{ratio:.3g}"


def _title(e: Entry) -> str:
    from trainbench.report.standing import title

    return title(e)


def terminal_lines(found: SuiteSummary) -> list[str]:
    """The suite's part of the first screen: per workload every machine's figure, then one line per machine."""
    shown_ref = f"{found.this_machine} ({THIS_MACHINE})" if found.reference == THIS_MACHINE else found.reference
    head = f"Standard suite v{suite.SUITE_VERSION}: {len(found.workloads)} workload(s)"
    lines = [
        head + f", this machine = {found.this_machine}; other machines: their runs of v{suite.SUITE_VERSION} and of"
        " these settings outside the suite (other versions left out), this machine's earlier runs left out"
    ]
    for w in found.workloads:
        lines.append(f"  {w.title} [{w.metric.unit}]")
        for machine in sorted(w.values, key=lambda m: (m != THIS_MACHINE, -w.values[m])):
            said = "" if machine == THIS_MACHINE else w.against(machine, THIS_MACHINE)
            against = f"  {said}" if said else ""
            lines.append(f"    {machine}: {w.quoted(machine)}{against}")
    lines.append(
        f"Per machine, the geometric mean of its ratios to {shown_ref} (higher = faster), over the workloads both ran,"
        " with the range the workloads' 95% intervals allow it:"
    )
    for line in found.lines:
        name = f"{found.this_machine} ({THIS_MACHINE})" if line.machine == THIS_MACHINE else line.machine
        said = f"{line.geomean:.3g}x (the reference)" if line.machine == found.reference else line.said()
        lines.append(f"  {name}: geometric mean over {line.workloads} workload(s) vs {shown_ref}: {said}")
    return lines


def after_suite(client: Any, uri: str, experiment_id: str, mine: set[str]) -> list[str]:
    """The suite summary of a finished sweep: its cells against this store, results/contributed/ and the
    published rows in the store."""
    from trainbench.report.selection import Selection, select
    from trainbench.store import sources

    experiment = client.get_experiment(experiment_id).name
    entries, _ = select(sources.compared_with(client, uri), Selection(experiment), mine_runs=mine, histories=False)
    return terminal_lines(summarise(entries, mine))
