"""How far a sweep has got, for the line each cell's job prints before its cell starts: the time since the sweep
began, the cells done, and what is left, estimated from the durations of the cells that ended.

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
from trainbench.progress import duration


def status_line(client: Any, experiment_id: str, sweep_id: str, started_at: float, total: int) -> str:
    """`sweep: 0:42 elapsed, 1 of 3 cells done; about 1:24 left (42 s a cell)`, from the sweep's runs in the
    store; without the estimate where the store cannot say."""
    elapsed_s = time.time() - started_at
    try:
        runs = client.search_runs([experiment_id], f"tags.`trainbench.sweep_id` = '{sweep_id}'", max_results=10_000)
    except (Exception, tracking.StoreFailed):  # a convenience: a store that does not answer costs the estimate only
        return f"sweep: {duration(elapsed_s)} elapsed"
    durations, done, running = [], 0, 0
    for run in runs:
        if run.data.tags.get("trainbench.kind") != "cell":
            continue
        if run.info.end_time is None:
            running += 1
            continue
        done += 1
        if run.data.tags.get("trainbench.outcome") != "skipped":
            durations.append((run.info.end_time - run.info.start_time) / 1000)
    return estimate(elapsed_s, total, done, durations, running)


def estimate(elapsed_s: float, total: int, done: int, durations_s: list[float], running: int) -> str:
    """The line for a cell about to start: `running` other cells are under way, `done` have ended (skipped ones
    included), `durations_s` are the ended cells' run times (skipped ones excluded)."""
    head = f"sweep: {duration(elapsed_s)} elapsed, {done} of {total} cells done"
    if not durations_s:
        return f"{head}; estimate after the first cell"
    per_cell_s = statistics.fmean(durations_s)
    at_once = running + 1
    left_s = per_cell_s * max(0, total - done) / at_once
    side_by_side = f", {at_once} at a time" if at_once > 1 else ""
    return f"{head}; about {duration(left_s)} left ({duration(per_cell_s)} a cell{side_by_side})"
