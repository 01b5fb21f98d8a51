"""Names that tell a sweep's cells apart.

A cell's run name is its task's (`pytorch-mlp-cpu-bs32`); when several cells of a sweep would share one,
each gets the values that differ between them (`pytorch-mlp-cpu-bs32 precision=tf32`), so the summary and
the MLflow UI never show two identical rows for different cells.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, defaultdict
from typing import Any


def suffixes(base_names: list[str], overrides: list[list[str]]) -> list[str]:
    """For each cell, what to append to its base name so that no two cells share a name."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for index, name in enumerate(base_names):
        by_name[name].append(index)
    result = [""] * len(base_names)
    for members in by_name.values():
        if len(members) < 2:
            continue
        values = [_as_dict(overrides[i]) for i in members]
        keys = sorted({k for v in values for k in v})
        differing = [k for k in keys if len({v.get(k) for v in values}) > 1]
        for position, index in enumerate(members):
            parts = [f"{_short(k)}={values[position].get(k, '-')}" for k in differing]
            result[index] = (" " + " ".join(parts)) if parts else ""
        counts = Counter(result[i] for i in members)
        seen: dict[str, int] = defaultdict(int)
        for index in members:  # still identical (the same cell twice): number them
            if counts[result[index]] > 1:
                seen[result[index]] += 1
                result[index] += f" #{seen[result[index]]}"
    return result


def run_name(cell: Any, device: str, suffix: str = "") -> str:
    """A cell's run name on `device` (its task's `pytorch-mlp-cpu-bs32`), with the suffix that sets it apart from
    its siblings: the one place a run's name is made (trainbench.runner.order.CellOrder.name_on)."""
    from trainbench.tasks.base import task_of

    task = task_of(cell)
    return task.run_name(task.prepared(cell), device) + suffix


def shown_device(device: str) -> str:
    """The device in a cell's name before its process binds one (the name the first line, the dry run and the
    run's first name show): the device asked for, except `auto` on a machine with no GPU at all, which every
    framework binds to the CPU, so the first line and the summary name the cell alike. Where there is a GPU,
    which backend binds (cuda, mps, metal), or whether the installed framework sees the GPU at all, is known
    only once the framework is imported in the cell's process; the run is renamed then."""
    if device != "auto":
        return device
    from trainbench import hardware

    return "cpu" if not hardware.labels_for("gpu", hardware.host_tags()) else device


def _as_dict(overrides: list[str]) -> dict[str, str]:
    pairs = (o.split("=", 1) for o in overrides if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def _short(key: str) -> str:
    """`model.depth` -> `depth`, `precision` -> `precision`: the last part is what people recognise."""
    return key.rsplit(".", 1)[-1]


def sweep_name() -> str:
    """`sweep-20261122-101502-3f9a`: a random tail, so two sweeps started in one second differ."""
    return f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
