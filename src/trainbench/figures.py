"""One run's headline figure as every screen quotes it: the value, its 95% interval, how many repeats made it,
and whether the run was tagged noisy.

The summary table after a sweep, the first screen, `trainbench results` and `python src/report.py` all quote a
figure through `quoted`, so one run reads the same everywhere. The interval and the noise come from what the
run recorded (`<metric>_ci95`, `trainbench.noisy`: docs/mlflow-schema.md), whichever task made it.

Light on purpose: the sweep's process imports it (no MLflow, no deep-learning framework).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

NOISY_TAG = "trainbench.noisy"
NOISY_REASON_TAG = "trainbench.noisy_reason"
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # Student t


def number(value: float) -> str:
    """Readable figures: 10,283 / 312.4 / 2.53 / 0.0421."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def noisy(tags: Mapping[str, str]) -> bool:
    return tags.get(NOISY_TAG) == "true"


def ci95(metrics: Mapping[str, float], metric: str) -> float | None:
    """The run's recorded 95% half-width of `metric`, where its task records one."""
    value = metrics.get(f"{metric}_ci95")
    return value if value is not None and value == value else None


def repeats(params: Mapping[str, str], metric: str) -> int | None:
    """How many timed repeats made `metric`: benchmark's blocks (task.repeats), train's steady epochs
    (the first is left out where there are several; one block with timed_region fit or build_fit)."""
    task = params.get("task.name", "")
    if task == "train":
        if params.get("task.timed_region", "epoch") != "epoch" or metric == "total_time_s":
            return 1
        epochs = _int(params.get("task.epochs"))
        return None if epochs is None else (epochs - 1 if epochs > 1 else epochs)
    return _int(params.get("task.repeats"))


def spread_ci95(values: list[float]) -> float | None:
    """The 95% half-width of the mean of several runs' figures (None for one run)."""
    if len(values) < 2:
        return None
    t = T95.get(len(values) - 1, 1.96)
    return t * statistics.stdev(values) / len(values) ** 0.5


def quoted(value: float, interval: float | None = None, count: int | None = None, is_noisy: bool = False) -> str:
    """`779.3 ± 12.1 (95%, 2 repeats)`, with `, noisy` where the run was tagged so."""
    text = number(value)
    details = []
    if interval is not None:
        text += f" ± {number(interval)}"
        details.append("95%")
    if count is not None:
        details.append(f"{count} repeat{'s' if count != 1 else ''}")
    if details:
        text += f" ({', '.join(details)})"
    return text + (" NOISY" if is_noisy else "")


def separate(a: float, a_ci: float | None, b: float, b_ci: float | None) -> bool:
    """Whether two figures' 95% intervals do not overlap (a figure without one counts as exact)."""
    low_a, high_a = a - (a_ci or 0.0), a + (a_ci or 0.0)
    low_b, high_b = b - (b_ci or 0.0), b + (b_ci or 0.0)
    return high_a < low_b or high_b < low_a


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
