"""Progress a person can follow: a bar on a terminal, one plain line per epoch in logs (CI, files)."""

from __future__ import annotations

import sys
from typing import Any


def interactive() -> bool:
    return sys.stdout.isatty()


class EpochsBar:
    """A bar over a cell's epochs on a terminal (`with EpochsBar(...) as bar:`); absent elsewhere (logs get the
    epoch lines alone).

    It moves between epochs, never within one: updating it from the steps, even as a counter with tqdm's
    redraws at most every 0.1 s, would be host work inside the timed epoch that the same cell without a
    terminal does not do, so a figure would depend on where its output went.
    """

    def __init__(self, epochs: int, description: str) -> None:
        self._bar: Any = None
        if interactive():
            from tqdm import tqdm

            tqdm.monitor_interval = 0  # no monitor thread waking up inside the timed epochs
            # Redrawn at every update: updates come once an epoch, outside the timing.
            self._bar = tqdm(total=epochs, desc=description, unit="epoch", leave=False, file=sys.stdout, mininterval=0)

    def epoch_done(self, text: str) -> None:
        """After an epoch's timed pass and its validation: print its line above the bar, then advance the bar."""
        if self._bar is None:
            line(text)
            return
        self._bar.write(text, file=sys.stdout)
        self._bar.update()

    def __enter__(self) -> EpochsBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def line(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
