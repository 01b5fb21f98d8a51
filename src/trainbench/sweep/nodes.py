"""A cell spread over hosts (device.nodes=N) as one Slurm/submitit job of N tasks, one task per node.

Every task runs the same cell job (trainbench.sweep.job). The first task (global rank 0) is node 0: it runs the cell
as any other (its process, its run, the elastic agent of its ranks); the others join it (`join`): each starts this
node's ranks with the same launcher and records nothing. They meet at torchrun's c10d rendezvous on the first
task's host, at a port drawn from the job's id, so every task finds it without talking first (PET_RDZV_ENDPOINT,
set by hand, wins). Light: no framework import here.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

RENDEZVOUS_PORTS = (29400, 10000)  # first port, how many: the range a job's id picks its rendezvous port from


def submitit_task() -> Any:
    """submitit's JobEnvironment when this process is a task of a submitit job (Slurm or local), else None."""
    if not any(name.startswith(("SUBMITIT_", "SLURM_JOB_ID")) for name in os.environ):
        return None
    try:
        import submitit

        environment = submitit.JobEnvironment()
        _ = environment.global_rank  # raises outside a submitit job
        return environment
    except Exception:
        return None


def place(cell: Any) -> int:
    """This task's rank in a submitit job of several tasks (0 outside one), with the rendezvous variables set for
    the launch of a multi-node cell (trainbench.frameworks.pytorch.distributed.launch_config)."""
    from trainbench.config import ConfigError

    nodes = cell.device.nodes
    task = submitit_task()
    if task is None:
        return 0
    if nodes == 1:  # a sweep's 1-node cell in a job of several tasks (hydra.launcher.*): the first task runs it
        return int(task.global_rank)
    if task.num_tasks != nodes:
        raise ConfigError(
            "device.nodes",
            nodes,
            f"this job has {task.num_tasks} task(s); a cell over {nodes} nodes runs one task per node: "
            f"hydra.launcher.nodes={nodes} hydra.launcher.tasks_per_node=1 (Slurm), or "
            f"hydra.launcher.tasks_per_node={nodes} (submitit_local, every node on this host)",
        )
    digest = int(hashlib.sha256(str(task.job_id).encode()).hexdigest(), 16)
    port = RENDEZVOUS_PORTS[0] + digest % RENDEZVOUS_PORTS[1]
    os.environ.setdefault("PET_RDZV_ENDPOINT", f"{task.hostnames[0]}:{port}")
    os.environ.setdefault("PET_RDZV_ID", f"trainbench-{task.job_id}")
    os.environ.setdefault("TRAINBENCH_NODE_RANK", str(task.global_rank))  # a JAX cell's process id (jax.nodes)
    return int(task.global_rank)


def idle(cell: Any, task: int) -> dict[str, Any]:
    """A later task of a job whose cell runs on one node: nothing to do (the first task runs the cell)."""
    return {
        "node": task,
        "outcome": "idle",
        "reason": f"device.nodes={cell.device.nodes}: the job's first task runs it",
    }


def join(order: Any, node: int) -> dict[str, Any]:
    """Run this node's ranks of the cell (its trainbench.cell.order.CellOrder, as node 0 has it) node 0 records;
    return what became of them (the run is node 0's: these ranks have no relay to record through)."""
    import importlib

    from trainbench.cell.ranks import rank_main
    from trainbench.tasks.base import task_of

    cell = order.cell
    spec = json.dumps({"order": order.running(task_of(cell).prepared(cell)).to_dict()})
    print(f"[node {node}/{cell.device.nodes}] joining the cell at {os.environ['PET_RDZV_ENDPOINT']}", flush=True)
    try:
        if cell.framework.rank_launcher is None:  # one process per node (JAX): this one
            rank_main(spec)
        else:
            launcher = importlib.import_module(cell.framework.rank_launcher)
            launcher.launch(launcher.processes(cell.device), rank_main, spec, cell.device.nodes)
    except Exception as error:  # node 0 records the cell's outcome; this node only says why it stopped
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        sys.stderr.write(f"[node {node}/{cell.device.nodes}] stopped: {reason}\n")
        return {"node": node, "outcome": "failed", "reason": reason}
    return {"node": node, "outcome": "finished", "reason": None}
