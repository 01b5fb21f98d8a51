"""How many data-parallel ranks a cell runs on a CPU: a framework's launcher (cell side) asks, and the sweep's
launcher bound (trainbench.sweep.launchers) counts the same cores. Light: no framework import."""

from __future__ import annotations

import contextlib
import os
import sys


def cores_here() -> int:
    """The cores this process may run on (its CPU affinity: a container's or a job's share, not the host's)."""
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def bound_cpu_ranks(requested: int, cores: int, available_mb: int, per_rank_mb: int) -> tuple[int, str | None]:
    """How many data-parallel ranks a cell runs on a CPU, and why when that is fewer than asked: a rank per core
    at most (more only take turns on the same cores, and each is a whole framework's process), and no more than
    the memory available holds at the framework's floor per rank (beyond it the kernel kills other programs)."""
    by_memory = max(1, available_mb // max(1, per_rank_mb))
    bound = max(1, min(requested, cores, by_memory))
    if bound >= requested:
        return requested, None
    if bound == cores and cores <= by_memory:
        return bound, f"{cores} cores"
    return bound, f"{available_mb:,} MB of memory available, about {per_rank_mb:,} MB a rank"


def cut_cpu_ranks(requested: int, per_rank_mb: int) -> int:
    """bound_cpu_ranks for this process's cores and the memory available now, with one line when cut."""
    import psutil

    available_mb = int(psutil.virtual_memory().available // 2**20)
    bound, why = bound_cpu_ranks(requested, cores_here(), available_mb, per_rank_mb)
    if why:
        sys.stderr.write(
            f"trainbench: device.count={requested} cut to {bound} data-parallel ranks on the CPU ({why})\n"
        )
        sys.stderr.flush()
    return bound


def pin_rank(local_rank: int, local_size: int) -> str | None:
    """Pin this rank's process to its own equal share of the cores it may use (its node's ranks split them in
    order), so that one rank's host work (an eager step's kernel launches) never waits for another rank's
    threads on a shared core; threads the process starts later inherit the pin. The ranks' shares as a tag
    value ("rank 0: 0-7; rank 1: 8-15"), or None where there is nothing to pin (one rank, fewer cores than ranks,
    or no sched_setaffinity: macOS)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    share = len(cores) // max(1, local_size)
    if local_size < 2 or share < 1:
        return None
    shares = [cores[rank * share : (rank + 1) * share] for rank in range(local_size)]
    try:
        os.sched_setaffinity(0, shares[local_rank])
    except OSError:
        return None
    return "; ".join(f"rank {rank}: {spans(cores)}" for rank, cores in enumerate(shares))


def spans(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)
