"""Where a cell's time goes before its first step: `TRAINBENCH_TIMELINE=FILE` makes every process of a
sweep append `seconds-since-epoch pid cpu-seconds phase` lines to FILE, cpu-seconds being the process's own CPU
time so far (user and system), which a loaded machine hardly changes (benchmarks/cell_overhead.py and
benchmarks/start_time.py read them). Off (and free) unless set."""

from __future__ import annotations

import os
import time


def mark(phase: str) -> None:
    path = os.environ.get("TRAINBENCH_TIMELINE")
    if path:
        with open(path, "a") as timeline:
            cpu = os.times()
            timeline.write(f"{time.time():.4f} {os.getpid()} {cpu.user + cpu.system:.3f} {phase}\n")
