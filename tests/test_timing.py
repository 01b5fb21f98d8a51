"""The timing module: synchronize around every timed region, robust statistics."""

from __future__ import annotations

import numpy as np
import pytest

from trainbench.timing import StepStats, Timer, time_steps


def test_timer_synchronizes_before_start_and_before_stop() -> None:
    events: list[str] = []
    with Timer(lambda: events.append("sync")) as timer:
        events.append("work")
    assert events == ["sync", "work", "sync"]
    assert timer.seconds >= 0


def test_time_steps_excludes_warmup_and_syncs_every_timed_step() -> None:
    calls = {"step": 0, "sync": 0}
    warmup_s, stats = time_steps(lambda: calls.__setitem__("step", calls["step"] + 1),
                                 lambda: calls.__setitem__("sync", calls["sync"] + 1), warmup_steps=3, steps=7)
    assert calls["step"] == 10 and stats.steps == 7
    assert calls["sync"] == 2 + 2 * 7  # around the warm-up block, then around each timed step
    assert warmup_s >= 0


def test_step_stats_percentiles_expose_a_slow_outlier() -> None:
    durations = [0.010] * 99 + [0.110]
    stats = StepStats.of(durations)
    assert stats.p50_ms == pytest.approx(10.0)
    assert stats.mean_ms == pytest.approx(11.0)
    assert stats.p99_ms > stats.p90_ms == pytest.approx(10.0)
    assert stats.cv_pct == pytest.approx(100 * np.std(np.array(durations) * 1000, ddof=1) / 11.0)


def test_step_stats_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        StepStats.of([])
