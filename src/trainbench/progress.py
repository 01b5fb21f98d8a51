"""Progress a person can follow: a bar on a terminal, one plain line per epoch in logs (CI, files)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def interactive() -> bool:
    return sys.stdout.isatty()


class EpochBar:
    """A per-epoch progress bar over batches; absent when stdout is not a terminal.

    On a terminal each step also updates the bar (a counter increment; tqdm redraws at most every 0.1 s),
    so it may sit inside a timed epoch; elsewhere the step runs unwrapped and the plain-text line is
    printed by `line` after the epoch, outside the timing.
    """

    def __init__(self, total: int, description: str) -> None:
        self._bar: Any = None
        if interactive():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=description, unit="batch", leave=False, file=sys.stdout)

    def wrap(self, step: Callable[[int], None]) -> Callable[[int], None]:
        bar = self._bar
        if bar is None:
            return step

        def step_and_count(index: int) -> None:
            step(index)
            bar.update()

        return step_and_count

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def line(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
