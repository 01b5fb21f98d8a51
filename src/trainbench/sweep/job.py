"""The Hydra task function: one job = one cell, stateless.

Everything the cell needs travels in its order (trainbench.cell.order: the judged cell, the store, the
experiment, the sweep's run, the cell's place and name), which the sweep's owner made once and a Hydra launcher
carries to the job, so any launcher can run it in this process, in a joblib worker, on a Slurm node or a Ray worker.
It returns the cell's result as a plain dict (picklable).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from trainbench import progress
from trainbench.cell import order
from trainbench.config import PlainError
from trainbench.store import tracking
from trainbench.sweep import job_states, launchers, nodes, sweep_clock
from trainbench.sweep.cell_run import Store, run_cell


def run_job(composed: DictConfig) -> dict[str, Any]:
    """Run the cell of the order this job's launcher carried. `composed` (Hydra's config of the job) is not read:
    the owner composed and judged the cell already, and the order holds it as judged."""
    tracking.quiet_logs()  # a launcher's worker prints nothing unredacted either
    launchers.die_with_sweep()  # a worker of a launcher on this machine must not outlive the sweep
    # Judged again where it is not the sweep's own process: it may be another machine.
    received = order.received(judge=not launchers.in_the_sweeps_process())
    if received is None or received.store is None:
        raise PlainError(
            "launch",
            "a cell job needs its sweep's order: run trainbench through its own sweeper "
            "(hydra/sweeper=trainbench, the default in conf/config.yaml)",
        )
    node = nodes.place(received.cell)
    if node > 0:  # a later task of a job: a multi-node cell's node joins node 0's ranks (node 0 records the cell)
        # before the store: a node records nothing, and a store it failed to open would keep it from joining
        return nodes.join(received, node) if received.cell.device.nodes > 1 else nodes.idle(received.cell, node)
    address = received.store
    store = Store(
        tracking.open_store(address.uri, mid_sweep=True, outage_s=received.cell.tracking.outage_s),
        address.uri,
        address.experiment_id,
        address.parent_run_id,
        address.sweep_id,
    )
    name, place = received.name, f"{received.index}/{received.total}"
    if not (launchers.in_the_sweeps_process() and received.index in _announced):
        announce(received.index, received.total, name, received.overrides)
    _label_lines(name)
    if received.total > 1 and received.started_at is not None:
        progress.line(
            "  "
            + sweep_clock.status_line(
                store.client,
                address.experiment_id,
                address.sweep_id,
                received.started_at,
                received.total,
                list(received.kinds) or None,
            )
        )
    started = time.monotonic()
    job_states.write(received.index, {"state": "started"})
    try:
        result = run_cell(received, store)
    except tracking.StoreFailed as fault:
        # The sweep's summary names the cell the fault stopped (the exception travels from a launcher's worker).
        fault.cell_index = received.index  # type: ignore[attr-defined]
        raise
    job_states.write(received.index, {"state": "ended", **result.to_dict()})
    if received.total > 1:
        took = progress.duration(time.monotonic() - started)
        print(f"[cell {place}] {result.name}: {result.outcome} in {took}", flush=True)
    return result.to_dict()


# The cells whose line the sweep's owner printed already, in this process (Hydra's basic launcher runs their jobs here)
_announced: set[int] = set()


def announce(index: int, total: int, name: str, overrides: Sequence[str]) -> None:
    """The cell's first line: its place in the sweep, its name and its overrides."""
    _announced.add(index)
    print(f"[cell {index}/{total}] {name}: {tracking.private(' '.join(overrides)) or '(defaults)'}", flush=True)


def _label_lines(name: str) -> None:
    """Outside the sweep's own process (a parallel launcher's worker, another machine), cells may share an output:
    every line of this cell's (and of the processes it starts) then carries its name. A worker runs several cells
    one after the other: each sets its own."""
    if launchers.in_the_sweeps_process():
        os.environ.pop(progress.LABEL_ENV, None)
    else:
        os.environ[progress.LABEL_ENV] = name
