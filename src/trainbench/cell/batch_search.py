"""batch_size=max: the largest batch that fits with headroom, from a line of memory against batch, checked by probes.

A probe is two training steps of the cell at one batch size (the first allocates the optimizer's state, the
second runs with it: the steady peak). It reports whether it fit and, where the framework counts them, its peak
memory (the most the step held) and its capacity (the most it could have held).

The answer is the largest batch whose probe fit with a peak at most (1 - HEADROOM) of the capacity: `acceptable`.
A probe that fit at the very edge leaves the cell nothing for what it does beyond two steps in a fresh process
(on an H100, BERT-Large's probe at 383 peaked at 78.4 of 78.4 GiB, and the cell at 383 then asked for 766 MiB
more and ran out). 5% is 3.9 GiB there, five times that, for at most 5% of the batch. A batch that fit over the
headroom counts as too large, like one that did not fit. The search runs in four steps.
  1. Probe two small batches (START_BATCHES).
  2. Until a line can be drawn, jump from the largest acceptable batch b to b x target / peak(b) (target: the
     capacity less the headroom), at least 2b: the batch that would reach the target if all of b's peak grew
     with the batch. Memory is a fixed part (weights, optimizer state, workspaces) plus a per-sample part, so
     peak(b) / b is at least the per-sample part and the jump lands at or under the target.
  3. The line runs through the two largest batches that fit whose peaks differ by at least LINE_SPREAD of the
     capacity: the largest, and the largest whose peak is that much lower. Between them the fixed part cancels
     and the slope is the activations'. (From batches 2 and 8 alone, BERT-Large's peak grew 0.3 GiB, mostly
     workspaces and rounding: a slope of 0.05 GiB a sample against the true 0.2, an estimate 3.5 times too high.)
     It is redrawn after every probe that fits. Each probe aims where the line reaches the target, and
       - at least a tolerance step past the largest acceptable batch (the step doubles while such probes keep
         being acceptable: the line falls short), since that probe, if too large, ends the search;
       - once some batch was too large, at most the geometric midpoint between the largest acceptable batch and
         the smallest too large one: the tolerance is a ratio, so the bracket is halved as a ratio, and a line
         that overshot is never walked down in small steps.
  4. The search stops when the largest acceptable batch (`best`) and the smallest too large one are within
     TOLERANCE: the largest acceptable batch is then below best x (1 + TOLERANCE), and exactly `best` below
     1 / TOLERANCE = 20.
Without peaks or a capacity (MLX on a CPU, ranks of their own) there is no line and no headroom: the search
doubles, then bisects. Where not even batch 1 is acceptable but it fits, the answer is 1.

Where the framework recovers reliably from running out of memory (PyTorch on CUDA, eager steps), every probe
runs in one process. Elsewhere each probe runs in a process of its own (trainbench.cell.batch_probes). The
search needs no framework, only each probe's outcome, so the parent can replay the probes a process made and
go on from there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

START_BATCHES = (2, 8)  # two cheap probes: whether anything fits, and the peak to jump from
HEADROOM = 0.05  # the answer's peak leaves this share of the capacity free (the module's docstring says why)
TOLERANCE = 0.05  # stop once the largest acceptable batch is within this share of the smallest too large one
# A line is drawn only between peaks this share of the capacity apart: closer, the fixed part's small-batch
# flatness (workspaces, allocator rounding) and noise dominate the difference, and extrapolating it overshoots.
LINE_SPREAD = 0.10


@dataclass(frozen=True)
class Probe:
    batch_size: int
    fits: bool
    reason: str | None = None  # why it did not fit
    peak_mb: float | None = None  # the most memory the probe's step held (the device's; a CPU: the process's)
    capacity_mb: float | None = None  # the memory it could have held


def acceptable(probe: Probe, headroom: float = HEADROOM) -> bool:
    """It fit, with a peak at most (1 - headroom) of its capacity where both are known."""
    if not probe.fits:
        return False
    return probe.peak_mb is None or not probe.capacity_mb or probe.peak_mb <= (1 - headroom) * probe.capacity_mb


@dataclass(frozen=True)
class Search:
    best: int  # the largest acceptable batch (1 where only batch 1 fits, over the headroom); 0 when nothing fits
    probes: list[Probe]  # in the order they ran
    estimate: int | None  # the first batch the memory line put at the target (None: no line)

    @property
    def chosen(self) -> Probe | None:
        """The probe of the batch found (its peak and capacity), None when nothing fits."""
        return next((p for p in self.probes if p.batch_size == self.best), None)


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
    probe: Callable[[int], Probe], limit: int, tolerance: float = TOLERANCE, headroom: float = HEADROOM
) -> Search:
    """Largest b <= limit whose probe(b) is acceptable, within `tolerance` (see the module's docstring)."""
    probes: list[Probe] = []
    # the bracket: the largest acceptable batch, the smallest too large one (failed, or fit over the headroom)
    good, too_large = 0, limit + 1

    def ask(batch: int) -> bool:
        nonlocal good, too_large
        result = probe(batch)
        probes.append(result)
        if acceptable(result, headroom):
            good = max(good, batch)
        else:
            too_large = min(too_large, batch)
        return acceptable(result, headroom)

    for batch in START_BATCHES:
        if not ask(min(batch, limit)) or batch >= limit:
            break
    if good == 0 and too_large > 1:
        ask(1)
    if good == 0:
        fits_at_1 = any(p.fits and p.batch_size == 1 for p in probes)
        return Search(1 if fits_at_1 else 0, probes, None)
    estimate: int | None = None
    doublings = 0  # consecutive acceptable probes a tolerance step past the line's aim: the line falls short
    while good < limit and too_large - 1 - good > tolerance * good:
        line = Line.through(probes)
        step = good + (math.floor(tolerance * good) + 1) * 2**doublings
        past_aim = False
        if line is None:
            batch = _jump(probes, good, headroom) if too_large > limit else _middle(good, too_large)
        else:
            aim = line.batch_at(line.capacity_mb * (1 - headroom))
            estimate = aim if estimate is None else estimate
            past_aim = step > aim
            batch = max(aim, step)
            if too_large <= limit:
                batch = min(batch, _middle(good, too_large))
        batch = max(good + 1, min(batch, limit, too_large - 1))
        fit = ask(batch)
        doublings = doublings + 1 if fit and past_aim and too_large > limit else 0
    return Search(good, probes, estimate)


def _jump(probes: list[Probe], good: int, headroom: float) -> int:
    """Up from the largest acceptable batch with no line yet: to where its peak, grown in proportion to the
    batch, would reach the target (a fixed part makes that an under-estimate), and at least twice as far."""
    at = next(p for p in probes if p.batch_size == good)
    if at.peak_mb and at.capacity_mb:
        return max(2 * good, math.floor(good * (1 - headroom) * at.capacity_mb / at.peak_mb))
    return 2 * good


@dataclass(frozen=True)
class Line:
    """Peak memory against batch size, through the largest batch that fit with a peak counted and the largest
    whose peak is at least LINE_SPREAD of the capacity lower (the module's docstring says why), with the capacity
    the latest probe reported."""

    batch: int
    at_mb: float
    per_sample_mb: float
    capacity_mb: float

    @classmethod
    def through(cls, probes: list[Probe]) -> Line | None:
        """None without two such batches or a capacity."""
        measured = [p for p in probes if p.fits and p.peak_mb is not None]
        capacity = next((p.capacity_mb for p in reversed(probes) if p.capacity_mb), None)
        if not measured or capacity is None:
            return None
        large = max(measured, key=lambda p: p.batch_size)
        assert large.peak_mb is not None
        apart = [
            p
            for p in measured
            if p.batch_size < large.batch_size and p.peak_mb is not None
            if p.peak_mb <= large.peak_mb - LINE_SPREAD * capacity
        ]
        if not apart:
            return None
        small = max(apart, key=lambda p: p.batch_size)
        assert small.peak_mb is not None
        per_sample = (large.peak_mb - small.peak_mb) / (large.batch_size - small.batch_size)
        return cls(large.batch_size, large.peak_mb, per_sample, capacity)

    def peak_mb(self, batch: int) -> float:
        return self.at_mb + self.per_sample_mb * (batch - self.batch)

    def batch_at(self, memory_mb: float) -> int:
        """The largest batch the line puts at or below memory_mb (at least 1)."""
        return max(1, self.batch + math.floor((memory_mb - self.at_mb) / self.per_sample_mb))


def _middle(good: int, too_large: int) -> int:
    """The bracket's geometric midpoint (the tolerance is a ratio), strictly inside it where it has an inside."""
    return min(too_large - 1, max(good + 1, math.isqrt(good * too_large)))
