"""The timing module: synchronize around every timed region, warm-up and compilation kept out of the timed
steps, robust statistics; and on a real PyTorch cell, compile time stays out of samples_per_s."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import invoke
from trainbench.measure.timing import (
    MAX_PACED_STEPS,
    Block,
    HostClock,
    Plan,
    StepStats,
    Timer,
    WarmUp,
    compile_time_s,
    drift_pct,
    mean_ci95,
    measure,
    paced_steps,
    synchronized_step_times,
    time_block,
    warm_up,
)


class Recorder:
    """A step and a synchronize that write down the order they were called in."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def step(self, index: int) -> None:
        self.events.append(f"step {index}")

    def sync(self) -> None:
        self.events.append("sync")


def test_timer_synchronizes_before_start_and_before_stop() -> None:
    events: list[str] = []
    with Timer(lambda: events.append("sync")) as timer:
        events.append("work")
        time.sleep(0.01)
    assert events == ["sync", "work", "sync"]
    assert timer.seconds >= 0.01


def test_a_block_synchronizes_once_at_each_end_and_runs_every_step_in_order() -> None:
    calls = Recorder()
    block = time_block(calls.step, 4, calls.sync)
    assert calls.events == ["sync", "step 0", "step 1", "step 2", "step 3", "sync"]
    assert block.steps == 4 and block.seconds > 0
    assert block.step_times_s is None  # no clock, no per-step figures


def test_a_block_with_a_clock_times_each_step_without_synchronizing_between_them() -> None:
    step_seconds = (0.01, 0.03, 0.05)
    calls = Recorder()

    def step(index: int) -> None:
        calls.step(index)
        # Each step's own time must come back. 20 ms apart: a loaded 2-core host once delayed a 2 ms sleep by 4 ms.
        time.sleep(step_seconds[index])

    block = time_block(step, 3, calls.sync, HostClock())
    assert calls.events.count("sync") == 2
    assert block.step_times_s is not None and len(block.step_times_s) == 3
    assert block.step_times_s == sorted(block.step_times_s)
    assert all(t >= step_seconds[i] for i, t in enumerate(block.step_times_s))
    assert sum(block.step_times_s) <= block.seconds


class HostEvent:
    """torch.cuda.Event's interface on the host clock (no GPU here), counting how many were created."""

    created = 0

    def __init__(self, enable_timing: bool) -> None:
        HostEvent.created += 1
        self.at: float | None = None

    def record(self) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, later: HostEvent) -> float:
        assert self.at is not None and later.at is not None
        return (later.at - self.at) * 1000.0  # milliseconds, as CUDA reports


def test_device_events_are_made_before_the_block_and_reused_by_the_next() -> None:
    """Inside a block a mark only records an event: creating one there is host work a bare loop doesn't do."""
    from trainbench.frameworks.pytorch.adapter import EventClock

    clock = EventClock(HostEvent, "host events")
    created_in_block = []

    def step(index: int) -> None:
        created_in_block.append(HostEvent.created)
        time.sleep(0.002 * (index + 1))

    HostEvent.created = 0
    first = time_block(step, 3, lambda: None, clock)
    second = time_block(step, 3, lambda: None, clock)
    assert HostEvent.created == 4 and set(created_in_block) == {4}  # steps + 1 events, made once, before
    for block in (first, second):
        assert block.step_times_s is not None and len(block.step_times_s) == 3
        assert all(t >= 0.002 * (i + 1) for i, t in enumerate(block.step_times_s))
    longer = time_block(step, 5, lambda: None, clock)  # a longer block adds only what it lacks
    assert HostEvent.created == 6 and longer.step_times_s is not None and len(longer.step_times_s) == 5


def test_synchronized_step_times_bracket_every_step() -> None:
    calls = Recorder()
    durations = synchronized_step_times(calls.step, 3, calls.sync)
    assert calls.events == ["sync", "step 0", "sync", "sync", "step 1", "sync", "sync", "step 2", "sync"]
    assert len(durations) == 3


def test_warm_up_runs_its_steps_synchronized_and_measures_the_first_one_apart() -> None:
    calls = Recorder()
    first_s = 0.05

    def step(index: int) -> None:
        calls.step(index)
        time.sleep(first_s if index == 0 else 0.001)  # the first step "compiles"

    warm = warm_up(step, calls.sync, steps=3)
    assert warm.steps == 3
    assert [e for e in calls.events if e.startswith("step")] == ["step 0", "step 1", "step 2"]
    assert calls.events.count("sync") == 1 + 3  # once before, then after every step
    assert warm.first_step_s >= first_s
    assert warm.seconds >= warm.first_step_s + 2 * 0.001


def test_warm_up_goes_on_until_step_times_settle() -> None:
    schedule = [0.03, 0.02, 0.01, 0.01]  # slow at first, then steady at 3 ms

    def step(index: int) -> None:
        time.sleep(schedule[index] if index < len(schedule) else 0.003)

    warm = warm_up(step, lambda: None, steps=1, settle_cv_pct=20.0, max_steps=100, window=5)
    # Settled once the last five are the steady ones: not before step 9, and (with sleep's jitter) well before 100.
    assert len(schedule) + 5 <= warm.steps < 100


def test_warm_up_stops_at_max_steps_when_times_never_settle() -> None:
    warm = warm_up(
        lambda i: time.sleep(0.001 * (1 + i % 2)), lambda: None, steps=1, settle_cv_pct=1.0, max_steps=12, window=5
    )
    assert warm.steps == 12


def test_compile_time_is_what_warm_up_cost_beyond_steady_steps() -> None:
    steady_s, first_s = 0.002, 0.1

    def step(index: int) -> None:
        time.sleep(first_s if index == 0 else steady_s)

    warm = warm_up(step, lambda: None, steps=4)
    compiled = compile_time_s(warm, steady_s)
    assert compiled == pytest.approx(first_s - steady_s, abs=0.03)
    # A warm-up no slower than steady steps compiled nothing: never a negative figure.
    assert compile_time_s(WarmUp(seconds=0.01, steps=5, first_step_s=0.002), steady_step_s=0.003) == 0.0


def test_block_timing_and_a_synchronized_pass_agree_on_real_work() -> None:
    """On a CPU the host clock is the device's: per-step times from a block (HostClock) and from a synchronized
    pass, and the block's own seconds, describe the same ~5 ms step."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: one thread keeps the step's work steady
    try:
        a = torch.randn(128, 128)
        product_s = min(_seconds_of(20, lambda: a @ a) / 20 for _ in range(5))  # the fastest: a busy host only slows
        repeats = max(1, round(0.005 / product_s))

        def step(index: int) -> None:
            for _ in range(repeats):
                a @ a

        blocks: list[Block] = []
        passes: list[list[float]] = []
        for pair in range(8):  # interleaved, each way first in turn, so load elsewhere hits both ways alike
            if pair % 2:
                passes.append(synchronized_step_times(step, 20, lambda: None))
            blocks.append(time_block(step, 20, lambda: None, HostClock()))
            if not pair % 2:
                passes.append(synchronized_step_times(step, 20, lambda: None))
    finally:
        torch.set_num_threads(threads)
    reference = float(np.median([t for steps in passes for t in steps]))
    assert 0.001 < reference < 0.05  # real work, not a no-op
    assert all(len(block.step_times_s or []) == 20 for block in blocks)
    # Each block against the pass beside it (tests run side by side: the load on the host changes between pairs,
    # far less within one), and the median of those ratios: one preemption moves one pair, not the verdict.
    step_ratios = [
        np.median(block.step_times_s or []) / np.median(steps) for block, steps in zip(blocks, passes, strict=True)
    ]
    block_ratios = [block.seconds / block.steps / np.mean(steps) for block, steps in zip(blocks, passes, strict=True)]
    assert float(np.median(step_ratios)) == pytest.approx(1.0, rel=0.15)
    assert float(np.median(block_ratios)) == pytest.approx(1.0, rel=0.15)


class Meter:
    """An energy meter that writes down where its region begins and ends."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __enter__(self) -> Meter:
        self.events.append("meter on")
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("meter off")


def test_a_measurement_warms_up_then_times_its_blocks_in_the_meter_and_its_percentile_pass_after() -> None:
    recorder = Recorder()
    events = recorder.events
    plan = Plan(warmup_steps=2, steps=3, repeats=2, pass_steps=2)
    measured = measure(
        recorder.step,
        recorder.sync,
        plan,
        None,
        Meter(events),
        "its events would slow the block",  # the device's no_step_clock_why
        lambda warm, steps: events.append("ready"),
    )
    block = ["sync", "step 0", "step 1", "step 2", "sync"]
    assert events == [
        *["sync", "step 0", "sync", "step 1", "sync"],  # warm-up, step by step
        "ready",
        *["meter on", *block, *block, "meter off"],  # the energy figure covers the timed blocks alone
        *["sync", "step 0", "sync", "sync", "step 1", "sync"],  # per-step times: no device clock, so a pass
    ]
    assert measured.timed_steps == 6 and len(measured.step_times_s) == 2
    assert measured.step_time_source == "synchronized pass of 2 steps (its events would slow the block)"
    samples_per_s, ci95 = measured.samples_per_s(10)
    assert samples_per_s == pytest.approx(np.mean([10 * 3 / b.seconds for b in measured.blocks]))
    assert ci95 is not None
    assert set(measured.figures(10)) == {"warmup_time_s", "compile_time_s", "total_time_s", "samples_per_s"}


def test_latency_alone_times_a_block_only_to_carry_a_device_clock() -> None:
    recorder = Recorder()
    plan = Plan(warmup_steps=0, steps=3, pass_steps=3, pass_what="requests", throughput=False)
    measured = measure(recorder.step, recorder.sync, plan)
    assert measured.blocks == []
    assert recorder.events == ["sync"] + ["sync", "step 0", "sync", "sync", "step 1", "sync", "sync", "step 2", "sync"]
    assert measured.step_time_source == "synchronized pass of 3 requests (no device events)"
    with_clock = measure(Recorder().step, lambda: None, plan, HostClock())
    assert [b.steps for b in with_clock.blocks] == [3] and len(with_clock.step_times_s) == 3


def test_min_time_paces_the_blocks_to_last_that_long_together() -> None:
    def ten_ms(_: int) -> None:
        time.sleep(0.01)

    steps = paced_steps(ten_ms, lambda: None, steps=3, repeats=2, min_time_s=0.3)
    assert 3 < steps <= 15  # 0.3 s over 2 blocks of steps of 10 ms or more (a busy host sleeps longer)
    measured = measure(ten_ms, lambda: None, Plan(warmup_steps=0, steps=3, repeats=2, min_time_s=0.3))
    assert measured.steps_per_block > 3
    assert measured.timed_s >= 0.3 / 2  # paced by a probe block: a hiccup there shortens them, not this much
    assert paced_steps(ten_ms, lambda: None, steps=3, repeats=1, min_time_s=None) == 3  # no probe without it
    assert paced_steps(lambda _: None, lambda: None, steps=3, repeats=1, min_time_s=3600) == MAX_PACED_STEPS


def test_step_stats_percentiles_expose_a_slow_outlier() -> None:
    durations = [0.010] * 99 + [0.110]
    stats = StepStats.of(durations)
    assert stats.steps == 100
    assert stats.p50_ms == pytest.approx(10.0)
    assert stats.mean_ms == pytest.approx(11.0)
    assert stats.p99_ms > stats.p90_ms == pytest.approx(10.0)
    assert stats.cv_pct == pytest.approx(100 * np.std(np.array(durations) * 1000, ddof=1) / 11.0)
    assert stats.metrics()["step_time_ms_p99"] == stats.p99_ms


def test_step_stats_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        StepStats.of([])


def test_drift_compares_the_last_tenth_with_the_first() -> None:
    assert drift_pct([0.01] * 9) is None  # too few steps to say
    assert drift_pct([0.010] * 10 + [0.011] * 80 + [0.012] * 10) == pytest.approx(20.0)
    assert drift_pct([0.010] * 100) == pytest.approx(0.0)


def test_mean_ci95_is_students_t_and_absent_for_one_value() -> None:
    assert mean_ci95([5.0]) == (5.0, None)
    mean, half_width = mean_ci95([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half_width == pytest.approx(4.302653 * 1.0 / 3**0.5)  # t(0.975, 2 dof) x stdev / sqrt(n)
    assert mean_ci95([2.0, 2.0, 2.0])[1] == pytest.approx(0.0)


# -- a real cell ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_compile_time_is_logged_and_kept_out_of_samples_per_s(tmp_path: Path) -> None:
    """torch.compile on a CPU: the compilation happens in warm-up and is reported as compile_time_s; the timed
    steps run the compiled model, so samples_per_s is the batch over the mean timed step (within 10%) and
    not dragged down by the compile."""
    result = invoke(
        tmp_path,
        "task=benchmark",
        "model=mlp",
        "model.hidden_sizes=[256,128]",  # a step of about a millisecond beside seconds of compiling
        "data.image_size=8",
        "device=cpu",
        "optimize.compile=true",
        "framework.coordinate_descent_tuning=true",  # Inductor's Triton tuning: a no-op for CPU kernels, but tagged
        "batch_size=32",
        "task.warmup_steps=3",
        "task.steps=30",
        "tracking.system_metrics_interval_s=0",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},  # a cold compile, not a cache hit
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = result.runs()
    metrics, tags = cell.data.metrics, cell.data.tags
    assert tags["trainbench.compile"] == "true"
    assert tags["torch.compile_mode"] == "default"  # framework.compile_mode=auto: CUDA graphs only on CUDA
    assert tags["torch.coordinate_descent_tuning"] == "true"
    assert tags["trainbench.step_time_source"].startswith("host clock")
    assert (tmp_path / "inductor").is_dir()  # inductor really compiled
    assert metrics["compile_time_s"] > 0
    assert metrics["warmup_time_s"] >= metrics["compile_time_s"]  # paid in warm-up...
    # ...not in a timed step: that one would be the slowest of the 30 and pull p99 up to most of compile_time_s
    assert metrics["step_time_ms_p99"] / 1000 < metrics["compile_time_s"] / 2
    mean_step_s = metrics["step_time_ms_mean"] / 1000
    assert metrics["samples_per_s"] == pytest.approx(32 / mean_step_s, rel=0.10)


def _seconds_of(times: int, work: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(times):
        work()
    return time.perf_counter() - started
