"""The one place trainbench reads a clock. Every framework times through it.

Accelerators run asynchronously: a step "returns" when its kernels are queued, not done. So every timed
region synchronizes the device before it starts and before it stops (CUDA, MPS, TensorFlow and JAX
adapters each supply `synchronize`). Warm-up (allocation, cuDNN autotuning, compilation) is timed on its
own and kept out of the steady-state figures. Logging happens outside timed regions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class Timer:
    """A synchronized wall-clock region: `with Timer(sync) as t: ...; t.seconds`."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self.synchronize()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.synchronize()
        self.seconds = time.perf_counter() - self._start


@dataclass(frozen=True)
class StepStats:
    """Summary of per-step durations: the benchmark task's step_time_ms_* metrics."""

    steps: int
    total_s: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    cv_pct: float  # coefficient of variation: how noisy the measurement was

    @classmethod
    def of(cls, durations_s: list[float]) -> StepStats:
        if not durations_s:
            raise ValueError("no steps were timed")
        ms = np.asarray(durations_s) * 1000.0
        mean = float(ms.mean())
        stdev = statistics.stdev(ms.tolist()) if len(ms) > 1 else 0.0
        p50, p90, p99 = (float(v) for v in np.percentile(ms, [50, 90, 99]))
        return cls(len(ms), float(sum(durations_s)), mean, p50, p90, p99, 100.0 * stdev / mean if mean else 0.0)

    def metrics(self) -> dict[str, float]:
        return {
            "step_time_ms_mean": self.mean_ms,
            "step_time_ms_p50": self.p50_ms,
            "step_time_ms_p90": self.p90_ms,
            "step_time_ms_p99": self.p99_ms,
            "step_time_cv_pct": self.cv_pct,
        }


def warm_up(
    step: Callable[[], None],
    synchronize: Callable[[], None],
    steps: int,
    settle_cv_pct: float | None = None,
    max_steps: int = 200,
    window: int = 5,
) -> tuple[float, int]:
    """Untimed-for-statistics steps before measuring; returns (seconds, steps run).

    With `settle_cv_pct`, warm-up runs at least `steps` and then goes on until the last `window` step times
    vary by less than that coefficient of variation (caches, clocks and autotuners have settled), or until
    `max_steps`. Each step is synchronized so its time is real.
    """
    durations: list[float] = []
    with Timer(synchronize) as whole:
        while len(durations) < max(steps, 0) or (
            settle_cv_pct is not None and len(durations) < max_steps and not _settled(durations, window, settle_cv_pct)
        ):
            with Timer(synchronize) as one:
                step()
            durations.append(one.seconds)
    return whole.seconds, len(durations)


def _settled(durations: list[float], window: int, cv_pct: float) -> bool:
    if len(durations) < window:
        return False
    recent = durations[-window:]
    mean = statistics.fmean(recent)
    return mean > 0 and 100.0 * statistics.stdev(recent) / mean < cv_pct


def timed_steps(step: Callable[[], None], synchronize: Callable[[], None], steps: int) -> list[float]:
    """Durations of `steps` calls, each bracketed by synchronizations."""
    durations = []
    for _ in range(steps):
        with Timer(synchronize) as timed:
            step()
        durations.append(timed.seconds)
    return durations


def drift_pct(durations: list[float]) -> float | None:
    """How much slower the last tenth of the steps ran than the first tenth, in percent (thermal throttling
    on a fanless laptop shows up here). None with fewer than 10 steps."""
    if len(durations) < 10:
        return None
    tenth = len(durations) // 10
    first, last = statistics.fmean(durations[:tenth]), statistics.fmean(durations[-tenth:])
    return 100.0 * (last - first) / first if first > 0 else None


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% confidence interval (Student's t); None for a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    from scipy.stats import t

    return mean, float(t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5)


def time_steps(
    step: Callable[[], None], synchronize: Callable[[], None], warmup_steps: int, steps: int
) -> tuple[float, StepStats]:
    """Run `warmup_steps` then `steps` calls of `step`; return (warm-up seconds, stats of the timed steps).

    Each timed step is bracketed by synchronizations so its duration is the device's, not the queue's.
    The cost of that (one idle gap per step) is microseconds against steps of milliseconds.
    """
    with Timer(synchronize) as warmup:
        for _ in range(warmup_steps):
            step()
    return warmup.seconds, StepStats.of(timed_steps(step, synchronize, steps))
