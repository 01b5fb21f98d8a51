"""A Keras-on-JAX cell over several hosts (device.nodes=N): one JAX process per node, joined into one
multi-process JAX runtime by jax.distributed.initialize, Keras' DataParallel over every node's devices.

The nodes meet where PyTorch's do (PET_RDZV_ENDPOINT=HOST:PORT, set by hand or by trainbench.sweep.nodes under a
submitit job): JAX's coordination service listens on HOST at PORT+1, hosted by node 0, the node that runs the
cell's job and records its run (process 0). Every other node runs `python -m trainbench.cell.ranks` with the
same overrides and its node rank (TRAINBENCH_NODE_RANK, else Slurm's SLURM_NODEID). Collectives: gloo between
CPU processes, NCCL between GPUs. Light: JAX is handed in, never imported here.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

NODE_RANK_ENV = "TRAINBENCH_NODE_RANK"
COORDINATOR_PORT_OFFSET = 1  # the coordination service's port: the rendezvous port + 1 (torch's own stays free)
JOIN_TIMEOUT_S = 600  # how long the nodes wait for each other to start, as torchrun's join_timeout
# How long the coordination service waits for a node that stopped answering before it fails every node's
# collectives (TRAINBENCH_NODE_HEARTBEAT_S overrides it).
HEARTBEAT_TIMEOUT_S = 60


def coordinator_address() -> str:
    """HOST:PORT+1 from PET_RDZV_ENDPOINT=HOST:PORT; DeviceUnavailable without one."""
    from trainbench.frameworks.base import DeviceUnavailable

    endpoint = os.environ.get("PET_RDZV_ENDPOINT", "")
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise DeviceUnavailable(
            "device.nodes > 1 needs the nodes' meeting point: set PET_RDZV_ENDPOINT=HOST:PORT (the first node) "
            "on every node, or launch with hydra/launcher=submitit_slurm (docs/multi-gpu.md#across-nodes)"
        )
    return f"{host}:{int(port) + COORDINATOR_PORT_OFFSET}"


def process_id(nodes: int) -> int:
    """This node's JAX process id: 0 for the node that records the cell (its job's process), else its node rank
    from TRAINBENCH_NODE_RANK or SLURM_NODEID (1..nodes-1); DeviceUnavailable when a joining node has none."""
    from trainbench.frameworks.base import DeviceUnavailable
    from trainbench.frameworks.pytorch.distributed import RECORDING_ENV

    if os.environ.get(RECORDING_ENV, "1") == "1":
        return 0
    text = os.environ.get(NODE_RANK_ENV) or os.environ.get("SLURM_NODEID") or ""
    if not text.isdigit() or not 1 <= int(text) < nodes:
        ranks = "1" if nodes == 2 else f"1..{nodes - 1}"
        raise DeviceUnavailable(
            f"a node joining a JAX cell over {nodes} nodes needs its node rank: set {NODE_RANK_ENV}={ranks} "
            f"(one per node; node 0 runs src/run.py), got {text or 'none'}"
        )
    return int(text)


def join(jax: Any, nodes: int, cpu: bool) -> int:
    """Join the cell's JAX processes (before JAX creates its devices); return this process's id."""
    if cpu:  # XLA's CPU client has no cross-process collectives of its own
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    process = process_id(nodes)
    heartbeat = int(os.environ.get("TRAINBENCH_NODE_HEARTBEAT_S", HEARTBEAT_TIMEOUT_S))
    jax.distributed.initialize(
        coordinator_address=coordinator_address(),
        num_processes=nodes,
        process_id=process,
        initialization_timeout=JOIN_TIMEOUT_S,
        heartbeat_timeout_seconds=heartbeat,
    )
    _answer_roll_call(process)
    return process


# Each joining node writes its host name and counts up a heartbeat in the coordination service's key-value store,
# which node 0 (the recording one) hosts: when a collective fails there, node 0 names the nodes whose count
# stopped (lost_nodes), long before the service's own heartbeat timeout would.
BEAT_S = 0.25
LAST_BEAT_S = 10  # at exit, how long a beat under way is waited for (the service answers in milliseconds)
_ROLL = "trainbench/roll/"
_roll: dict[str, Any] = {}


def _client() -> Any:
    from jax._src import distributed  # the runtime client jax.distributed.initialize made (no public handle)

    return distributed.global_state.client


def _answer_roll_call(process: int) -> None:
    """Best effort: a roll call that cannot be made leaves a lost node unnamed, never fails the cell."""
    try:
        client = _client()
        client.key_value_set(f"{_ROLL}node/{process}", socket.gethostname())
    except Exception as error:
        sys.stderr.write(f"trainbench: no roll call of the nodes: {type(error).__name__}: {error}\n")
        return
    _roll.update(client=client, process=process)
    if process == 0:
        return

    from trainbench.frameworks.heartbeat import beat_until_exit

    beat_until_exit(lambda: client.key_value_increment(f"{_ROLL}beat/{process}", 1), BEAT_S, LAST_BEAT_S)


def lost_nodes(nodes: int) -> list[str]:
    """The joining nodes (`HOST (node N)`) whose heartbeat stopped, seen from node 0 after a collective failed;
    [] elsewhere or without a roll call. Waits a few heartbeats: about a second. Where some are named, this
    process ends without JAX's shutdown barrier, which would wait for the lost node until the service's own
    heartbeat timeout and then abort the process."""
    client = _roll.get("client")
    if client is None or _roll.get("process") != 0:
        return []
    try:
        before = {node: client.key_value_increment(f"{_ROLL}beat/{node}", 0) for node in range(1, nodes)}
        time.sleep(BEAT_S * 4)
        silent = [node for node in before if client.key_value_increment(f"{_ROLL}beat/{node}", 0) == before[node]]
        named = [f"{client.key_value_try_get(f'{_ROLL}node/{node}')} (node {node})" for node in silent]
    except Exception:
        return []
    if named:
        import atexit

        atexit.register(_end_without_shutdown)  # runs first: the result is written by then
    return named


def _end_without_shutdown() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def global_devices(jax: Any, local: list[Any]) -> list[Any]:
    """Every node's first len(local) devices of local's platform, node by node: the cell's global mesh, each
    node giving as many devices as this one (device.count is per node)."""
    platform = local[0].platform
    by_process: dict[int, list[Any]] = {}
    for device in sorted(jax.devices(platform), key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(device.process_index, []).append(device)
    return [device for process in sorted(by_process) for device in by_process[process][: len(local)]]


def own_share(positions: Any, process: int, processes: int, devices: int) -> Any:
    """This node's contiguous share of a global batch's sample positions. A batch that the devices do not divide
    (an epoch's last) is filled up with its own first samples, so every device gets as many rows."""
    import numpy as np

    size = -(-len(positions) // devices) * devices
    return np.resize(positions, size).reshape(processes, -1)[process]


def tags(jax: Any, devices: list[Any], backend: str) -> dict[str, str]:
    """The hardware identity of a cell over nodes: hw.nodes and how the hosts are linked."""
    from trainbench.measure import topology

    tags = {"hw.nodes": str(jax.process_count())}
    host = coordinator_address().rpartition(":")[0]
    tags.update(topology.node_interconnect_tags(host, "nccl" if backend == "cuda" else "gloo"))
    return tags
