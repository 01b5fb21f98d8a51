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


def span(values: list[float], intervals: list[float | None], is_noisy: bool = False) -> tuple[float, float]:
    """What several runs of one setting on one machine measured: from the lowest run's figure to the highest,
    widened where needed to the typical run's own 95% interval (the median of those recorded) around their
    median, never below 0. Not a confidence interval of their mean, which two or three runs cannot give
    (Student's t for two is 12.7: an H100's two runs at 40,517 and 53,397 samples/s came out +-81,833 and "within
    noise" of a 2-core CPU); nor every run's own interval at its edges (one run of two epochs, +-43,000 of its own,
    made six H200 runs read 6,618-92,793). Runs that recorded no interval are given what one such figure is
    (judged_interval): two GEMM peaks at 606 and 610 are not exact."""
    middle = statistics.median(values)
    recorded = [c for c in intervals if c is not None]
    typical = statistics.median(recorded) if recorded else judged_interval(middle, None, is_noisy)
    return max(min(*values, middle - typical), 0.0), max(*values, middle + typical)


def half_width(value: float, low: float, high: float) -> float:
    """The +- a span around `value` is judged with (figures.judged): its wider side."""
    return max(value - low, high - value)


def quoted(
    value: float,
    interval: float | None = None,
    count: int | None = None,
    is_noisy: bool = False,
    runs: int = 1,
    spanned: tuple[float, float] | None = None,
) -> str:
    """`779.3 ± 12.1 (95%, 2 repeats)` for one run; `54,802 (49,705-58,120 over 4 runs)` for the median of
    several and what they measured (`span`); ` NOISY` where a run was tagged so."""
    if runs > 1 and spanned is not None:
        low, high = spanned
        return f"{number(value)} ({number(low)}-{number(high)} over {runs} runs)" + (" NOISY" if is_noisy else "")
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


# The half-width, relative to the figure, that a figure with no interval (one measurement: a GEMM's peak, one
# inference pass, a run of one block, a published number) is given when set against another: twice the cv above
# which a run is tagged noisy (tasks.base.NOISY_CV_PCT), the widest spread a measurement that is not noisy may have.
# Two such figures are then told apart only where they differ by more than 1.5x.
WITHOUT_INTERVAL = 0.20
# A figure tagged noisy with no interval to say how noisy (an inference pass whose latencies varied): +-50%, so it
# is told apart from another noisy one only beyond 3x; never "within noise" of anything at all (a GPU's noisy 2,291
# inferences/s against a 2-core CPU's 19.74 is a ratio).
NOISY_WITHOUT_INTERVAL = 0.50

APART, WITHIN_NOISE, TOO_CLOSE = "apart", "within noise", "too close to call"


def judged_interval(value: float, interval: float | None, is_noisy: bool = False) -> float:
    """The +- a figure is judged with on every screen and in every range: its own 95% half-width, else
    +-WITHOUT_INTERVAL of itself, +-NOISY_WITHOUT_INTERVAL where it is noisy; never exact."""
    if interval is not None:
        return interval
    return value * (NOISY_WITHOUT_INTERVAL if is_noisy else WITHOUT_INTERVAL)


def separate(a: float, a_ci: float | None, b: float, b_ci: float | None) -> bool:
    """Whether two figures' 95% intervals do not overlap; a figure without one is given +-WITHOUT_INTERVAL of
    itself, never counted as exact."""
    a_ci, b_ci = judged_interval(a, a_ci), judged_interval(b, b_ci)
    return a + a_ci < b - b_ci or b + b_ci < a - a_ci


def judged(a: float, a_ci: float | None, a_noisy: bool, b: float, b_ci: float | None, b_noisy: bool) -> str:
    """Whether a speed-up between two figures may be claimed, one rule for every screen: APART where their 95%
    intervals separate (a figure without an interval given +-WITHOUT_INTERVAL, a noisy one without an interval
    +-NOISY_WITHOUT_INTERVAL); else WITHIN_NOISE where both have intervals or a noisy figure has none to say how
    noisy, TOO_CLOSE where one has no interval."""
    noisy_alone = (a_noisy and a_ci is None) or (b_noisy and b_ci is None)
    if a_noisy and a_ci is None:
        a_ci = judged_interval(a, None, True)
    if b_noisy and b_ci is None:
        b_ci = judged_interval(b, None, True)
    if separate(a, a_ci, b, b_ci):
        return APART
    return WITHIN_NOISE if noisy_alone or (a_ci is not None and b_ci is not None) else TOO_CLOSE


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
