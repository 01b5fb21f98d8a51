"""A cell order: what the sweep's owner decided about one cell, made once and never changed on the way.

The owner (trainbench.runner.owner) composes and judges every cell once, opens the store, creates the sweep's run,
then makes one CellOrder per cell: the judged cell, the overrides that made it, its place and name in the sweep,
where its run goes and the tags the owner asks for. The order is serialised once (`to_json`) and travels, as it
is, through any Hydra launcher to the job (trainbench.runner.job), into the cell's own process
(trainbench.runner.worker) and to every rank of a data-parallel cell (trainbench.runner.ranks). Where it crosses
to another process that is not the sweep's own (a launcher's worker, another machine), the cell is judged again
there (`from_json(..., judge=True)`): that machine's memory, data folder and frameworks may differ.

The cell's processes only add what they observe (the backend bound, the devices found, the host); they never
decide the run's identity again. The order stays out of the cell's config: CellConfig holds what is measured,
nothing about where it is recorded.

Light: no MLflow, no Hydra, no deep-learning framework.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainbench.config import CellConfig, from_spec, to_spec

# How a Hydra launcher carries the order to its job. A launcher passes each job nothing but its overrides, and
# the cell's config must not hold the order: Hydra's own per-job environment (hydra.job.env_set, applied around
# the task function by every launcher) carries it instead, base64 so that Hydra's override grammar never reads it.
ORDER_ENV = "TRAINBENCH_CELL_ORDER"

# Tags only the cell's process writes, as in force (device.count=all resolved; compilation as the framework says it
# compiles): an order never asks for them, so a run never holds an asked value under an in-force name. What was
# asked is in the params (device.count, optimize.compile).
IN_FORCE_TAGS = frozenset({"trainbench.num_devices", "trainbench.compile"})


@dataclass(frozen=True)
class StoreAddress:
    """Where a cell's run goes: the store's URI, the experiment, the sweep's run (None for a lone cell) and the
    sweep's id (trainbench.sweep_id on every cell's run)."""

    uri: str
    experiment_id: str
    parent_run_id: str | None
    sweep_id: str


@dataclass(frozen=True)
class CellOrder:
    cell: CellConfig  # judged once, by the owner
    overrides: tuple[str, ...]  # the job's overrides as the sweep expanded them: the run's overrides.txt
    store: StoreAddress | None  # None: a rank of another node, which records nothing
    index: int = 1  # the cell's place in the sweep, from 1
    total: int = 1
    name_suffix: str = ""  # what tells this cell apart from its siblings (` precision=tf32`)
    started_at: float | None = None  # when the sweep began (seconds since the epoch): elapsed time and estimate
    # Each cell's kind for the sweep's estimate (trainbench.runner.sweep_clock), in order; `-` for a cell on a
    # device this machine cannot have.
    kinds: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)  # the tags the owner asks the cell's run to carry

    @property
    def name(self) -> str:
        """The run's name before the cell's process binds a device: with the device asked for
        (trainbench.runner.names.shown_device); renamed with `name_on` once the backend is known."""
        from trainbench.runner.names import shown_device

        return self.name_on(shown_device(self.cell.device.name))

    def name_on(self, backend: str) -> str:
        """The run's name on `backend` (`pytorch-mlp-cpu-bs32` plus the suffix that sets it apart)."""
        from trainbench.runner.names import run_name

        return run_name(self.cell, backend, self.name_suffix)

    def running(self, cell: CellConfig) -> CellOrder:
        """This order with the cell as its process runs it: prepared by its task, with batch_size=max resolved."""
        return dataclasses.replace(self, cell=cell)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": to_spec(self.cell),
            "overrides": list(self.overrides),
            "store": dataclasses.asdict(self.store) if self.store is not None else None,
            "index": self.index,
            "total": self.total,
            "name_suffix": self.name_suffix,
            "started_at": self.started_at,
            "kinds": list(self.kinds),
            "tags": dict(self.tags),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], judge: bool = False) -> CellOrder:
        """The order as it was made; `judge`: judge its cell again, as on a machine that is not the owner's."""
        cell = from_spec(values["cell"])
        if judge:
            from trainbench.config.judge import judge as judged

            judged(cell)
        store = values.get("store")
        return cls(
            cell=cell,
            overrides=tuple(values.get("overrides", ())),
            store=StoreAddress(**store) if store else None,
            index=int(values.get("index", 1)),
            total=int(values.get("total", 1)),
            name_suffix=str(values.get("name_suffix", "")),
            started_at=values.get("started_at"),
            kinds=tuple(values.get("kinds", ())),
            tags=dict(values.get("tags", {})),
        )

    @classmethod
    def from_json(cls, text: str, judge: bool = False) -> CellOrder:
        return cls.from_dict(json.loads(text), judge)


def launcher_override(order: CellOrder) -> str:
    """The one override that carries `order` through a Hydra launcher to its job (see ORDER_ENV)."""
    packed = base64.urlsafe_b64encode(order.to_json().encode()).decode()
    return f"++hydra.job.env_set.{ORDER_ENV}='{packed}'"


def received(judge: bool) -> CellOrder | None:
    """In a job: the order its launcher carried (None when the job was started without one)."""
    packed = os.environ.get(ORDER_ENV)
    if not packed:
        return None
    return CellOrder.from_json(base64.urlsafe_b64decode(packed.encode()).decode(), judge)
