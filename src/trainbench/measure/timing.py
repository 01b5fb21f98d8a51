"""How trainbench times steps: synchronize, read the clock, run N steps, synchronize, read it again. Every task's timed
steps and task=train's epochs go through it (`time_block`, `measure`), for every framework. A few figures read a clock
of their own, each around one thing a block cannot hold: the epochs Keras runs inside its own `fit` (its adapter's
EpochClock) and the host's input preparation before them (`host_prep_time_s`), the time a loader-fed step waits for
its batch (the PyTorch and Keras trainers' `input_wait_s`), the energy meter's window (energy.EnergyMeter), the
device's first product (tasks.train.initialise_device) and the batch_size=max search (trainbench.sweep.cell_run).

Accelerators run asynchronously: a step "returns" when its kernels are queued, not done. Throughput therefore
comes from *blocks*: synchronize, read the clock, run N steps back to back, synchronize, read the clock.
Synchronizing the host around every step instead is not free: the GPU idles while the host waits, then while it
queues the next step, so a per-step synchronized figure understates fast launch-bound work, and more so the faster
the GPU.

Per-step percentiles come from a device clock (a `StepClock` the framework's device hands out: events recorded
between steps, read after the block) at no cost to the block. Where the device has none, because its framework
records no events or because its events are not free to record between steps, a separate short synchronized pass
gives the percentiles; it never feeds samples_per_s, and the tag trainbench.step_time_source says which way they
were taken and why (the device's `no_step_clock_why`). On a CPU the host clock is the device's: steps run
synchronously.

Warm-up (allocation, autotuning, compilation) is timed on its own; logging happens outside timed regions. The one
exception is the progress line a long task prints every 30 s (trainbench.progress.steps_with_lines), as a train
task prints its epochs: a clock read every few steps and one line (its cost: results/2026-11-28-progress-cost).

`measure` is that sequence once, for every task that times steps on resident data (task=benchmark's steps,
task=inference's requests and passes): warm up, pace the blocks, time them, take per-step times.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from trainbench.frameworks.base import StepClock

Step = Callable[[int], None]  # step(i): the i-th step of a block
SYNCHRONIZED_PASS = "synchronized pass"
# Outside a terminal, a line between timed blocks at most this often: long blocks get one each, short ones few.
BLOCK_LINES_EVERY_S = 10.0
# Plan.min_time_s never paces a block beyond this many steps: a pace read from a synchronize that does not wait
# would otherwise ask for millions.
MAX_PACED_STEPS = 10_000


def indexed(call: Callable[[], object]) -> Step:
    """A step that takes no index (a train step, a forward pass, a product) as a Step."""

    def step(_: int) -> None:
        call()

    return step


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


class HostClock:
    """Step timestamps from the host clock: exact only where the device runs synchronously (a CPU)."""

    source = "host clock (synchronous device)"

    def __init__(self) -> None:
        self._marks: list[float] = []

    def reserve(self, marks: int) -> None:
        pass  # a float per mark: nothing worth preparing

    def mark(self) -> None:
        self._marks.append(time.perf_counter())

    def durations_s(self) -> list[float]:
        marks, self._marks = self._marks, []
        return [later - earlier for earlier, later in zip(marks, marks[1:], strict=False)]


@dataclass(frozen=True)
class Block:
    """N steps timed together: `seconds` between synchronizations at both ends; `step_times_s` from the
    device clock (None when there was none)."""

    seconds: float
    steps: int
    step_times_s: list[float] | None


def time_block(step: Step, steps: int, synchronize: Callable[[], None], clock: StepClock | None = None) -> Block:
    """Run step(0) ... step(steps-1) back to back between one synchronization at each end."""
    if clock is not None:
        clock.reserve(steps + 1)
    synchronize()
    start = time.perf_counter()
    if clock is not None:
        clock.mark()
        for index in range(steps):
            step(index)
            clock.mark()
    else:
        for index in range(steps):
            step(index)
    synchronize()
    seconds = time.perf_counter() - start
    return Block(seconds, steps, clock.durations_s() if clock is not None else None)


def synchronized_pass_source(count: int, what: str, no_clock_why: str) -> str:
    """The step_time_source (latency_source) of percentiles from a synchronized pass of `count` `what`, taken
    because the device had no step clock, for the reason `no_clock_why`."""
    return f"{SYNCHRONIZED_PASS} of {count} {what} ({no_clock_why})"


def synchronized_step_times(step: Step, steps: int, synchronize: Callable[[], None]) -> list[float]:
    """Each step bracketed by synchronizations: per-step times where no device clock exists. Slower than
    the steps run in a block; use for percentiles only, never for throughput."""
    durations = []
    for index in range(steps):
        synchronize()
        start = time.perf_counter()
        step(index)
        synchronize()
        durations.append(time.perf_counter() - start)
    return durations


@dataclass(frozen=True)
class StepStats:
    """Summary of per-step durations: the step_time_ms_* metrics."""

    steps: int
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
        return cls(len(ms), mean, p50, p90, p99, 100.0 * stdev / mean if mean else 0.0)

    def metrics(self, prefix: str = "step_time") -> dict[str, float]:
        return {
            f"{prefix}_ms_mean": self.mean_ms,
            f"{prefix}_ms_p50": self.p50_ms,
            f"{prefix}_ms_p90": self.p90_ms,
            f"{prefix}_ms_p99": self.p99_ms,
            f"{prefix}_cv_pct": self.cv_pct,
        }


@dataclass(frozen=True)
class WarmUp:
    seconds: float
    steps: int
    first_step_s: float  # the step that compiles, autotunes and allocates


def warm_up(
    step: Step,
    synchronize: Callable[[], None],
    steps: int,
    settle_cv_pct: float | None = None,
    max_steps: int = 200,
    window: int = 5,
) -> WarmUp:
    """Steps run before measuring (not counted anywhere but warmup_time_s).

    With `settle_cv_pct`, warm-up runs at least `steps` and then goes on until the last `window` step times
    vary by less than that coefficient of variation (caches, clocks and autotuners have settled), or until
    `max_steps`. Warm-up steps are synchronized one by one: their times decide when to stop.
    """
    durations: list[float] = []
    start = time.perf_counter()
    synchronize()
    while len(durations) < max(steps, 1 if settle_cv_pct else 0) or (
        settle_cv_pct is not None and len(durations) < max_steps and not _settled(durations, window, settle_cv_pct)
    ):
        began = time.perf_counter()
        step(len(durations))
        synchronize()
        durations.append(time.perf_counter() - began)
    return WarmUp(time.perf_counter() - start, len(durations), durations[0] if durations else 0.0)


def compile_time_s(warmup: WarmUp, steady_step_s: float) -> float:
    """What the warm-up cost beyond its steps at steady speed: compilation, autotuning, first allocations."""
    return max(0.0, warmup.seconds - warmup.steps * steady_step_s)


def _settled(durations: list[float], window: int, cv_pct: float) -> bool:
    if len(durations) < window:
        return False
    recent = durations[-window:]
    mean = statistics.fmean(recent)
    return mean > 0 and 100.0 * statistics.stdev(recent) / mean < cv_pct


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


def paced_steps(step: Step, synchronize: Callable[[], None], steps: int, repeats: int, min_time_s: float | None) -> int:
    """Steps per block: `steps`, or more where `min_time_s` asks for longer blocks (all `repeats` of them together)
    than a probe block of `steps` (untimed: one more warm-up) says they would last. A probe, not the warm-up's
    pace: warm-up steps are synchronized one by one, and the first few of them still allocate and autotune, so
    blocks paced from them fall short of what was asked (results/2026-11-28-measure-notes)."""
    if min_time_s is None:
        return steps
    probe = time_block(step, steps, synchronize)
    if probe.seconds <= 0:
        return MAX_PACED_STEPS
    needed = min_time_s * probe.steps / (repeats * probe.seconds)
    return max(steps, min(MAX_PACED_STEPS, math.ceil(needed)))


@dataclass(frozen=True)
class Plan:
    """What `measure` runs."""

    warmup_steps: int  # untimed steps first (with settle_cv_pct: at least these)
    steps: int  # timed steps per block (more where min_time_s asks)
    repeats: int = 1  # blocks
    settle_cv_pct: float | None = None  # keep warming up until the last steps vary by less (see warm_up)
    max_warmup_steps: int = 200
    min_time_s: float | None = None  # more steps per block, so that the blocks together last this long
    # Where no device clock times the blocks' steps: a synchronized pass of this many steps after the blocks
    # (no more than a block's) gives the per-step times; 0: none are wanted.
    pass_steps: int = 0
    pass_what: str = "steps"  # what the pass's steps are, in its source: "requests"
    # False: only the per-step times are wanted (latency); the blocks then run only to carry the device clock,
    # and without one the synchronized pass is all that is timed.
    throughput: bool = True


@dataclass(frozen=True)
class Measurement:
    """What `measure` took: the warm-up, the timed blocks, and the per-step times with where they came from."""

    warm: WarmUp
    blocks: list[Block]
    step_times_s: list[float]
    step_time_source: str | None  # None: no per-step times were taken
    steps_per_block: int

    @property
    def timed_s(self) -> float:
        return sum(block.seconds for block in self.blocks)

    @property
    def timed_steps(self) -> int:
        return sum(block.steps for block in self.blocks)

    def steady_step_s(self) -> float:
        """A step's time at steady speed: the blocks' time over their steps."""
        return self.timed_s / self.timed_steps

    def samples_per_s(self, samples_per_step: int) -> tuple[float, float | None]:
        """The mean of the blocks' rates, and the half-width of its 95% CI (None for one block)."""
        return mean_ci95([samples_per_step * block.steps / block.seconds for block in self.blocks])

    def figures(self, samples_per_step: int) -> dict[str, float]:
        """warmup_time_s, compile_time_s, total_time_s (the warm-up and the blocks) and samples_per_s."""
        return {
            "warmup_time_s": self.warm.seconds,
            "compile_time_s": compile_time_s(self.warm, self.steady_step_s()),
            "total_time_s": self.warm.seconds + self.timed_s,
            "samples_per_s": self.samples_per_s(samples_per_step)[0],
        }


def warm_up_text(plan: Plan) -> str:
    """The warm-up's line: how many steps, and that its first also compiles and allocates."""
    count = f"{plan.warmup_steps} step{'s' if plan.warmup_steps != 1 else ''}"
    if plan.settle_cv_pct:
        count += (
            f", then on until step times vary by less than {plan.settle_cv_pct:g}% (at most {plan.max_warmup_steps})"
        )
    return f"warming up: {count} (the first also compiles and allocates)"


def measure(
    step: Step,
    synchronize: Callable[[], None],
    plan: Plan,
    clock: StepClock | None = None,
    meter: AbstractContextManager[object] | None = None,
    no_clock_why: str = "no device events",
    before_blocks: Callable[[WarmUp, int], None] | None = None,
) -> Measurement:
    """The measurement sequence of a step on resident data:
    1. the warm-up, synchronized step by step and timed on its own (warm_up);
    2. steps per block: plan.steps, or more where plan.min_time_s asks (paced_steps);
    3. before_blocks(warm-up, steps per block): what a task does before its figures (a progress line, a check);
    4. plan.repeats blocks, inside `meter` (an energy counter covers the blocks alone), `clock` recording
       between their steps where there is one;
    5. the per-step times: the clock's, else a synchronized pass of plan.pass_steps after the blocks (never
       part of samples_per_s); the source says which and, for a pass, why (`no_clock_why`: the device's)."""
    from trainbench import progress

    progress.phase(warm_up_text(plan))
    warm = warm_up(step, synchronize, plan.warmup_steps, plan.settle_cv_pct, plan.max_warmup_steps)
    if plan.min_time_s is not None:
        progress.phase(f"pacing the blocks (task.min_time_s={plan.min_time_s:g}): one untimed block of {plan.steps}")
    steps = paced_steps(step, synchronize, plan.steps, plan.repeats, plan.min_time_s)
    if before_blocks is not None:
        before_blocks(warm, steps)
    blocks: list[Block] = []
    if plan.throughput or clock is not None:
        # Off a terminal, a line between blocks only where they are long: short ones would flood a log.
        with (
            meter if meter is not None else nullcontext(),
            progress.Bar(plan.repeats, "timed blocks", "block", BLOCK_LINES_EVERY_S, lines_on_terminal=False) as bar,
        ):
            for repeat in range(1, plan.repeats + 1):
                blocks.append(time_block(step, steps, synchronize, clock))
                if repeat < plan.repeats:
                    bar.done(f"  block {repeat}/{plan.repeats}: {blocks[-1].seconds:.2f} s for {steps} steps")
    times: list[float] = []
    source: str | None = None
    if clock is not None:
        times = [duration for block in blocks for duration in (block.step_times_s or [])]
        source = clock.source
    elif plan.pass_steps:
        progress.phase(f"per-step times: {min(steps, plan.pass_steps)} more steps, each synchronized on its own")
        times = synchronized_step_times(step, min(steps, plan.pass_steps), synchronize)
        source = synchronized_pass_source(len(times), plan.pass_what, no_clock_why)
    return Measurement(warm, blocks, times, source, steps)
