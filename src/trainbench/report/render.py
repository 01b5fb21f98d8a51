"""The report's files: report.md, report.html (self-contained: inline CSS, plots embedded) and report.json."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from trainbench import untrusted
from trainbench.report import standing
from trainbench.report.comparison import Cell, Row, Table
from trainbench.report.plots import flags
from trainbench.store.runs import task_kind


@dataclass
class Document:
    """Everything the report says, before it is written in one format or another."""

    summary: str
    tables: list[Table]
    notes: list[str]
    sources: dict[str, list[str]]  # reference.source -> its publications
    images: dict[str, bytes]  # file name -> PNG
    standings: list[standing.Standing] | None = None  # where this machine stands; None: no machine is "yours"


number = standing.number


def cell_text(cell: Cell | None) -> str:
    if cell is None:
        return ""
    text = number(cell.value)
    if len(cell.runs) > 1:
        text += f" (median of {len(cell.runs)} runs)"
    if cell.speedup is not None:
        text += f" ({cell.speedup:.2f}×, no interval)" if cell.no_interval else f" ({cell.speedup:.2f}×)"
    if cell.within_noise:
        text += " (too close to call: no interval)" if cell.no_interval else " (within noise)"
    return text + (" NOISY" if cell.noisy else "")


def caption(table: Table, quoted: Any = str) -> str:
    """The table's caption, in Markdown; `quoted` makes the values that come from runs plain text."""
    kind = f" ({', '.join(table.sample_kinds)})" if table.sample_kinds else ""
    better = "higher" if table.metric.higher_is_better else "lower"
    text = (
        f"`{table.metric.name}`: {table.metric.title}, {table.metric.unit}{kind}; {better} is better. "
        "Each row is one setting: only runs that measured the same quantity share it."
    )
    if table.baseline:
        ratio = "value / baseline" if table.metric.higher_is_better else "baseline / value"
        text += f" Speed-up (×) against **{quoted(table.baseline.label)}** = {ratio}, in rows where it has a value."
    else:
        text += f" No speed-ups: {quoted(table.baseline_reason)}."
    return text


def head(table: Table) -> list[str]:
    columns = ["model"] if any(row.variant for row in table.rows) else []
    tail = ["other settings"] if any(row.distinct for row in table.rows) else []
    if any(row.columns_differ for row in table.rows):
        tail.append("columns differ in")
    kind = task_kind(table.task)
    if not kind.uses_model:
        return [*columns, *kind.setting_tags.values(), "precision", "settings", *tail]
    columns += ["batch size", "precision", "data"]
    if "trainbench.epochs" in kind.setting_tags:
        columns.append("samples × epochs")
    return [*columns, "timed", "settings", *tail]


def row_head(table: Table, row: Row, columns_differ: bool = True) -> list[str]:
    s = row.settings
    values = [row.variant or "-"] if any(r.variant for r in table.rows) else []
    settings = ", ".join(flags(s)) or "-"
    tail = [row.distinct or "-"] if any(r.distinct for r in table.rows) else []
    if columns_differ and any(r.columns_differ for r in table.rows):
        tail.append(row.columns_differ or "-")
    kind = task_kind(table.task)
    if not kind.uses_model:
        return [*values, *(s[tag] for tag in kind.setting_tags), s["trainbench.precision"], settings, *tail]
    size = (
        f", {s['trainbench.image_size']} px"
        if s["trainbench.image_size"]
        else (f", {s['trainbench.seq_len']} tokens" if s["trainbench.seq_len"] else "")
    )
    values += [s["trainbench.batch_size"] or "-", s["trainbench.precision"], s["trainbench.data"] + size]
    if "trainbench.epochs" in kind.setting_tags:
        samples = s["trainbench.samples_per_epoch"]
        values.append(
            f"{int(samples):,} × {s['trainbench.epochs']}"
            if samples.isdigit()
            else f"{samples} × {s['trainbench.epochs']}"
        )
    return [*values, s["trainbench.timed_region"], settings, *tail]


def row_name(table: Table, row: Row) -> str:
    return ", ".join(v for v in row_head(table, row, columns_differ=False) if v not in ("-", ""))


# ---------------------------------------------------------------------------------------------- markdown


def markdown(doc: Document) -> str:
    md = untrusted.markdown_text  # run names, tags and notes come from other machines' files: text, never markup

    lines = ["# trainbench report", "", md(doc.summary), ""]
    if doc.standings is not None:
        lines += ["## Where this machine stands", ""]
        found = [md(line.strip()) for line in standing.terminal_lines(doc.standings, limit=None)]  # report.md: all
        lines += [line + "  " for line in found] or [standing.NOTHING_OF_YOURS]
        lines.append("")
    for table in doc.tables:
        lines += [f"## {md(table.title)}", "", caption(table, md), ""]
        labels = [c.label + (" (baseline)" if c == table.baseline else "") for c in table.columns]
        heads = head(table)
        lines.append("| " + " | ".join([*map(md, heads), *map(md, labels)]) + " |")
        lines.append("|" + "---|" * len(heads) + "---:|" * len(labels))
        for row in table.rows:
            cells = [cell_text(row.cells.get(c.label)) for c in table.columns]
            lines.append("| " + " | ".join([*map(md, row_head(table, row)), *cells]) + " |")
        lines.append("")
        measure = [(row_name(table, row), command) for row in table.rows for command in row.commands]
        if measure:
            lines += ["Published rows with no local run yet; to measure one here:", ""]
            lines += [
                f"- {md(name)}: `{untrusted.for_terminal(command).replace('`', chr(39))}`" for name, command in measure
            ]
            lines.append("")
    for name in doc.images:
        lines += [f"![{name}]({name})", ""]
    if doc.sources:
        lines += ["## Sources of the reference runs", ""]
        lines += [f"- **{md(source)}**: {md('; '.join(texts))}" for source, texts in sorted(doc.sources.items())]
        lines += ["", "Each reference run's tag `reference.source_line` says where in its source each figure is.", ""]
    if doc.notes:
        lines += ["## Notes", ""] + [f"- {md(n)}" for n in doc.notes] + [""]
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- html

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f3f3f3; vertical-align: bottom; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
th.ref, td.ref { background: #fff8e6; }
th.base, td.base { font-weight: bold; }
p.caption { font-size: 0.9em; color: #444; }
code { font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #eee; margin: 1em 0; }
li { font-size: 0.9em; margin: 0.2em 0; }
"""


def html_page(doc: Document) -> str:
    e = untrusted.html_text
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>trainbench report</title>',
        f"<style>{CSS}{standing.CSS}</style></head><body>",
        "<h1>trainbench report</h1>",
        f"<p>{e(doc.summary)}</p>",
    ]
    if doc.standings is not None:
        parts.append(standing.html_section(doc.standings))
    for table in doc.tables:
        parts += _html_table(table)
    for name, png in doc.images.items():
        parts.append(f'<img alt="{e(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    if doc.sources:
        parts.append("<h2>Sources of the reference runs</h2><ul>")
        parts += [f"<li><b>{e(s)}</b>: {e('; '.join(t))}</li>" for s, t in sorted(doc.sources.items())]
        parts.append(
            "</ul><p>Each reference run's tag <code>reference.source_line</code> says where in its source "
            "each figure is.</p>"
        )
    if doc.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in doc.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(table: Table) -> list[str]:
    e = untrusted.html_text
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", e(caption(table))))
    parts = [f"<h2>{e(table.title)}</h2>", f'<p class="caption">{text}</p><table><tr>']
    parts += [f"<th>{e(h)}</th>" for h in head(table)]
    for c in table.columns:
        classes = " ".join(["ref"] * c.reference + ["base"] * (c == table.baseline))
        parts.append(f'<th class="{classes}">{e(c.label)}{" (baseline)" if c == table.baseline else ""}</th>')
    parts.append("</tr>")
    for row in table.rows:
        parts.append("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row_head(table, row)))
        for c in table.columns:
            classes = " ".join(["num"] + ["ref"] * c.reference + ["base"] * (c == table.baseline))
            parts.append(f'<td class="{classes}">{e(cell_text(row.cells.get(c.label)))}</td>')
        parts.append("</tr>")
    parts.append("</table>")
    measure = [(row_name(table, row), command) for row in table.rows for command in row.commands]
    if measure:
        parts.append("<p>Published rows with no local run yet; to measure one here:</p><ul>")
        parts += [f"<li>{e(name)}: <code>{e(command)}</code></li>" for name, command in measure]
        parts.append("</ul>")
    return parts


# -------------------------------------------------------------------------------------------------- json


def tables_json(tables: list[Table]) -> list[dict[str, Any]]:
    return [
        {
            "task": t.task,
            "model": t.model,
            "metric": t.metric.name,
            "unit": t.metric.unit,
            "higher_is_better": t.metric.higher_is_better,
            "baseline": t.baseline.label if t.baseline else None,
            "columns": [
                {
                    "label": c.label,
                    "hw_label": c.hw_label,
                    "backend": c.backend,
                    "framework": c.framework,
                    "release": c.release,
                    "mine": c.mine,
                    "history": c.history,
                    "contributed": c.contributed,
                    "reference": c.reference,
                    "source": c.source or None,
                    "series": c.series or None,
                }
                for c in t.columns
            ],
            "rows": [
                {
                    "settings": {k.removeprefix("trainbench."): v for k, v in r.settings.items()},
                    "setting": r.setting,
                    "model_variant": r.variant or None,
                    "columns_differ": r.columns_differ or None,
                    "cells": {
                        label: {
                            "value": c.value,
                            "speedup": c.speedup,
                            "within_noise": c.within_noise,
                            "no_interval": c.no_interval,
                            "runs": c.runs,
                            "source_lines": c.source_lines,
                        }
                        for label, c in r.cells.items()
                    },
                    "commands": r.commands,
                }
                for r in t.rows
            ],
        }
        for t in tables
    ]


def standings_json(found: list[standing.Standing]) -> list[dict[str, Any]]:
    return [
        {
            "setting": s.title,
            "metric": s.metric.name,
            "unit": s.metric.unit,
            "bars": [
                {
                    "label": b.column.label,
                    "hw_label": b.column.hw_label,
                    "framework": b.column.software,
                    "value": b.value,
                    "runs": b.runs,
                    "kind": b.kind,
                    "origin": b.origin or None,
                    "speedup_vs_yours": b.speedup,
                    "figure": b.figure,
                    "ci95": b.ci95,
                    "repeats": b.repeats,
                    "noisy": b.noisy,
                    "within_noise": b.within_noise,
                    "no_interval": b.no_interval,
                }
                for b in s.bars
            ],
            "history": [
                {"framework": b.column.software, "value": b.value, "runs": b.runs, "noisy": b.noisy} for b in s.history
            ],
            "nearest": [
                {"hw_label": n.bar.column.hw_label, "kind": n.bar.kind, "figure": n.bar.figure, "differs": n.differs}
                for n in s.nearest
            ],
        }
        for s in found
    ]


def report_json(doc: Document, selection: str, tracking_uri: str) -> str:
    return (
        json.dumps(
            {
                "selection": selection,
                "tracking_uri": tracking_uri,
                "standing": None if doc.standings is None else standings_json(doc.standings),
                "tables": tables_json(doc.tables),
                "notes": doc.notes,
            },
            indent=1,
        )
        + "\n"
    )
