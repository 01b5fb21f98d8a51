"""batch_size=max: the largest batch that fits, found by doubling then bisecting.

Each probe is one short benchmark of the cell (two warm-up steps, so optimizer state and allocator caches
exist, then one timed step) in a process of its own,
so an out-of-memory probe cannot leave a fragmented allocator or a wedged driver behind for the next one.
The search itself needs no framework: it only sees each probe's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    batch_size: int
    fits: bool
    reason: str | None = None  # why it did not fit, or why the search had to stop


class SearchFailed(RuntimeError):
    """A probe failed for a reason other than memory: the search cannot tell what fits."""


def find_max_batch(probe: Callable[[int], Probe], limit: int) -> tuple[int, list[Probe]]:
    """Largest b <= limit with probe(b).fits; 0 when not even 1 fits. Returns (b, every probe in order)."""
    probes: list[Probe] = []

    def fits(batch: int) -> bool:
        result = probe(batch)
        probes.append(result)
        return result.fits

    largest_fit, batch = 0, 1
    while batch <= limit and fits(batch):
        largest_fit, batch = batch, batch * 2
    if largest_fit == 0:
        return 0, probes
    smallest_fail = min(batch, limit + 1)
    while smallest_fail - largest_fit > 1:
        middle = (largest_fit + smallest_fail) // 2
        if fits(middle):
            largest_fit = middle
        else:
            smallest_fail = middle
    return largest_fit, probes
