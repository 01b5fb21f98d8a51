"""The Hydra task function: one job = one cell, stateless.

Everything the cell needs travels in its config (`launch.*`: the store, the experiment, the sweep's
parent run, the cell's place and name), so any Hydra launcher can run it in this process, in a joblib
worker, on a Slurm node or a Ray worker. It returns the cell's result as a plain dict (picklable).
"""

from __future__ import annotations

import os
import time
from typing import Any

from omegaconf import DictConfig

from trainbench import progress
from trainbench.config import PlainError, validate
from trainbench.runner import launchers, nodes, sweep_clock
from trainbench.runner.cell import Store, run_cell
from trainbench.store import tracking
from trainbench.tasks.base import task_of


def run_job(composed: DictConfig) -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig

    from trainbench.runner import names

    tracking.quiet_logs()  # a launcher's worker prints nothing unredacted either
    launchers.die_with_sweep()  # a worker of a launcher on this machine must not outlive the sweep
    cell = validate(composed)  # judged again where it runs: it may be another machine
    launch = cell.launch
    if launch.tracking_uri is None or launch.experiment_id is None:
        raise PlainError(
            "launch",
            "a cell job needs its sweep's store: run trainbench through its own sweeper "
            "(hydra/sweeper=trainbench, the default in conf/config.yaml)",
        )
    overrides = [o for o in HydraConfig.get().overrides.task if not o.lstrip("+").startswith("launch.")]
    store = Store(
        tracking.open_store(launch.tracking_uri, mid_sweep=True, outage_s=cell.tracking.outage_s),
        launch.tracking_uri,
        launch.experiment_id,
        launch.parent_run_id,
        launch.sweep_id,
    )
    node = nodes.place(cell)
    if node > 0:  # a later task of a job: a multi-node cell's node joins node 0's ranks (node 0 records the cell)
        return nodes.join(cell, node) if cell.device.nodes > 1 else nodes.idle(cell, node)
    task = task_of(cell)
    name = task.run_name(task.prepared(cell), names.shown_device(cell.device.name)) + launch.name_suffix
    print(
        f"[cell {launch.index}/{launch.total}] {name}: {tracking.private(' '.join(overrides)) or '(defaults)'}",
        flush=True,
    )
    _label_lines(name)
    if launch.total > 1 and launch.started_at is not None and launch.sweep_id is not None:
        progress.line(
            "  "
            + sweep_clock.status_line(
                store.client,
                launch.experiment_id,
                launch.sweep_id,
                launch.started_at,
                launch.total,
                launch.kinds.split(";") if launch.kinds else None,
            )
        )
    started = time.monotonic()
    try:
        result = run_cell(cell, store, overrides)
    except tracking.StoreFailed as fault:
        # The sweep's summary names the cell the fault stopped (the exception travels from a launcher's worker).
        fault.cell_index = launch.index  # type: ignore[attr-defined]
        raise
    if launch.total > 1:
        took = progress.duration(time.monotonic() - started)
        print(f"[cell {launch.index}/{launch.total}] {result.name}: {result.outcome} in {took}", flush=True)
    return result.to_dict()


def _label_lines(name: str) -> None:
    """Outside the sweep's own process (a parallel launcher's worker, another machine), cells may share an output:
    every line of this cell's (and of the processes it starts) then carries its name. A worker runs several cells
    one after the other: each sets its own."""
    if launchers.in_the_sweeps_process():
        os.environ.pop(progress.LABEL_ENV, None)
    else:
        os.environ[progress.LABEL_ENV] = name
