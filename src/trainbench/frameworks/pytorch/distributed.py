"""Data-parallel PyTorch cells: one process per device, started by torch's own launcher, trained with
DistributedDataParallel.

The cell's process (trainbench.cell.worker) stays the process the sweep watches and becomes torch
elastic's agent: `launch` builds a LaunchConfig with torchrun's own argument parser (so torchrun's PET_*
environment variables, e.g. a multi-node rendezvous, apply exactly as they do to torchrun) and starts
`count` ranks with `elastic_launch`, each running the cell (trainbench.cell.ranks.rank_main). NCCL on
CUDA GPUs, gloo on the CPU. max_restarts=0: a rank that fails fails the cell; the agent stops the other
ranks and raises ChildFailedError, turned here into the cell's outcome and reason.

Inside each rank the adapter joins the process group (`join`), waits for every rank at block boundaries
(`barrier`) and trains with trainbench.frameworks.pytorch.data_parallel.DataParallelTrainer.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainbench.config.schema import DeviceConfig

# torchrun's environment variables that point a launch at a rendezvous shared with other nodes.
MULTI_NODE_VARIABLES = ("PET_NNODES", "PET_RDZV_ENDPOINT", "PET_MASTER_ADDR")


# "1" in the rank that records the cell (trainbench.cell.ranks sets it). On one host that is global rank 0; across
# nodes the c10d rendezvous numbers the nodes in an order of its own, so it is the recording node's first rank.
RECORDING_ENV = "TRAINBENCH_RECORDING_RANK"


class RankFailed(RuntimeError):
    """A rank of a data-parallel cell failed; str() names the rank and its error."""


# ----------------------------------------------------------------------------------------- the launch


def processes(device: DeviceConfig) -> int:
    """How many ranks the cell runs on this node: device.count, `all` = every GPU this process sees (1 on
    a CPU). Raises DeviceUnavailable when the cell asks for more GPUs than it was given."""
    import torch

    from trainbench.frameworks.base import DeviceUnavailable

    gpus = torch.cuda.device_count() if device.name != "cpu" else 0  # no CUDA context: the ranks make theirs
    if device.count == "all":
        return max(gpus, 1)
    count = int(device.count)
    if count > 1 and device.name == "gpu" and gpus < count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise DeviceUnavailable(f"device.count={count} asks for {count} GPUs; this cell sees {gpus}{shown}")
    if count > 1 and gpus == 0:  # ranks on the CPU: bounded by its cores and memory
        from trainbench.cell.cpu_ranks import cut_cpu_ranks
        from trainbench.frameworks.pytorch import MIN_MEMORY_MB

        return cut_cpu_ranks(count, MIN_MEMORY_MB)
    return count


def launch(count: int, entrypoint: Callable[[str], Any], argument: str, nodes: int = 1) -> dict[int, Any]:
    """Run entrypoint(argument) in `count` ranks on this node, one of `nodes` hosts meeting at torchrun's c10d
    rendezvous (more nodes also when torchrun's PET_* variables say so); return each local rank's result by
    global rank. A failed rank raises RankFailed, or DeviceUnavailable when that is what it raised; a stop
    signal raises KeyboardInterrupt."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    config = launch_config(count, nodes)
    try:
        leave_s = float(os.environ.get("TRAINBENCH_LEAVE_TIMEOUT_S") or NODES_LEAVE_S)
        with _other_nodes_awaited_at_most(leave_s if config.max_nodes > 1 else None):
            return elastic_launch(config, entrypoint)(argument)
    except ChildFailedError as error:
        raise _cell_error(error, count * nodes) from None
    except SignalException:  # the agent turned SIGTERM/SIGINT/SIGHUP into this after stopping the ranks
        raise KeyboardInterrupt from None


# Once this node's ranks have ended, how long its agent waits for the other nodes' agents (torch elastic's exit
# barrier, 300 s, keeps the rendezvous' store up for ranks still at work). The cell's last collective has passed by
# then, so the others end within seconds; an agent that never comes had its ranks crash on their way out, and the
# cell, measured and recorded, would otherwise end 5 minutes late. TRAINBENCH_LEAVE_TIMEOUT_S overrides it.
NODES_LEAVE_S = 60.0


@contextlib.contextmanager
def _other_nodes_awaited_at_most(seconds: float | None) -> Iterator[None]:
    """Within: the agents elastic_launch makes wait `seconds` at the exit barrier (None: torch's own wait). Its
    LaunchConfig has no such field, so launch_agent's agent class is swapped for one that passes it."""
    from torch.distributed.launcher import api

    agent_class = getattr(api, "LocalElasticAgent", None)
    if seconds is None or agent_class is None:
        yield
        return
    bound = seconds

    class LeavingAgent(agent_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{"exit_barrier_timeout": bound, **kwargs})

        def _exit_barrier(self) -> None:  # torch's own logs its timeout only to the run's framework_log.txt
            import time

            from trainbench import progress

            started = time.monotonic()
            super()._exit_barrier()
            if time.monotonic() - started >= bound:
                progress.line(
                    f"  the other nodes' ranks had not ended {bound:g} s after this node's "
                    "(TRAINBENCH_LEAVE_TIMEOUT_S): going on; the cell is recorded, and their nodes' output says why"
                )

    api.LocalElasticAgent = LeavingAgent
    try:
        yield
    finally:
        api.LocalElasticAgent = agent_class


def launch_config(count: int, nodes: int = 1) -> Any:
    """torchrun's own LaunchConfig for `count` processes per node: standalone (a local rendezvous on a free
    port) unless torchrun's PET_* variables describe several nodes; for `nodes` > 1 a c10d rendezvous at
    PET_RDZV_ENDPOINT (HOST:PORT, the same on every node) under PET_RDZV_ID; no restarts."""
    from torch.distributed.run import config_from_args, get_args_parser

    from trainbench.store.tracking import verbose

    if not verbose():  # torch elastic's INFO lines (the launch config) say nothing to act on
        logging.getLogger("torch.distributed").setLevel(logging.ERROR)
    # torchrun would set 1 thread per rank (and warn); the cores this cell may use, shared by its ranks,
    # keep a CPU cell's ranks using the whole CPU, as its 1-process cell does.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // count)))
    argv = ["--nproc-per-node", str(count), "--max-restarts", "0", "--monitor-interval", "0.5"]
    if nodes > 1:
        argv += ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous_endpoint()]
    elif not any(os.environ.get(name) for name in MULTI_NODE_VARIABLES):
        # What torchrun --standalone sets (its run() does it, not config_from_args).
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--rdzv-id", str(uuid.uuid4())]
    config, _, _ = config_from_args(get_args_parser().parse_args([*argv, "trainbench-cell"]))
    return config


def rendezvous_endpoint() -> str:
    """HOST:PORT where a multi-node cell's nodes meet (torchrun's PET_RDZV_ENDPOINT, set by hand or by
    trainbench.sweep.nodes under a Slurm/submitit job); raises DeviceUnavailable without one."""
    from trainbench.frameworks.base import DeviceUnavailable

    endpoint = os.environ.get("PET_RDZV_ENDPOINT", "")
    if not endpoint:
        raise DeviceUnavailable(
            "device.nodes > 1 needs the nodes' meeting point: set PET_RDZV_ENDPOINT=HOST:PORT (the first node) "
            "on every node, or launch with hydra/launcher=submitit_slurm (docs/multi-gpu.md#across-nodes)"
        )
    return endpoint


def _cell_error(error: Any, count: int) -> Exception:
    """The first rank's failure (the root cause; the agent stopped the others) as the cell's error."""
    from trainbench.frameworks.base import DeviceUnavailable

    rank, failure = error.get_first_failure()
    message = failure.message.get("message", "") if isinstance(failure.message, dict) else str(failure.message)
    prefix = f"{DeviceUnavailable.__name__}: "
    if message.startswith(prefix):
        return DeviceUnavailable(f"{message[len(prefix) :]} (rank {rank})")
    return RankFailed(f"rank {rank} of {count} failed: {message or f'exit code {failure.exitcode}'}")


# ------------------------------------------------------------------------------------- inside a rank


@dataclass(frozen=True)
class World:
    """This process's place among the cell's ranks, as torch elastic's environment gives it."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1
    local_size: int = 1
    records: bool = True  # the rank that logs the cell's run (and evaluates): see RECORDING_ENV

    @classmethod
    def from_environment(cls) -> World:
        if "TORCHELASTIC_RUN_ID" not in os.environ or "WORLD_SIZE" not in os.environ:
            return cls()
        rank = int(os.environ["RANK"])
        return cls(
            rank,
            int(os.environ["LOCAL_RANK"]),
            int(os.environ["WORLD_SIZE"]),
            int(os.environ["LOCAL_WORLD_SIZE"]),
            os.environ.get(RECORDING_ENV, "1" if rank == 0 else "0") == "1",
        )


def join(torch: Any, backend: str, world: World) -> Any:
    """Join the cell's process group (NCCL on CUDA, gloo on the CPU); return this rank's device."""
    from trainbench.frameworks.base import DeviceUnavailable

    if backend == "mps":
        raise DeviceUnavailable("an Apple GPU (MPS) is one device: device.count > 1 needs CUDA GPUs or device=cpu")
    if backend == "cuda":
        if torch.cuda.device_count() < world.local_size:
            raise DeviceUnavailable(
                f"{world.local_size} ranks on this node but only {torch.cuda.device_count()} GPUs visible"
            )
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
        backend, options = "nccl", {"device_id": device}
    else:
        device, backend, options = torch.device("cpu"), "gloo", {}
    collectives = _collective_timeout(torch, backend)
    if world.size > world.local_size:
        _join_nodes(torch, backend, options, world, collectives)
        _answer_roll_call(torch, world)
    else:
        torch.distributed.init_process_group(backend, timeout=collectives, **options)
    atexit.register(_leave, torch)
    return device


def _collective_timeout(torch: Any, backend: str) -> Any:
    """How long a collective waits for a rank that stopped answering: TRAINBENCH_COLLECTIVE_TIMEOUT_S (gloo), or
    torch's own default. A node that vanishes without closing its sockets (a cut cable) is noticed after this."""
    import datetime

    seconds = os.environ.get("TRAINBENCH_COLLECTIVE_TIMEOUT_S")
    if seconds and backend == "gloo":
        return datetime.timedelta(seconds=float(seconds))
    return torch.distributed.distributed_c10d._get_default_timeout(backend)


# After torchrun's rendezvous every node's agent is there and starts its ranks at once; a rank that has not joined
# the process group within this many seconds will not (its node's command was mistyped, or its process died on
# start), and the others would otherwise wait out the collective timeout (30 min). TRAINBENCH_JOIN_TIMEOUT_S
# overrides it.
RANKS_JOIN_S = 300.0


def _join_nodes(torch: Any, backend: str, options: dict[str, Any], world: World, collectives: Any) -> None:
    """Join a process group spanning nodes within RANKS_JOIN_S, then give its collectives their own timeout.
    Raises NodeLost, saying how long it waited, where another node's ranks never came."""
    import datetime

    from trainbench.frameworks.base import NodeLost

    bound = float(os.environ.get("TRAINBENCH_JOIN_TIMEOUT_S") or RANKS_JOIN_S)
    try:
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=bound), **options)
    except Exception as error:
        if "timeout" not in str(error).lower() and "timed out" not in str(error).lower():
            raise
        raise NodeLost(
            f"not every node's ranks joined within {bound:g} s of the rendezvous ({world.size} ranks on "
            f"{world.size // world.local_size} nodes): another node's command failed or its ranks died on start "
            "(see that node's output)"
        ) from error
    c10d = torch.distributed.distributed_c10d
    (getattr(c10d, "set_timeout", None) or c10d._set_pg_timeout)(collectives)


# Across nodes each rank writes which node it is on and counts up a heartbeat in a small store the recording rank
# hosts itself, so that rank can name the node that went when a collective fails (lost_nodes). Not the process
# group's store: that lives on the node the rendezvous numbered 0, which may be the node that went.
HEARTBEAT_S = 0.25
ROLL_JOIN_S = 60  # how long a rank waits for the recording rank's roll-call address (set right after joining)
ROLL_CLIENT_TIMEOUT_S = 10  # how long one beat may wait for the recording rank's store
_ROLL = "trainbench/roll/"
_roll_store: list[Any] = []  # the recording rank's own store, once made


def _answer_roll_call(torch: Any, world: World) -> None:
    """Best effort: a roll call that cannot be made leaves the cell's failures unnamed, never fails the cell."""
    import datetime
    import socket

    try:
        group_store = torch.distributed.distributed_c10d._get_default_store()
        if world.records:
            roll = torch.distributed.TCPStore(socket.gethostname(), 0, None, True, wait_for_workers=False)
            _roll_store.append(roll)
            group_store.set(f"{_ROLL}at", f"{socket.gethostname()}:{roll.port}")
        else:
            group_store.wait([f"{_ROLL}at"], datetime.timedelta(seconds=ROLL_JOIN_S))
            host, _, port = group_store.get(f"{_ROLL}at").decode().rpartition(":")
            roll = torch.distributed.TCPStore(
                host, int(port), None, False, datetime.timedelta(seconds=ROLL_CLIENT_TIMEOUT_S)
            )
        roll.set(f"{_ROLL}node/{world.rank}", f"{os.environ.get('GROUP_RANK', '?')} {socket.gethostname()}")
    except Exception as error:
        sys.stderr.write(f"trainbench: no roll call of the nodes: {type(error).__name__}: {error}\n")
        return

    if not world.records:
        from trainbench.frameworks.heartbeat import beat_until_exit

        beat_until_exit(lambda: roll.add(f"{_ROLL}beat/{world.rank}", 1), HEARTBEAT_S, ROLL_CLIENT_TIMEOUT_S)


def lost_nodes() -> list[str]:
    """The nodes (`HOST (rendezvous node N)`, N as torch's rendezvous numbered them) whose ranks stopped beating,
    seen from the recording rank after a collective failed; [] elsewhere, on one node, or where no roll call
    was made. Waits a few heartbeats: bounded, about a second (two on the other ranks)."""
    import time

    world = World.from_environment()
    if world.size <= world.local_size:
        return []
    if not _roll_store:
        # Not the recording rank: it waits out the recording rank's roll call before failing, since torchrun
        # reports the first rank to fail and stops the others; the recording rank's error names the nodes.
        time.sleep(HEARTBEAT_S * 4 + 1)
        return []
    roll = _roll_store[0]
    others = [rank for rank in range(world.size) if rank != world.rank]
    before = {rank: roll.add(f"{_ROLL}beat/{rank}", 0) for rank in others}
    time.sleep(HEARTBEAT_S * 4)
    silent = [rank for rank in others if roll.add(f"{_ROLL}beat/{rank}", 0) == before[rank]]
    named = {
        tuple(roll.get(f"{_ROLL}node/{rank}").decode().split(" ", 1))
        for rank in silent
        if roll.check([f"{_ROLL}node/{rank}"])
    }
    return [f"{host} (rendezvous node {node})" for node, host in sorted(named)]


def _leave(torch: Any) -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def barrier(torch: Any, device: Any) -> None:
    """Every rank's queued work done and every rank here. Block timings start and end on this, so a block
    is timed from when all ranks start to when the slowest one finishes (one barrier per block: tens of
    microseconds against blocks of many steps)."""
    if device.type == "cuda":
        torch.distributed.barrier(device_ids=[device.index])
        torch.cuda.synchronize(device)
    else:
        torch.distributed.barrier()


def tags(world: World, device: Any) -> dict[str, str]:
    from trainbench.measure import topology

    backend = "nccl" if device.type == "cuda" else "gloo"
    tags = {
        "trainbench.data_parallel": f"torch DistributedDataParallel ({backend}, {world.size} ranks)",
        "torch.distributed_backend": backend,
    }
    if world.size > world.local_size:  # across nodes: how many, and how they are linked
        nodes = world.size // world.local_size
        tags["trainbench.data_parallel"] = (
            f"torch DistributedDataParallel ({backend}, {world.size} ranks on {nodes} nodes)"
        )
        tags["hw.nodes"] = str(nodes)
        tags.update(topology.node_interconnect_tags(os.environ.get("MASTER_ADDR", "localhost"), backend))
    return tags
