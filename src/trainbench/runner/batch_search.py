"""batch_size=max: the largest batch that fits, from an estimate of the memory a batch takes, checked by probes.

A probe is two training steps of the cell at one batch size (the first allocates the optimizer's state, the
second runs with it: the steady peak). It reports whether it fit and, where the framework counts them, its peak
memory (the most the step held) and its capacity (the most it could have held). The search runs in four steps.
  1. Probe two small batches (START_BATCHES). The line through their peaks is memory = fixed part (weights,
     gradients, optimizer state) + per-sample part x batch.
  2. Probe the estimate: the batch that line puts at (1 - MARGIN) of the capacity, on the safe side.
  3. While nothing has failed, go up. Each probe aims at that same point of the line, redrawn through the
     largest batch that fit (a long baseline ending near the edge), and goes at least a tolerance step beyond
     that batch. The step doubles while probes beyond the line's edge keep fitting.
  4. Once a batch has failed, aim just below the edge's memory, which is the capacity, or the line's peak at
     the smallest batch that failed where that is lower. Each aim that fails backs off twice as far. After the
     first aim that fits, bisect.
The search stops when the largest batch that fit (`best`) and the smallest that did not are within TOLERANCE.
The true largest batch is then below best x (1 + TOLERANCE), and is exactly `best` below 1 / TOLERANCE = 20.
Without peaks or a capacity (MLX on a CPU, say) there is no line: the search doubles, then bisects.

Where the framework recovers reliably from running out of memory (PyTorch on CUDA, eager steps), every probe
runs in one process. Elsewhere each probe runs in a process of its own (trainbench.runner.batch_probes). The
search needs no framework, only each probe's outcome, so the parent can replay the probes a process made and
go on from there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

START_BATCHES = (2, 8)  # the line's first two points: 8 samples make the per-sample part stand out from noise
MARGIN = 0.05  # aim at this share below the capacity: an estimate that fits, in spite of fragmentation
TOLERANCE = 0.05  # stop once the largest batch that fit is within this share of the smallest that did not
# A line is drawn only where the peak grew by this share between its two batches: less is allocator noise (a
# small MLP, or a CPU process's resident memory), and extrapolating noise would jump to the limit.
LEAST_GROWTH = 0.02


@dataclass(frozen=True)
class Probe:
    batch_size: int
    fits: bool
    reason: str | None = None  # why it did not fit
    peak_mb: float | None = None  # the most memory the probe's step held (the device's; a CPU: the process's)
    capacity_mb: float | None = None  # the memory it could have held


@dataclass(frozen=True)
class Search:
    best: int  # the largest batch that fit; 0 when not even 1 fits
    probes: list[Probe]  # in the order they ran
    estimate: int | None  # the first batch the memory line predicted (None: no line)


class SearchFailed(RuntimeError):
    """The search found nothing to run: a probe failed for a reason other than memory (so it cannot tell what
    fits), or not even batch 1 fits. `outcome`: the cell's (unavailable where the probe found no device);
    `memory`: whose memory ran out, where that was it (device or host)."""

    def __init__(self, reason: str, outcome: str = "failed", memory: str | None = None) -> None:
        super().__init__(reason)
        self.outcome, self.memory = outcome, memory


class _Unknown(Exception):  # noqa: N818  (control flow: a batch no probe has answered yet)
    def __init__(self, batch: int) -> None:
        super().__init__(batch)
        self.batch = batch


def next_batch(probes: list[Probe], limit: int) -> int | None:
    """The batch the search probes after `probes` (made in its order); None when they settle it."""
    answered = {p.batch_size: p for p in probes}

    def replay(batch: int) -> Probe:
        if batch not in answered:
            raise _Unknown(batch)
        return answered[batch]

    try:
        find_max_batch(replay, limit)
    except _Unknown as unknown:
        return unknown.batch
    return None


def find_max_batch(
    probe: Callable[[int], Probe], limit: int, tolerance: float = TOLERANCE, margin: float = MARGIN
) -> Search:
    """Largest b <= limit with probe(b).fits, within `tolerance` (see the module's docstring)."""
    probes: list[Probe] = []
    fits_up_to, fails_from = 0, limit + 1  # the bracket: the largest batch that fit, the smallest that did not

    def ask(batch: int) -> bool:
        nonlocal fits_up_to, fails_from
        result = probe(batch)
        probes.append(result)
        if result.fits:
            fits_up_to = max(fits_up_to, batch)
        else:
            fails_from = min(fails_from, batch)
        return result.fits

    for batch in START_BATCHES:
        if not ask(min(batch, limit)) or batch >= limit:
            break
    if fits_up_to == 0 and fails_from > 1:
        ask(1)
    if fits_up_to == 0:
        return Search(0, probes, None)
    estimate: int | None = None
    doublings = 0  # consecutive probes beyond the line's edge that fit: the line falls short
    backoff: float | None = tolerance / 2  # how far below the edge's memory to aim; None: bisect from now on
    while fits_up_to < limit and fails_from - 1 - fits_up_to > tolerance * fits_up_to:
        line = Line.through(probes)
        aimed = False
        if fails_from > limit:  # nothing has failed yet: go up
            least = fits_up_to + (math.floor(tolerance * fits_up_to) + 1) * 2**doublings
            if line is None:
                batch = min(limit, 2 * fits_up_to)
            else:
                target = line.batch_at(line.capacity_mb * (1 - margin))
                estimate = min(target, limit) if estimate is None else estimate
                batch = min(limit, max(target, least))
            beyond_line = line is not None and batch > line.batch_at(line.capacity_mb)
        else:  # aim just below where the line, or the smallest batch that failed, puts the edge
            aim = 0
            if line is not None and backoff is not None:
                edge_mb = min(line.capacity_mb, line.peak_mb(fails_from))
                aim = line.batch_at(edge_mb * (1 - backoff))
            aimed = fits_up_to < aim < fails_from
            batch = aim if aimed else _middle(fits_up_to, fails_from)
            beyond_line = False
        fit = ask(batch)
        doublings = doublings + 1 if fit and beyond_line else 0
        if aimed and backoff is not None:  # an aim that failed backs off twice as far; one that fit ends aiming
            backoff = None if fit else 2 * backoff
    return Search(fits_up_to, probes, estimate)


@dataclass(frozen=True)
class Line:
    """Peak memory against batch size: the line through the largest batch that fit with a peak counted and the
    largest such batch at most half as large (a long baseline ending near the edge, clear of the smallest
    batches' noise: workspaces, allocator rounding), and the capacity the latest probe reported."""

    batch: int
    at_mb: float
    per_sample_mb: float
    capacity_mb: float

    @classmethod
    def through(cls, probes: list[Probe]) -> Line | None:
        """None without two such batches, a capacity, or a peak that grew by LEAST_GROWTH from the smallest."""
        measured = sorted((p for p in probes if p.fits and p.peak_mb is not None), key=lambda p: p.batch_size)
        capacity = next((p.capacity_mb for p in reversed(probes) if p.capacity_mb), None)
        if len(measured) < 2 or capacity is None or 2 * measured[0].batch_size > measured[-1].batch_size:
            return None
        large = measured[-1]
        small = max((p for p in measured if 2 * p.batch_size <= large.batch_size), key=lambda p: p.batch_size)
        assert small.peak_mb is not None and large.peak_mb is not None
        first = measured[0].peak_mb
        assert first is not None
        if large.peak_mb - first < LEAST_GROWTH * first:
            return None
        per_sample = (large.peak_mb - small.peak_mb) / (large.batch_size - small.batch_size)
        return cls(large.batch_size, large.peak_mb, per_sample, capacity)

    def peak_mb(self, batch: int) -> float:
        return self.at_mb + self.per_sample_mb * (batch - self.batch)

    def batch_at(self, memory_mb: float) -> int:
        """The largest batch the line puts at or below memory_mb (at least 1)."""
        return max(1, self.batch + math.floor((memory_mb - self.at_mb) / self.per_sample_mb))


def _middle(fits_up_to: int, fails_from: int) -> int:
    """The bracket's midpoint: geometric when it spans more than a factor 4 (a first guess far too high)."""
    if fails_from > 4 * fits_up_to:
        return math.isqrt(fits_up_to * fails_from)
    return (fits_up_to + fails_from) // 2
