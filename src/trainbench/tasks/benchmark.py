"""task=benchmark: timed training steps on one batch that stays on the device (no input pipeline).

Warm-up first (a fixed count, or until step times settle), timed on its own. Then `repeats` blocks of
`steps` steps, each block between one synchronization at each end: samples_per_s is the mean of the
blocks' rates (with a 95% CI over repeats). Per-step percentiles come from device events recorded between
the steps of those same blocks (CUDA), or, where the framework has none free to record there (TensorFlow, JAX,
MLX; PyTorch on MPS), from a separate synchronized pass (trainbench.step_time_source says which).

timed_region=fit times Keras' own model.fit instead (the tf-metal study's quantity): arrays of
batch_size x steps samples prepared on the host, one warm-up fit epoch of `warmup_steps` batches, then one fit
of `repeats` epochs of `steps` batches timed as a whole, fit copying every batch to the device itself;
samples_per_s = samples trained / that wall clock, i.e. samples per epoch / the fit's wall clock per epoch.
Its CI comes from that same per-epoch quantity: the fit's epochs are each timed too (epoch_time_s, between
synchronizations at the epoch's ends), their spread gives the 95% CI of the mean time per epoch, and
samples_per_s_ci95 is that half-width as a share of the wall clock per epoch, times samples_per_s (the
first-order interval of samples per epoch / mean epoch time). The wall clock per epoch is an epoch's time
plus an equal share of what fit does outside its epochs, which moves the mean, not the spread.

task.min_time_s paces the blocks: where `steps` steps would take less (a probe block says), each block gets
more steps, so that the blocks together last that long (an energy counter needs a second; a fast GPU runs `steps` in
milliseconds). task.check_sync records what `trainbench doctor` compares to tell a synchronize that waits for
the device from one that only waits for the host to queue the work (sync_check_*_step_ms, per step): right
after the warm-up, while the device's queue is short, `repeats` rounds of a block of `steps`, a block of
2 x `steps` and `steps` steps synchronized one by one, each the median and the fastest of its rounds (other
work on the machine only ever slows a round, so the fastest rounds are what the doctor compares; a synchronize
that does not wait makes the fastest block of `steps` the queueing alone); then the timed blocks' mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import SyntheticImages, SyntheticText, finite, need_count, replace
from trainbench.tasks.base import DeviceInfo, Task, energy_meter, model_and_data, noise_tags, throughput_extras

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework, RunLog, StepClock
    from trainbench.measure.timing import Step, WarmUp

TIMED_REGIONS = ("steps", "fit")
PERCENTILE_PASS_STEPS = 20  # steps of the synchronized pass, where no device clock exists
ESTIMATE_FROM_S = 2.0  # a phase ahead shorter than this gets no estimate: it is over before one is read


@schema("task", "benchmark")
@dataclass
class BenchmarkTask(Task):
    data_parallel: ClassVar[bool] = True
    warmup_steps: int = 5  # untimed steps first (allocation, autotuning, compilation): warmup_time_s
    steps: int = 20  # timed steps per block
    repeats: int = 1  # blocks: samples_per_s is their mean, with a 95% CI (samples_per_s_ci95)
    settle_cv_pct: float | None = None  # e.g. 2.0: keep warming up until the last 5 steps vary by less
    max_warmup_steps: int = 200
    drift_threshold_pct: float = 5.0  # tag trainbench.drift=true when the last tenth is this much slower
    timed_region: str = "steps"  # type: ignore[misc]  # steps | fit (Keras' model.fit, as one wall-clock block)
    sync_every_step: bool = False  # type: ignore[misc]  # fit: read the loss back after every step (tf.keras 2's progress bar)
    min_time_s: float | None = None  # e.g. 1.0: more steps per block, so the blocks together last this long
    check_sync: bool = False  # also time 2 x steps as a block and steps synchronized one by one (sync_check_*)

    def check(self, at: str) -> None:
        self.check_timing(at, TIMED_REGIONS)
        need_count(self.warmup_steps, f"{at}.warmup_steps", 0, 10**6, "e.g. task.warmup_steps=5")
        need_count(self.steps, f"{at}.steps", 1, 10**7, "e.g. task.steps=20")
        need_count(self.repeats, f"{at}.repeats", 1, 1000, "e.g. task.repeats=5")
        need(
            self.settle_cv_pct is None or (finite(self.settle_cv_pct) and self.settle_cv_pct > 0),
            f"{at}.settle_cv_pct",
            self.settle_cv_pct,
            "must be null or a percentage > 0",
        )
        need_count(self.max_warmup_steps, f"{at}.max_warmup_steps", 1, 10**6, "")
        need(
            finite(self.drift_threshold_pct) and self.drift_threshold_pct > 0,
            f"{at}.drift_threshold_pct",
            self.drift_threshold_pct,
            "must be a percentage > 0",
        )
        need(
            self.min_time_s is None or (finite(self.min_time_s) and 0 < self.min_time_s <= 3600),
            f"{at}.min_time_s",
            self.min_time_s,
            "must be null or seconds from 0 to 3600, e.g. task.min_time_s=1",
        )
        for key, value in (("min_time_s", self.min_time_s), ("check_sync", self.check_sync)):
            need(
                self.timed_region == "steps" or value in (None, False),
                f"{at}.{key}",
                value,
                "applies to blocks of resident steps: use it with task.timed_region=steps",
            )

    def check_cell(self, cell: CellConfig) -> None:
        from trainbench.config.judge import frameworks_that

        super().check_cell(cell)
        if self.timed_region == "fit":
            need(
                cell.framework.fit() == "model.fit",
                "task.timed_region",
                "fit",
                f"times the framework's own model.fit, which framework={cell.framework.name} does not have: use "
                + frameworks_that(lambda other: other.fit() == "model.fit")
                + ", or task.timed_region=steps",
            )
            need(
                cell.device.count == 1,
                "device.count",
                cell.device.count,
                "task.timed_region=fit runs on one device: use device.count=1",
            )

    def prepared(self, cell: CellConfig) -> CellConfig:
        """Synthetic data: generate the one batch the steps use, not a whole dataset (fit: the batches fit
        goes through)."""
        if isinstance(cell.data, (SyntheticImages, SyntheticText)) and isinstance(cell.batch_size, int):
            batches = max(self.steps, self.warmup_steps) if self.timed_region == "fit" else 1
            return replace(cell, data={"num_samples": cell.batch_size * batches, "num_val_samples": 0})
        return cell

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.measure.timing import Plan, StepStats, drift_pct, indexed, measure

        if self.timed_region == "fit":
            return self._run_fit(framework, cell, log, device)
        model, data, flops = model_and_data(framework, cell, log)
        sync = device.bound.synchronize
        step = progress.steps_with_lines(indexed(framework.trainer(model, data, cell).resident_step()), "benchmark")
        batch = min(int(cell.batch_size), len(data.train)) * device.count  # batch_size is per device
        clock = device.bound.step_clock()

        def before_blocks(warm: WarmUp, steps: int) -> None:
            ahead = self.repeats * steps + (0 if clock is not None else min(steps, PERCENTILE_PASS_STEPS))
            if self.check_sync:
                ahead += 4 * self.steps * self.repeats  # each round: a block, a double block, steps one by one
            progress.line(
                f"benchmark: {warm.steps} warm-up steps ({warm.seconds:.2f} s), then {self.repeats} x {steps} "
                "timed steps" + about(warm_up_pace_s(warm) * ahead)
            )
            if self.check_sync:  # logged now: a cell stopped later (its blocks run too long) keeps them
                progress.phase(f"checking the synchronization: {self.repeats} round(s) of blocks of {self.steps} steps")
                log.metrics(sync_check(step, self.steps, self.repeats, sync, clock))

        plan = Plan(
            warmup_steps=self.warmup_steps,
            steps=self.steps,
            repeats=self.repeats,
            settle_cv_pct=self.settle_cv_pct,
            max_warmup_steps=self.max_warmup_steps,
            min_time_s=self.min_time_s,
            pass_steps=PERCENTILE_PASS_STEPS,
            pass_what="steps after the timed blocks",
        )
        # the meter around the timed blocks only: warm-up stays out of the energy figure
        meter = energy_meter(device)
        measured = measure(step, sync, plan, clock, meter, device.bound.no_step_clock_why, before_blocks)
        samples_per_s, ci95 = measured.samples_per_s(batch)
        stats = StepStats.of(measured.step_times_s)
        drift = drift_pct(measured.step_times_s)
        tags = {"trainbench.step_time_source": measured.step_time_source, **meter.tags()}
        if drift is not None:
            tags["trainbench.drift"] = str(drift > self.drift_threshold_pct).lower()
        log.tags(
            {
                **tags,
                **noise_tags(
                    "step times",
                    stats.cv_pct,
                    "task.repeats=5, task.settle_cv_pct=2, more task.steps, or a quiet machine",
                ),
            }
        )
        progress.line(
            f"benchmark: {measured.steady_step_s() * 1000:.2f} ms/step (p90 {stats.p90_ms:.2f}), "
            f"{samples_per_s:,.0f} samples/s" + (f" +/- {ci95:,.0f} (95% CI)" if ci95 is not None else "")
        )
        summary: dict[str, Any] = {
            **measured.figures(batch),
            "warmup_steps_run": measured.warm.steps,
            "samples_per_s_ci95": ci95,
            "drift_pct": drift,
            "steps_per_block": measured.steps_per_block,
            **stats.metrics(),
            **meter.metrics(batch * measured.timed_steps),
        }
        if self.check_sync:
            summary["sync_check_timed_block_step_ms"] = 1000 * measured.timed_s / measured.timed_steps
        throughput_extras(summary, data, flops, device, cell, log)
        return summary

    def _run_fit(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.measure.timing import Timer, mean_ci95

        model, data, flops = model_and_data(framework, cell, log)
        trainer: Any = framework.trainer(model, data, cell)  # keras.adapter.FitTrainer: host arrays, compiled
        batch, available = int(cell.batch_size), len(data.train)
        if self.warmup_steps:
            progress.phase(f"warming up: one fit epoch of {self.warmup_steps} steps (the first also compiles)")
        with Timer(device.bound.synchronize) as warm:
            if self.warmup_steps:
                trainer.fit(1, self.sync_every_step, samples=min(batch * self.warmup_steps, available))
        samples = min(batch * self.steps, available)
        progress.line(
            f"benchmark: a warm-up fit of {self.warmup_steps} steps ({warm.seconds:.2f} s), then a fit of "
            f"{self.repeats} epoch(s) x {self.steps} steps, timed as a whole"
        )
        meter = energy_meter(device)
        with meter, Timer(device.bound.synchronize) as timed:
            epochs = trainer.fit(self.repeats, self.sync_every_step, samples=samples)
        trained = samples * self.repeats
        steps = -(-samples // batch) * self.repeats
        samples_per_s = trained / timed.seconds
        _, epoch_ci95_s = mean_ci95([seconds for seconds, _ in epochs])
        ci95 = None if epoch_ci95_s is None else samples_per_s * epoch_ci95_s / (timed.seconds / self.repeats)
        for epoch, (seconds, _) in enumerate(epochs, start=1):
            log.metrics({"epoch_time_s": seconds}, step=epoch)
        log.tags(
            {"trainbench.step_time_source": "fit wall clock / steps (fit gives no per-step times)", **meter.tags()}
        )
        progress.line(
            f"benchmark: {timed.seconds * 1000 / steps:.2f} ms/step, {samples_per_s:,.0f} samples/s"
            + (f" +/- {ci95:,.0f} (95% CI)" if ci95 is not None else "")
        )
        summary: dict[str, Any] = {
            "warmup_time_s": warm.seconds,
            "warmup_steps_run": self.warmup_steps,
            "compile_time_s": max(0.0, warm.seconds - self.warmup_steps * timed.seconds / steps),
            "total_time_s": warm.seconds + timed.seconds,
            "samples_per_s": samples_per_s,
            "samples_per_s_ci95": ci95,
            "step_time_ms_mean": timed.seconds * 1000 / steps,
            **meter.metrics(trained),
        }
        throughput_extras(summary, data, flops, device, cell, log)
        return summary


def warm_up_pace_s(warm: WarmUp) -> float:
    """Seconds per step as the warm-up ran them, its first step (compilation, allocation) left out."""
    if warm.steps > 1:
        return (warm.seconds - warm.first_step_s) / (warm.steps - 1)
    return warm.seconds / warm.steps if warm.steps else 0.0


def about(seconds: float) -> str:
    """', about 1:05 from here' for a phase ahead that should take a while; nothing for one of a moment."""
    from trainbench.progress import duration

    return f", about {duration(seconds)} from here" if seconds >= ESTIMATE_FROM_S else ""


def sync_check(
    step: Step, steps: int, rounds: int, sync: Callable[[], None], clock: StepClock | None
) -> dict[str, float]:
    """task.check_sync's short figures, in ms per step, the median and the fastest of `rounds` rounds of: a
    block of `steps`, a block of 2 x `steps` (both timed as the benchmark's blocks are, device clock included),
    and the mean of `steps` steps synchronized one by one. Rounds interleave the three, every other one in
    reverse order: a burst of other work on the machine slows a round of each, not all of one, and a machine
    that speeds up or slows down as the cell goes on favours none of them."""
    from trainbench.measure.timing import synchronized_step_times, time_block

    block: list[float] = []
    double: list[float] = []
    synchronized: list[float] = []

    def in_blocks(times: list[float], count: int) -> None:
        timed = time_block(step, count, sync, clock)
        times.append(timed.seconds / timed.steps)

    measures = [
        lambda: in_blocks(block, steps),
        lambda: in_blocks(double, 2 * steps),
        lambda: synchronized.append(statistics.fmean(synchronized_step_times(step, steps, sync))),
    ]
    for index in range(rounds):
        for measure in measures[:: -1 if index % 2 else 1]:
            measure()
    return {
        "sync_check_block_step_ms": 1000 * statistics.median(block),
        "sync_check_double_block_step_ms": 1000 * statistics.median(double),
        "sync_check_synchronized_step_ms": 1000 * statistics.median(synchronized),
        "sync_check_fastest_block_step_ms": 1000 * min(block),
        "sync_check_fastest_double_block_step_ms": 1000 * min(double),
        "sync_check_fastest_synchronized_step_ms": 1000 * min(synchronized),
    }
