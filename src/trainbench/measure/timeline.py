"""Where a cell's time goes before its first step: `TRAINBENCH_TIMELINE=FILE` makes every process of a
sweep append `seconds-since-epoch pid phase` lines to FILE (benchmarks/cell_overhead.py reads them).
Off (and free) unless set."""

from __future__ import annotations

import os
import time


def mark(phase: str) -> None:
    path = os.environ.get("TRAINBENCH_TIMELINE")
    if path:
        with open(path, "a") as timeline:
            timeline.write(f"{time.time():.4f} {os.getpid()} {phase}\n")
