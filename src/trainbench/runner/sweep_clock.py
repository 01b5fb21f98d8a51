"""How far a sweep has got, for the line each cell's job prints before its cell starts: the time since the sweep
began, the cells done, and what is left, estimated for each cell left from the cells that ended and have its
kind (the same task, model and device): a sweep of a slow CPU cell and a GPU cell recorded `unavailable` at once
must not promise the slow cell's time twice. A cell whose kind none has ended yet is named as not estimated.

Read from the store, not kept in memory: under a parallel launcher (joblib, submitit, Ray) or on other machines
each job runs in a process of its own, and the store is what they share. Runs still open are the cells running
beside this one: the estimate divides the work left among them. During a tracking server's outage the query waits
as the cell's own first write would right after it (tracking.OutageWatch is shared), then gives the line without
the estimate.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from trainbench import tracking
from trainbench.config import CellConfig
from trainbench.progress import duration
from trainbench.tasks.base import task_of

ABSENT = "-"  # a cell on a device this machine cannot have: recorded `unavailable` without starting, in no time


def kind(cell: CellConfig) -> str:
    """What a cell shares with the cells its time says something about: `train/resnet50/cpu`."""
    task = task_of(cell)
    what = cell.model.name if task.uses_model else getattr(cell.task, "name", "")
    return f"{task.name}/{what}/{cell.device.name}"


def status_line(
    client: Any, experiment_id: str, sweep_id: str, started_at: float, total: int, kinds: list[str] | None = None
) -> str:
    """`sweep: 0:42 elapsed, 1 of 3 cells done; about 1:24 left`, from the sweep's runs in the store; without
    the estimate where the store cannot say. `kinds`: each cell's kind (CellOrder.kinds), in order."""
    elapsed_s = time.time() - started_at
    try:
        runs = client.search_runs([experiment_id], f"tags.`trainbench.sweep_id` = '{sweep_id}'", max_results=10_000)
    except (Exception, tracking.StoreFailed):  # a convenience: a store that does not answer costs the estimate only
        return f"sweep: {duration(elapsed_s)} elapsed"
    kinds = kinds if kinds and len(kinds) == total else [""] * total  # unknown: every cell alike
    ended: dict[int, float | None] = {}  # cell index (from 0) -> its run time; None: skipped by sweep.resume
    running = 0
    for run in runs:
        if run.data.tags.get("trainbench.kind") != "cell":
            continue
        if run.info.end_time is None:
            running += 1
            continue
        index = int(run.data.tags.get("trainbench.cell_index", "0")) - 1
        skipped = run.data.tags.get("trainbench.outcome") == "skipped"
        ended[index] = None if skipped else (run.info.end_time - run.info.start_time) / 1000
    took = [(kinds[i] if 0 <= i < total else "", s) for i, s in ended.items() if s is not None]
    left = [kinds[i] for i in range(total) if i not in ended]
    return estimate(elapsed_s, total, len(ended), took, left, running)


def estimate(
    elapsed_s: float, total: int, done: int, took: list[tuple[str, float]], left: list[str], running: int
) -> str:
    """The line for a cell about to start: `done` cells have ended (skipped ones included), `took` are the
    (kind, run time) of those that ran, `left` the kinds of the cells not ended (this one and the `running`
    others included)."""
    head = f"sweep: {duration(elapsed_s)} elapsed, {done} of {total} cells done"
    by_kind: dict[str, list[float]] = {}
    for what, seconds in took:
        by_kind.setdefault(what, []).append(seconds)
    to_run = [what for what in left if what != ABSENT]
    unknown = [what for what in to_run if what not in by_kind]
    if not by_kind and to_run:
        return f"{head}; estimate after the first cell"
    if to_run and len(unknown) == len(to_run):
        return f"{head}; estimate after the first cell {_like(unknown)}"
    at_once = running + 1
    left_s = sum(statistics.fmean(by_kind[what]) for what in to_run if what in by_kind) / at_once
    line = f"{head}; about {duration(left_s)} left" + (f" ({at_once} at a time)" if at_once > 1 else "")
    if unknown:
        cells = f"{len(unknown)} cell{'s' if len(unknown) > 1 else ''}"
        line += f", and {cells} estimated after the first {_like(unknown)}"
    return line


def _like(kinds: list[str]) -> str:
    """`like train/resnet50/gpu`, or `of each of 2 other kinds` (task/model/device)."""
    distinct = list(dict.fromkeys(kinds))
    if len(distinct) == 1 and distinct[0]:
        return f"like {distinct[0]} (task/model/device)"
    return f"of each of their {len(distinct)} kinds (task/model/device)"
