"""One rank of a data-parallel cell whose framework runs a process per device (PyTorch DDP).

The cell's process (trainbench.cell.worker) starts the ranks through the framework's own launcher
(`rank_launcher` in its config: torch elastic for PyTorch) and waits for them. Each rank runs the cell as a
1-device cell would (trainbench.cell.in_cell.run) inside the process group the adapter joins; global rank
0 records through the cell's process (cell.events.RankRelay: the same JSON lines every cell sends), the others
record nothing (tracking.NullLog). Light: no framework import here.

Across nodes (device.nodes=N), torchrun is the launcher on every node but the one running the cell's job:

    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HEAD:29400 \\
        -m trainbench.cell.ranks model=resnet50 ... device.nodes=2   # the cell's overrides, as on HEAD

Such a rank composes the cell from the same overrides and logs nothing (docs/multi-gpu.md, "Across nodes"); under
a submitit job the later tasks do the same (trainbench.sweep.nodes). The recording rank is node 0's first: the
rendezvous may number another node first.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from trainbench.cell.in_cell import CellSummary
    from trainbench.cell.order import CellOrder


def launch(order: CellOrder, log: Any, spec: dict[str, Any]) -> CellSummary:
    """Run the order's cell here, or, where its framework runs one process per device and it asks for several, in
    ranks started by the framework's own launcher (trainbench.cell.ranks); return rank 0's summary."""
    cell = order.cell
    if cell.framework.rank_launcher is not None:
        import importlib

        launcher = importlib.import_module(cell.framework.rank_launcher)
        count, nodes = launcher.processes(cell.device), cell.device.nodes
        if count > 1 or nodes > 1:
            from trainbench.cell.events import PipeLog, RankRelay

            relay = RankRelay(log) if isinstance(log, PipeLog) else None  # a probe's NullLog: nothing to relay
            try:
                argument = json.dumps({**spec, "relay": relay and relay.address})
                results = launcher.launch(count, rank_main, argument, nodes)
            finally:
                if relay is not None:
                    relay.close()
            return cast("CellSummary", results[min(results)])  # global rank 0's, or this node's first rank's
    from trainbench.cell.in_cell import run

    try:
        return run(order, log)
    except Exception as error:  # a cell over nodes in this one process (JAX): name a node that went
        raise _named_lost_nodes(cell, log, error) from error


def rank_main(spec_text: str) -> CellSummary:
    """The entry point each rank runs (a top-level function: torch elastic pickles it into spawned ranks)."""
    from trainbench import progress
    from trainbench.cell.cpu_ranks import pin_rank
    from trainbench.cell.events import rank_log
    from trainbench.cell.in_cell import die_with_parent, fault_for, inject_fault, run
    from trainbench.cell.order import CellOrder
    from trainbench.store.tracking import NullLog, quiet_logs

    spec = json.loads(spec_text)
    # First, before this process starts any thread: the threads started later inherit the pin.
    rank_cores = pin_rank(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    die_with_parent(os.getppid())  # the agent (the cell's process) gone: this rank goes too
    quiet_logs()
    order = CellOrder.from_dict(spec["order"])
    rank = int(os.environ.get("RANK", "0"))
    cell = order.cell
    # Across nodes the rendezvous may number another node first: the recording node's first rank records. Only
    # the node running the cell's process has its relay (cell.events.RankRelay): the others record nothing.
    spans_nodes = cell.device.nodes > 1 or int(os.environ.get("WORLD_SIZE", "1")) > int(
        os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))
    )
    first_here = int(os.environ.get("LOCAL_RANK", "0")) == 0 and spans_nodes
    records = bool(spec.get("relay")) and (rank == 0 or first_here)
    os.environ["TRAINBENCH_RECORDING_RANK"] = "1" if records else "0"  # distributed.RECORDING_ENV
    if records:  # through the cell's process, as every cell records (cell.events)
        log: Any = rank_log(spec["relay"], Path(spec["relay"]).parent)
    else:
        log = NullLog()
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (rank 0 prints the progress lines; for the process's life)
        progress.quiet()
    if rank_cores is not None:
        log.tags({"trainbench.rank_cores": rank_cores})
    inject_fault(fault_for(order.index, rank))
    try:
        summary = run(order, log)
    except Exception as error:
        named = _named_lost_nodes(cell, log, error)
        if named is error:
            raise
        raise named from error
    if spans_nodes:  # the launcher's agents wait for each other before the cell's process goes on (bounded)
        progress.phase("recorded; waiting for the other nodes' ranks to end")
    return summary


def _named_lost_nodes(cell: Any, log: Any, error: Exception) -> Exception:
    """Where a collective failed because other nodes' ranks went, the error naming them (and the tag
    trainbench.lost_nodes on rank 0's run); otherwise `error` itself."""
    from trainbench.frameworks.base import NodeLost

    if cell.device.nodes <= 1 or isinstance(error, NodeLost):
        return error
    import importlib

    if cell.framework.rank_launcher is not None:
        lost = importlib.import_module(cell.framework.rank_launcher).lost_nodes()
    elif cell.framework.node_joiner is not None:
        lost = importlib.import_module(cell.framework.node_joiner).lost_nodes(cell.device.nodes)
    else:
        return error
    if not lost:
        return error
    log.tags({"trainbench.lost_nodes": ", ".join(lost)})
    gone = f"node{'s' if len(lost) > 1 else ''} {', '.join(lost)}"
    # XLA repeats its prefix once per queued step ("Error dispatching computation: " x N): once says it.
    first_line = re.sub(r"((?:[^:]+: ))\1+", r"\1", str(error).splitlines()[0] if str(error) else "")
    return NodeLost(f"{gone} stopped answering: {type(error).__name__}: {first_line[:300]}")


def main(overrides: list[str]) -> int:
    """A node joining a multi-node cell under torchrun (or, JAX, by itself): compose the cell as the sweep did, run
    this rank. Bad overrides or a missing node rank: one line, exit 2."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas the YAML choices name)
    from trainbench.cell.order import CellOrder
    from trainbench.config import CONF_DIR, ConfigError, validate
    from trainbench.config.explain import compose_or_explain
    from trainbench.frameworks.base import DeviceUnavailable
    from trainbench.tasks.base import task_of

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            composed = compose_or_explain(lambda job: compose(config_name="config", overrides=job), overrides)
            cell = validate(composed)
        # This node's order: the cell composed from the sweep's overrides, recording nowhere (rank 0 is on the head).
        order = CellOrder(task_of(cell).prepared(cell), tuple(overrides), store=None)
        rank_main(json.dumps({"order": order.to_dict()}))
    except (ConfigError, DeviceUnavailable) as error:
        sys.stderr.write(f"trainbench: {error}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
