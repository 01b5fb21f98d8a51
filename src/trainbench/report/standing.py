"""Where this machine stands: the first screen after a sweep, and the report's opening section.

For every setting the user ran (a sweep's cells, or this machine's runs), their figure next to every other
machine's with exactly that setting (trainbench.store.setting): other machines in the same store, imported or
contributed export files, published reference runs. One bar chart and one table per setting, the user's bar
highlighted, with readable numbers and the speed-up against theirs. Pure HTML with inline SVG: no plotting
library, so writing it at the end of every sweep costs milliseconds.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainbench import untrusted
from trainbench.figures import APART, TOO_CLOSE, ci95, half_width, judged, noisy, number, quoted, repeats, span
from trainbench.report.comparison import TABLE_METRICS, TableMetric, headline
from trainbench.report.plots import setting_text
from trainbench.report.selection import Column, Entry
from trainbench.store.runs import task_kind
from trainbench.store.setting import describe, differences

MAX_LINES = 8  # settings summarised on the terminal; the page has them all


@dataclass
class Bar:
    column: Column
    value: float
    runs: int
    kind: str  # "yours", "this store", "imported", "contributed", "published"; "history": this machine, earlier
    origin: str = ""  # a contributed file, an import, a publication
    speedup: float | None = None  # against the user's figure, higher = faster; None where within noise
    against: str = "yours"  # which of the user's figures the speed-up is against, when they ran several frameworks
    ci95: float | None = None  # 95% half-width: the run's own (<metric>_ci95), or the wider side of `span`
    span: tuple[float, float] | None = None  # several runs: what they measured (trainbench.figures.span)
    repeats: int | None = None  # the timed repeats (blocks, steady epochs) that made one run's figure
    noisy: bool = False  # a run of it was tagged trainbench.noisy
    within_noise: bool = False  # against the user's figure: the two intervals overlap, no speed-up is quoted
    no_interval: bool = False  # it or the user's figure has no interval (one measurement): judged as figures.judged

    @property
    def figure(self) -> str:
        return quoted(self.value, self.ci95, self.repeats if self.runs == 1 else None, self.noisy, self.runs, self.span)


@dataclass
class Near:
    """A setting close to the user's that another machine ran: shown apart, never in its chart or ratio."""

    bar: Bar
    differs: str  # "batch_size 256 vs 640, precision bf16 vs tf32"
    distance: int  # how many settings differ
    machines: int = 1  # how many machines ran that setting (`bar` is the fastest)


@dataclass
class Standing:
    """One setting the user ran, and every machine that ran it."""

    title: str
    metric: TableMetric
    bars: list[Bar] = field(default_factory=list)
    setting: dict[str, str] = field(default_factory=dict)  # trainbench.store.setting.setting
    history: list[Bar] = field(default_factory=list)  # this machine's earlier runs of the setting, apart
    nearest: list[Near] = field(default_factory=list)  # where no other machine ran it: the closest that did

    @property
    def others(self) -> list[Bar]:
        return [b for b in self.bars if b.kind != "yours"]

    @property
    def yours(self) -> Bar | None:
        return next((b for b in self.bars if b.kind == "yours"), None)


def standings(entries: list[Entry], runs: set[str] | None = None) -> list[Standing]:
    """One Standing per setting that holds a run of the user's (with `runs`: one of those runs, e.g. a
    sweep's cells), those with other machines first. "Yours" is `runs` (a sweep's cells), else this machine's
    latest run of the setting; its other runs are history, shown apart."""
    groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.task, e.model, e.key)].append(e)
    found = []
    for members in groups.values():
        mine = [e for e in members if e.column.mine]
        if not mine or (runs is not None and not any(e.run_id in runs for e in members)):
            continue
        this = {e.run_id for e in mine if e.run_id in runs} if runs else latest(mine)
        yours = next((e for e in mine if e.run_id in this), mine[0])
        metric = shared_metric(yours, [e for e in members if not e.column.mine])
        if metric is None:
            continue
        shown = standing(members, metric, this)
        if shown.yours is not None:  # the user's run has the metric (history alone is no standing)
            found.append(shown)
    alike: dict[str, list[Standing]] = defaultdict(list)
    for s in found:
        alike[s.title].append(s)
    for group in alike.values():  # settings that read the same (SGD and Adam) get what tells them apart
        keys = differences([s.setting for s in group]) if len(group) > 1 else []
        for s in group:
            s.title += f" ({describe(s.setting, keys)})" if keys else ""
    for s in found:
        if not s.others:
            s.nearest = nearest(s, entries)
    return sorted(found, key=lambda s: (not s.others, s.title))


def history_apart(entries: list[Entry], runs: set[str] | None = None) -> list[Entry]:
    """The report's tables and plots as the first screen reads them: per setting, `runs` (a sweep's cells), else
    this machine's latest run per column, is yours; its other runs of the setting go into a column of their own
    ("[earlier here]"), never into the median that is yours."""
    import dataclasses

    groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Entry]] = defaultdict(list)
    for e in entries:
        if e.column.mine:
            groups[(e.task, e.model, e.key)].append(e)
    earlier = {e.run_id for members in groups.values() for e in members} - (
        runs if runs is not None else {run for members in groups.values() for run in latest(members)}
    )
    return [
        dataclasses.replace(e, column=dataclasses.replace(e.column, mine=False, history=True))
        if e.run_id in earlier
        else e
        for e in entries
    ]


def shared_metric(yours: Entry, others: list[Entry]) -> TableMetric | None:
    """The metric a setting is compared in: the user's headline (comparison.headline), unless other machines
    have none of it and share another of the report's metrics with the user's run (published studies give
    total_time_s alone: the report's total-time table sets the two side by side, and so does this)."""
    name = headline(yours)
    if name and task_kind(yours.task).headline is None and not any(e.value(name) is not None for e in others):
        both = [m.name for m in TABLE_METRICS if yours.value(m.name) is not None]
        name = next((n for n in both if any(e.value(n) is not None for e in others)), name)
    return next((m for m in TABLE_METRICS if m.name == name), None)


def latest(mine: list[Entry]) -> set[str]:
    """Without a sweep named, "yours" is this machine's latest run of the setting, per framework column."""
    newest: dict[Column, Entry] = {}
    for e in mine:
        if e.column not in newest or e.start_time > newest[e.column].start_time:
            newest[e.column] = e
    return {e.run_id for e in newest.values()}


def standing(members: list[Entry], metric: TableMetric, this: set[str] | None = None) -> Standing:
    """The bars of one setting. `this`: the user's runs that are "yours" (all of this machine's when None);
    this machine's other runs of the setting become its history."""
    by_column: dict[tuple[Column, bool], list[Entry]] = defaultdict(list)
    for e in members:
        if e.value(metric.name) is not None:
            earlier = e.column.mine and this is not None and e.run_id not in this
            by_column[(e.column, earlier)].append(e)
    bars, history = [], []
    for (column, earlier), runs in sorted(by_column.items(), key=lambda item: item[0][0].order()):
        bar = _bar(column, runs, metric)
        if earlier:
            bar.kind = "history"
            history.append(bar)
        else:
            bars.append(bar)
    mine = [b for b in bars if b.kind == "yours"]
    for bar in bars:
        # against the user's run of the same framework where there is one: "this card against mine" per framework
        yours = next((b for b in mine if b.column.framework == bar.column.framework), mine[0] if mine else None)
        if yours is not None and bar.kind != "yours" and bar.value > 0 and yours.value > 0:
            other_framework = len(mine) > 1 or yours.column.framework != bar.column.framework
            bar.against = f"your {yours.column.framework}" if other_framework else "yours"
            verdict = judged(bar.value, bar.ci95, bar.noisy, yours.value, yours.ci95, yours.noisy)
            bar.no_interval = bar.ci95 is None or yours.ci95 is None
            if verdict != APART:
                bar.within_noise = True  # no speed-up is quoted: the line says why (speedup_text)
                bar.no_interval = verdict == TOO_CLOSE
                continue
            ratio = bar.value / yours.value
            bar.speedup = ratio if metric.higher_is_better else 1 / ratio
    return Standing(title(members[0]), metric, bars, members[0].setting, history)


def _bar(column: Column, runs: list[Entry], metric: TableMetric) -> Bar:
    values = [v for e in runs if (v := e.value(metric.name)) is not None]
    origins = sorted({e.origin for e in runs if e.origin})
    if column.mine:
        kind = "yours"
    elif column.reference:
        kind, origins = "published", [f"{column.source}{': ' + column.series if column.series else ''}"]
    else:  # a column's runs may come from several places: the furthest away names it
        kinds = {e.origin_kind for e in runs}
        kind = next((k for k in ("contributed", "imported") if k in kinds), "this store")
    one = runs[0] if len(runs) == 1 else None
    value = statistics.median(values)
    measured = None
    if one:
        interval = ci95(one.metrics, metric.name)
    else:
        recorded = [ci95(e.metrics, metric.name) for e in runs if e.value(metric.name) is not None]
        measured = span(values, recorded, any(noisy(e.tags) for e in runs))
        interval = half_width(value, *measured)
    return Bar(
        column,
        value,
        len(values),
        kind,
        "; ".join(origins),
        ci95=interval,
        repeats=repeats(one.params, metric.name) if one else None,
        noisy=any(noisy(e.tags) for e in runs),
        span=measured,
    )


NEAREST = 3  # close settings listed per setting no other machine ran


def nearest(s: Standing, entries: list[Entry]) -> list[Near]:
    """Other machines' runs of the same model and task in another setting, closest first (fewest settings
    that differ), each with what differs."""
    mine = s.yours
    if mine is None:
        return []
    by_setting: dict[tuple[tuple[str, str], ...], list[Entry]] = defaultdict(list)
    for e in entries:
        if _close(e, s) and not e.column.mine and e.value(s.metric.name) is not None:
            by_setting[e.key].append(e)
    found = []
    for members in by_setting.values():
        keys = differences([s.setting, members[0].setting])
        best = max(
            (
                _bar(column, [e for e in members if e.column == column], s.metric)
                for column in {e.column for e in members}
            ),
            key=lambda b: b.value if s.metric.higher_is_better else -b.value,
        )
        differs = ", ".join(
            f"{key.removesuffix('.name')} {s.setting.get(key, '-')} vs {members[0].setting.get(key, '-')}"
            for key in keys
        )
        found.append(Near(best, differs, len(keys), len({e.column.hw_label for e in members})))
    return sorted(found, key=lambda n: (n.distance, n.differs))[:NEAREST]


def _close(e: Entry, s: Standing) -> bool:
    """Another setting of the same model and task."""
    same = all(e.setting.get(key) == s.setting.get(key) for key in ("task.name", "model.name"))
    return same and e.setting != s.setting


def title(e: Entry) -> str:
    """The setting in words: "mlp (train): hidden [3000, 1000], synthetic 32 px, 8192 samples x 3 epochs, bs64,
    fp32, timed: epoch" (as the report's plots title their panels)."""
    return f"{e.model} ({e.task}): {setting_text(e, ('model', 'applied'))}"


def speedup_text(bar: Bar) -> str:
    if bar.kind == "yours":
        return "yours"
    if bar.within_noise and bar.no_interval:
        return f"too close to call against {bar.against} (no interval recorded)"
    if bar.within_noise:
        return f"within noise of {bar.against}"
    if bar.speedup is None:
        return ""
    faster = "faster" if bar.speedup >= 1 else "slower"
    alone = "; no interval recorded" if bar.no_interval else ""
    return f"{bar.speedup:.2f}x ({faster} than {bar.against}{alone})"


# ------------------------------------------------------------------------------------------------ terminal


def terminal_lines(found: list[Standing], limit: int | None = MAX_LINES) -> list[str]:
    """A line per setting: the user's figure (with its interval, repeats and noise), how many other machines
    have the setting and the fastest of them; under it, this machine's earlier runs (history) and, where no
    other machine ran the setting, the nearest settings that one did."""
    lines = []
    for s in found[:limit]:
        yours = s.yours
        assert yours is not None
        mine = [b for b in s.bars if b.kind == "yours"]
        figures = ", ".join(f"{b.column.software}: {b.figure}" for b in mine) if len(mine) > 1 else yours.figure
        head = f"  {s.title}: {figures} {s.metric.unit} here"
        if not s.others:
            lines.append(head + "; no other machine has this setting yet")
        else:
            best = max(s.others, key=lambda b: b.value if s.metric.higher_is_better else -b.value)
            lines.append(
                f"{head}; {len(s.others)} other machine(s), fastest {best.column.hw_label} ({origin(best)}) "
                f"{best.figure}, {speedup_text(best)}"
            )
        lines += [f"    {line}" for line in history_lines(s) + nearest_lines(s)]
    if limit is not None and len(found) > limit:
        lines.append(f"  ... and {len(found) - limit} more setting(s) on the page")
    return lines


def history_lines(s: Standing) -> list[str]:
    return [
        f"earlier here (history, not in the figure above): {b.column.software}: median {number(b.value)} "
        f"{s.metric.unit} of {b.runs} run(s)" + (", NOISY" if b.noisy else "")
        for b in s.history
    ]


def nearest_lines(s: Standing) -> list[str]:
    if not s.nearest:
        return []
    return ["close, not equal (other settings, no ratio):"] + [
        f"  {n.bar.column.hw_label} ({origin(n.bar)}) {n.bar.figure} {s.metric.unit}"
        + (f" (fastest of {n.machines} machines)" if n.machines > 1 else "")
        + f": {n.differs}"
        for n in s.nearest
    ]


def origin(bar: Bar) -> str:
    """Where another machine's figure comes from and what ran it: the framework is not part of a setting, so a
    JAX run elsewhere can stand against your PyTorch one, and the line says so."""
    return f"{bar.kind}, {bar.column.software}"


# -------------------------------------------------------------------------------------------------- HTML

CSS = """
.standing { margin: 1.2em 0 2em; }
.standing h3 { font-size: 1em; margin: 0.2em 0; }
.standing table { border-collapse: collapse; font-size: 0.85em; margin-top: 0.4em; }
.standing th, .standing td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
.standing td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.standing tr.yours td { background: #e8f1ff; font-weight: bold; }
.standing tr.published td { background: #fff8e6; }
.kind { font-size: 0.8em; padding: 0.05em 0.4em; border-radius: 0.3em; background: #eee; white-space: nowrap; }
.kind.yours { background: #1f6feb; color: #fff; }
.kind.published { background: #f0b400; color: #222; }
.kind.contributed { background: #8250df; color: #fff; }
.kind.imported { background: #1a7f37; color: #fff; }
p.hint { color: #444; font-size: 0.9em; }
"""
COLOURS = {
    "yours": "#1f6feb",
    "this store": "#57606a",
    "imported": "#1a7f37",
    "contributed": "#8250df",
    "published": "#d4a000",
}
BAR_HEIGHT, LABEL_WIDTH, CHART_WIDTH = 22, 430, 360


def html_section(found: list[Standing], heading: str = "Where this machine stands", subtitle: str = "") -> str:
    e = untrusted.html_text
    parts = [f'<section id="standing"><h2>{e(heading)}</h2>']
    if subtitle:
        parts.append(f'<p class="hint">{_code(e(subtitle))}</p>')
    if not found:
        parts.append(f'<p class="hint">{_code(e(NOTHING_OF_YOURS))}</p></section>')
        return "\n".join(parts)
    compared = sum(1 for s in found if s.others)
    parts.append(
        f'<p class="hint">{len(found)} setting(s) you ran; {compared} also measured on another machine. Only runs '
        "of exactly the same setting (everything but the machine and the framework) share a chart. "
        f"{_code(e(HOW_TO_ADD))}</p>"
    )
    for i, s in enumerate(found):
        parts.append(f'<div class="standing" id="setting-{i}"><h3>{e(s.title)}</h3>')
        parts.append(svg_bars(s))
        parts.append(table(s))
        parts.append(apart_html(s))
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


def svg_bars(s: Standing) -> str:
    e = untrusted.html_text
    top = max(b.value for b in s.bars) or 1.0
    height = BAR_HEIGHT * len(s.bars) + 24
    width = LABEL_WIDTH + CHART_WIDTH + 120
    better = "higher" if s.metric.higher_is_better else "lower"
    rows = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{e(s.metric.name)} per machine" xmlns="http://www.w3.org/2000/svg" font-size="12" '
        'font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif">',
    ]
    for i, bar in enumerate(s.bars):
        y = i * BAR_HEIGHT
        length = max(1.0, CHART_WIDTH * bar.value / top)
        weight = ' font-weight="bold"' if bar.kind == "yours" else ""
        rows.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 15}" text-anchor="end"{weight}>'
            f"{e(_short(bar.column.hw_label + ': ' + bar.column.software))}</text>"
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{length:.1f}" height="{BAR_HEIGHT - 6}" '
            f'fill="{COLOURS[bar.kind]}"><title>{e(bar.column.label)}: {number(bar.value)} {e(s.metric.unit)}'
            f"</title></rect>"
            f'<text x="{LABEL_WIDTH + length + 6:.1f}" y="{y + 15}"{weight}>{number(bar.value)}</text>'
        )
    rows.append(
        f'<text x="{LABEL_WIDTH}" y="{height - 6}" fill="#57606a">{e(s.metric.name)} ({e(s.metric.unit)}, '
        f"{better} is better)</text></svg>"
    )
    return "".join(rows)


def table(s: Standing) -> str:
    e = untrusted.html_text
    head = (
        "<tr><th>machine</th><th>framework</th><th>backend</th>"
        f"<th>{e(s.metric.name)} ({e(s.metric.unit)})</th><th>runs</th><th>against yours</th><th>from</th></tr>"
    )
    rows = []
    for bar in s.bars:
        c = bar.column
        badge = f'<span class="kind {bar.kind.split()[0]}">{e(bar.kind)}</span>'
        origin = f" {e(bar.origin)}" if bar.origin else ""
        rows.append(
            f'<tr class="{bar.kind.split()[0]}"><td>{e(c.hw_label)}</td><td>{e(c.software)}</td><td>{e(c.backend)}</td>'
            f'<td class="num">{e(bar.figure)}</td><td class="num">{bar.runs}</td>'
            f'<td class="num">{e(speedup_text(bar))}</td><td>{badge}{origin}</td></tr>'
        )
    return f"<table>{head}{''.join(rows)}</table>"


def apart_html(s: Standing) -> str:
    """This machine's earlier runs and the nearest settings: under the chart, never in it or its ratios."""
    e = untrusted.html_text
    parts = [f'<p class="hint history">{e(line)}</p>' for line in history_lines(s)]
    if s.nearest:
        items = "".join(
            f"<li>{e(n.bar.column.hw_label)} ({e(origin(n.bar))}): {e(n.bar.figure)} {e(s.metric.unit)}"
            + (f" (fastest of {n.machines} machines)" if n.machines > 1 else "")
            + f"; differs: {e(n.differs)}</li>"
            for n in s.nearest
        )
        parts.append(
            '<div class="nearest"><p class="hint">Close, not equal: no other machine ran this setting; the '
            f"nearest settings that one did (not compared, no ratio):</p><ul>{items}</ul></div>"
        )
    return "".join(parts)


def _code(text: str) -> str:
    """`command` in an (escaped) sentence -> <code>command</code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def _short(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


NOTHING_OF_YOURS = (
    "None of the selected runs is this machine's: run a sweep here, or name the machine's runs with --sweep."
)
HOW_TO_ADD = (
    "More machines: `python src/references.py` adds the published figures, `trainbench import FILE` a colleague's "
    "export, and results/contributed/ holds files from machines we do not have."
)


def page(found: list[Standing], heading: str, subtitle: str) -> str:
    """The standalone first screen a sweep writes (its path is printed with the summary)."""
    e = untrusted.html_text
    return "\n".join(
        [
            "<!doctype html>",
            f'<html lang="en"><head><meta charset="utf-8"><title>{e(heading)}</title>',
            "<style>body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto;"
            " max-width: 1100px; padding: 0 1em; color: #222; } h2 { font-size: 1.3em; }" + CSS + "</style>",
            "</head><body>",
            html_section(found, heading, subtitle),
            "</body></html>",
        ]
    )


# ------------------------------------------------------------------------------------------ after a sweep

PAGES = Path("outputs") / "compare"  # relative to where the sweep runs, as Hydra's multirun/ and the report's


def after_sweep(client: Any, uri: str, experiment_id: str, mine: set[str], name: str) -> tuple[list[Standing], Path]:
    """The first screen of a finished sweep: its cells (`mine`: their run ids) against every run of the same
    settings in the store and in results/contributed/, written to outputs/compare/<name>.html."""
    from trainbench.store.tracking import private

    experiment = client.get_experiment(experiment_id).name
    found = compared(client, uri, experiment, mine)
    PAGES.mkdir(parents=True, exist_ok=True)
    path = PAGES / f"{name}.html"
    subtitle = (
        f"Sweep {name}, {time.strftime('%Y-%m-%d %H:%M')}: its cells against every run of the same setting in "
        f"{private(uri)} (experiment {experiment}) and in results/contributed/. `python src/report.py` has the "
        "full tables and plots."
    )
    path.write_text(page(found, "Where this machine stands", subtitle), encoding="utf-8")
    return found, path


def compared(client: Any, uri: str, experiment: str, mine: set[str]) -> list[Standing]:
    """What the first screen shows: the user's runs (`mine`: run ids) against every run of the same settings in
    the store's experiment, its shared experiment and results/contributed/ (trainbench.api.compare reads the same)."""
    from trainbench.report.selection import Selection, select
    from trainbench.store import sources

    entries, _ = select(sources.compared_with(client, uri), Selection(experiment), mine_runs=mine, histories=False)
    return standings(entries, mine)
