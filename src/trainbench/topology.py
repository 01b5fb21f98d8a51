"""How a cell's GPUs are connected to each other: NVLink or PCIe, as `nvidia-smi topo -m` reports it.

Data-parallel training all-reduces the gradients every step, so the link between the GPUs decides how
well a cell scales: runs on NVLink and on PCIe are different machines for that question. Tags:
  hw.gpu_interconnect  NVLink (every pair of the cell's GPUs on NVLink), PCIe (no pair), NVLink+PCIe
  hw.gpu_links         nvidia-smi's own codes for the pairs, e.g. NV18 (18 bonded NVLinks), PIX, PHB, NODE, SYS
A cell spread over hosts (device.nodes > 1) adds how the hosts are linked (node_interconnect_tags):
  hw.node_interconnect InfiniBand (NCCL over the host's adapters), Ethernet, IPoIB or loopback (TCP)
  hw.node_link         the adapters (mlx5_0,mlx5_1) or the TCP interface and its speed (eth0 25000 Mb/s)
The parser is a pure function of the printed matrix (tests/samples/*_nvidia_smi_topo.txt).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess

PCIE_CODES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # SOC: older drivers' name for SYS


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topology_matrix(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` -> {(gpu_a, gpu_b): code} for every pair of GPUs in the matrix (both orders)."""
    # On a terminal-like pipe nvidia-smi underlines the header with ANSI escapes (seen on an H200 host).
    lines = [ANSI.sub("", line) for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if re.match(r"^\s+GPU\d+", line)), None)
    if header is None:
        return {}
    columns = [int(name[3:]) for name in re.findall(r"\bGPU\d+\b", header)]
    links: dict[tuple[int, int], str] = {}
    for line in lines:
        fields = line.split()
        if not fields or not re.fullmatch(r"GPU\d+", fields[0]) or line is header:
            continue
        row = int(fields[0][3:])
        for column, code in zip(columns, fields[1 : 1 + len(columns)], strict=False):
            if column != row:
                links[(row, column)] = code
    return links


def interconnect(links: dict[tuple[int, int], str], gpus: list[int]) -> dict[str, str]:
    """The hw.gpu_interconnect and hw.gpu_links tags of `gpus` (physical indices) under `links`."""
    codes = {links[(a, b)] for a in gpus for b in gpus if a != b and (a, b) in links}
    if not codes:
        return {}
    nvlink = {code for code in codes if code.startswith("NV")}
    kind = "NVLink" if nvlink == codes else ("PCIe" if not nvlink else "NVLink+PCIe")
    return {"hw.gpu_interconnect": kind, "hw.gpu_links": ",".join(sorted(codes))}


def physical_indices(cuda_indices: list[int], visible: str | None, uuids: dict[str, int]) -> list[int]:
    """The nvidia-smi indices of CUDA's devices `cuda_indices` under CUDA_VISIBLE_DEVICES=`visible`
    (indices or GPU UUIDs, resolved with `uuids`)."""
    if visible is None:
        return list(cuda_indices)
    listed = [item.strip() for item in visible.split(",") if item.strip()]
    physical = []
    for index in cuda_indices:
        if index >= len(listed):
            return []
        item = listed[index]
        if item.isdigit():
            physical.append(int(item))
        elif item in uuids:
            physical.append(uuids[item])
        else:
            return []
    return physical


def interconnect_tags(cuda_indices: list[int]) -> dict[str, str]:
    """hw.gpu_interconnect and hw.gpu_links of this process's CUDA devices `cuda_indices`; {} where
    nvidia-smi is missing or does not answer (a missing fact is a missing tag, never a failed cell)."""
    if not shutil.which("nvidia-smi"):
        return {}
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        links = parse_topology_matrix(_run("nvidia-smi", "topo", "-m"))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        uuids: dict[str, int] = {}
        if visible and not all(item.strip().isdigit() for item in visible.split(",") if item.strip()):
            for line in _run("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader").splitlines():
                index, _, uuid = line.partition(",")
                uuids[uuid.strip()] = int(index)
        return interconnect(links, physical_indices(cuda_indices, visible, uuids))
    return {}


def _run(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=20).stdout


def node_interconnect_tags(peer_host: str, backend: str) -> dict[str, str]:
    """hw.node_interconnect and hw.node_link of a cell spread over hosts, as seen from this node: the kind of
    link its collectives cross to reach `peer_host` (the rendezvous host). NCCL takes InfiniBand/RoCE adapters
    where the host has them (/sys/class/infiniband); gloo, and NCCL without them, use TCP over the interface
    the route to the peer leaves by. {} where that cannot be read (a missing fact is a missing tag)."""
    with contextlib.suppress(OSError, ValueError):
        adapters = sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir("/sys/class/infiniband") else []
        if backend == "nccl" and adapters and os.environ.get("NCCL_IB_DISABLE", "0") != "1":
            return {"hw.node_interconnect": "InfiniBand", "hw.node_link": ",".join(adapters)}
        return _tcp_interface(peer_host)
    return {}


def _tcp_interface(peer_host: str) -> dict[str, str]:
    import socket

    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((peer_host, 9))  # UDP: no packet is sent, the kernel only picks the route
        local_address = probe.getsockname()[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(address.address == local_address for address in addresses):
            stats = psutil.net_if_stats().get(name)
            kind = "loopback" if local_address.startswith("127.") else "IPoIB" if name.startswith("ib") else "Ethernet"
            speed = f" {stats.speed} Mb/s" if stats is not None and stats.speed > 0 else ""
            return {"hw.node_interconnect": kind, "hw.node_link": f"{name}{speed}"}
    return {}
