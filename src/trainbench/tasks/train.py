"""task=train: epochs over the training split, a validation pass after each.

What is timed is `timed_region` (the tag trainbench.timed_region says which):
- epoch (default): each epoch's training pass, as one block (trainbench.timing): the batch gather from the
  epoch's order, drawn and computed before the block in every framework (data.pipeline=device), or the loader's
  shuffled batches and their copies to the device (data.pipeline=loader), the train step and the on-device
  loss and accuracy sums; not validation, not logging, not progress output.
- fit: the whole training call as one wall-clock block, as a user times `model.fit`: Keras' own fit on
  arrays prepared on the host (fit copies every batch to the device itself); PyTorch has no fit, so its
  closest equivalent is trainbench's epoch loop over all epochs as one block. Validation runs once, after.
- build_fit: the model's build, the trainer's set-up (Keras: the host arrays' preparation, then compile) and
  the fit, as one block (total_time_s), on a device that is already up: the process's first product on the
  device, where the framework creates its devices, memory allocator and BLAS handles, runs just before the
  block and is recorded on its own (device_init_time_s). A study that timed build + fit for several models in
  one process paid that once, in its first model's figure (total_time_with_device_init_s is that figure here);
  the host arrays' preparation is inside the block and recorded too (host_prep_time_s): seconds for
  CIFAR-10, where the studies' own fit converted their float64 arrays inside their timers.
Per-epoch figures are taken inside fit and build_fit too (between synchronizations at epoch ends).

total_time_s is one quantity in every region: the training's wall clock between synchronizations, every
epoch's training pass with what the trainer does around it (shuffle, the read-back of the epoch's loss and
accuracy), never validation, logging or progress output. epoch sums it epoch by epoch; fit and build_fit
take it as their one block (with fit's own set-up inside, as a timer around model.fit has it; build_fit:
with the model's build and compile too).

The first epoch pays for allocation, autotuning and compilation: it is reported on its own
(first_epoch_time_s, compile_time_s) and left out of samples_per_s whenever a later epoch exists. A compiled
cell (trainbench.compile=true) of one epoch has none: its first and last steps run once before the timed epoch
(compile_time_s, tag trainbench.compile_steps), so compilation is never inside samples_per_s; an eager cell of
one epoch is timed whole, first-use costs included, as a study of one epoch timed it.

Noise, as benchmark names it: over the epochs that make samples_per_s (two or more), epoch_time_cv_pct is
the coefficient of variation of their times and samples_per_s_ci95 the half-width of the 95% CI (Student's t)
of their rates; a cv above NOISY_CV_PCT prints benchmark's one-line warning and tags trainbench.noisy=true.
A line says which epochs the figure holds and its interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import need_count
from trainbench.tasks.base import (
    DeviceInfo,
    Task,
    actual_data_params,
    energy_meter,
    log_size,
    model_and_data,
    noise_tags,
    throughput_extras,
)
from trainbench.timeline import mark

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import BuiltModel, Device, EpochResult, Framework, RunLog, Trainer

TIMED_REGIONS = ("epoch", "fit", "build_fit")
# The product that brings a device up before build_fit's block: large enough to go through the BLAS library
# (whose handle is created at the first product), small enough to cost nothing once the device is up.
DEVICE_INIT_PRODUCT = 64
# A loader-fed epoch whose steps waited this share of its time or more for their next batch is input-bound:
# the device (or the CPU's training threads) sat idle that long because the input pipeline fell behind.
INPUT_BOUND_SHARE = 0.10


@dataclass(frozen=True)
class EpochStats:
    epoch: int  # from 1
    seconds: float  # the training pass, one synchronized block (validation excluded)
    samples: int
    train_loss: float
    train_accuracy: float
    val_loss: float | None
    val_accuracy: float | None
    input_wait_s: float | None = None  # data.pipeline=loader: time the steps waited for their next batch

    def metrics(self) -> dict[str, float | None]:
        return {
            "epoch_time_s": self.seconds,
            "epoch_samples_per_s": self.samples / self.seconds if self.seconds > 0 else None,
            "train_loss": self.train_loss,
            "train_accuracy": self.train_accuracy,
            "val_loss": self.val_loss,
            "val_accuracy": self.val_accuracy,
            "input_wait_s": self.input_wait_s,
        }


@schema("task", "train")
@dataclass
class TrainTask(Task):
    data_parallel: ClassVar[bool] = True
    input_pipeline: ClassVar[bool] = True
    setting_tags: ClassVar[dict[str, str]] = {"trainbench.samples_per_epoch": "samples", "trainbench.epochs": "epochs"}
    epochs: int = 3  # 0 builds the model and records it without training
    timed_region: str = "epoch"  # type: ignore[misc]  # epoch | fit | build_fit (a setting here, fixed elsewhere)
    sync_every_step: bool = False  # type: ignore[misc]  # fit, build_fit: read the loss back after every step (tf.keras 2's progress bar)

    def check(self, at: str) -> None:
        need_count(self.epochs, f"{at}.epochs", 0, 100_000, "e.g. task.epochs=3 (0 builds the model only)")
        self.check_timing(at, TIMED_REGIONS)

    def check_cell(self, cell: CellConfig) -> None:
        from trainbench.config.judge import frameworks_that

        super().check_cell(cell)
        framework, count = cell.framework, cell.device.count
        if cell.data.pipeline == "loader":
            need(
                self.timed_region == "epoch",
                "task.timed_region",
                self.timed_region,
                "data.pipeline=loader is timed per epoch: use task.timed_region=epoch (fit and build_fit time the "
                "framework's own fit on arrays prepared on the host)",
            )
            need(
                framework.input_pipeline() is not None,
                "data.pipeline",
                "loader",
                f"framework={framework.name} has no loader pipeline yet: use data.pipeline=device, or "
                + frameworks_that(lambda other: other.input_pipeline() is not None),
            )
            need(count == 1, "device.count", count, "data.pipeline=loader runs on one device: use device.count=1")
        if self.timed_region != "epoch":
            need(
                framework.fit() is not None,
                "task.timed_region",
                self.timed_region,
                f"framework={framework.name} has no fit to time: use task.timed_region=epoch",
            )
            need(
                count == 1,
                "device.count",
                count,
                f"task.timed_region={self.timed_region} runs on one device: use device.count=1",
            )

    def tags(self, cell: CellConfig) -> dict[str, Any]:
        return {**super().tags(cell), "trainbench.epochs": self.epochs}

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        if self.timed_region == "epoch":
            return self._run_epochs(framework, cell, log, device)
        return self._run_fit(framework, cell, log, device)

    def _run_epochs(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.timing import Timer, time_block

        model, data, flops = model_and_data(framework, cell, log)
        if self.epochs == 0:
            mark("cell: ready for the first step")
            return {}
        trainer = framework.trainer(model, data, cell)
        log.tags({"trainbench.samples_per_epoch": trainer.samples_per_epoch})
        compiled_before: tuple[float, int] | None = None
        if self.epochs == 1 and compiles(framework, cell):
            progress.phase("compiling: the epoch's first and last steps, once, before the timed epoch")
            compiled_before = compile_before_the_epoch(trainer, device.bound)
            log.tags({"trainbench.compile_steps": compiled_before[1]})
        mark("cell: ready for the first step")
        validation = f", then validation on {len(data.val):,} samples" if len(data.val) else ""
        progress.phase(f"training: {self.epochs} epoch(s) of {trainer.steps_per_epoch} steps, each timed{validation}")
        epochs: list[EpochStats] = []
        training_s = 0.0  # total_time_s: each epoch's training, from its shuffle to its read-back
        meter = energy_meter(device)
        # Energy covers all epochs, validation included: the counters cannot be paused per batch.
        with meter, progress.EpochsBar(self.epochs, "train") as bar:
            for epoch in range(1, self.epochs + 1):
                with Timer(device.bound.synchronize) as training:
                    trainer.begin_epoch(epoch)
                    lined = bar.steps_with_lines(trainer.step, trainer.steps_per_epoch, f"epoch {epoch}/{self.epochs}")
                    block = time_block(lined, trainer.steps_per_epoch, device.bound.synchronize)
                    result = trainer.end_epoch()
                training_s += training.seconds
                val_loss, val_accuracy = trainer.evaluate()
                stats = EpochStats(
                    epoch,
                    block.seconds,
                    trainer.samples_per_epoch,
                    result.train_loss,
                    result.train_accuracy,
                    val_loss,
                    val_accuracy,
                    result.input_wait_s,
                )
                epochs.append(stats)
                log.metrics(stats.metrics(), step=epoch)
                bar.epoch_done(_epoch_line(stats, self.epochs))
        summary = self._summary(epochs, training_s, meter, log)
        if compiled_before is not None:
            compile_s, steps = compiled_before
            step_s = epochs[0].seconds / trainer.steps_per_epoch
            summary["compile_time_s"] = max(0.0, compile_s - steps * step_s)
            progress.line(
                f"train: compiled before the timed epoch ({summary['compile_time_s']:.1f} s, compile_time_s): "
                f"its first and last steps ran once before it, so the model trained {steps} step(s) more than "
                "task.epochs=1"
            )
        throughput_extras(summary, data, flops, device, cell, log)
        return summary

    def _run_fit(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        """fit / build_fit: the training call as one block; validation once, after it."""
        from trainbench import data as datasets
        from trainbench import progress
        from trainbench.timing import Timer

        build = self.timed_region == "build_fit"
        built: BuiltModel | None = None
        trainer: Trainer | None = None
        if build:  # the model is built inside the timed block: FLOPs and size are counted after it
            data = datasets.load(cell.data, cell.seed)
            mark("cell: data loaded")
            log.params(actual_data_params(cell, data))
        else:
            network, data, flops = model_and_data(framework, cell, log)
            trainer = framework.trainer(network, data, cell)
        if self.epochs == 0:
            return {}
        device_init_s = initialise_device(framework, device.bound) if build else None
        mark("cell: ready for the first step")
        progress.phase(
            f"training: {self.epochs} epoch(s) through {'the model build and ' if build else ''}one fit call, timed "
            "as a whole (the epochs' lines follow it)"
        )
        meter = energy_meter(device)
        with meter, Timer(device.bound.synchronize) as total:
            if trainer is None:
                built = framework.build(cell.model, data)
                trainer = framework.trainer(built.network, data, cell)
            results = fit_epochs(device.bound, trainer, self.epochs, self.sync_every_step)
        if built is not None:  # build_fit: counted after the timed block, as counting may run the model
            flops = log_size(cell.model, built, data, True, log)
        log.tags({"trainbench.samples_per_epoch": trainer.samples_per_epoch})
        val_loss, val_accuracy = trainer.evaluate()
        epochs = []
        for epoch, (seconds, result) in enumerate(results, start=1):
            last = epoch == len(results)
            stats = EpochStats(
                epoch,
                seconds,
                trainer.samples_per_epoch,
                result.train_loss,
                result.train_accuracy,
                val_loss if last else None,
                val_accuracy if last else None,
            )
            epochs.append(stats)
            log.metrics(stats.metrics(), step=epoch)
            progress.line(_epoch_line(stats, self.epochs))
        summary = self._summary(epochs, total.seconds, meter, log)
        if device_init_s is not None:
            from trainbench.frameworks.base import FittingTrainer

            summary["device_init_time_s"] = device_init_s
            summary["total_time_with_device_init_s"] = device_init_s + total.seconds
            summary["host_prep_time_s"] = trainer.host_prep_time_s if isinstance(trainer, FittingTrainer) else None
        throughput_extras(summary, data, flops, device, cell, log)
        return summary

    def _summary(self, epochs: list[EpochStats], total_s: float, meter: Any, log: RunLog) -> dict[str, Any]:
        steady = epochs[1:] or epochs
        steady_s_per_sample = sum(e.seconds for e in steady) / sum(e.samples for e in steady)
        summary: dict[str, Any] = {
            "total_time_s": total_s,
            "first_epoch_time_s": epochs[0].seconds,
            "samples_per_s": 1.0 / steady_s_per_sample,
            **meter.metrics(sum(e.samples for e in epochs)),
        }
        if len(epochs) > 1:  # what the first epoch cost beyond a steady one: compilation, autotuning
            summary["compile_time_s"] = max(0.0, epochs[0].seconds - epochs[0].samples * steady_s_per_sample)
        tags = {**meter.tags(), **epoch_noise(steady, len(epochs), summary)}
        waited = [e for e in steady if e.input_wait_s is not None]
        if waited:  # data.pipeline=loader: did the steps wait for their batches?
            share = sum(e.input_wait_s or 0.0 for e in waited) / sum(e.seconds for e in waited)
            summary["input_wait_share"] = share
            tags["trainbench.input_bound"] = str(share >= INPUT_BOUND_SHARE).lower()
        log.tags(tags)
        return summary


def compiles(framework: Framework, cell: CellConfig) -> bool:
    """Whether the cell's steps are compiled as it runs (torch.compile, XLA, mx.compile; Keras on JAX always):
    the framework's own word, as its run records it (trainbench.compile), else the setting."""
    said = framework.describe().tags.get("trainbench.compile")
    return (said or str(cell.optimize.compile).lower()) == "true"


def compile_before_the_epoch(trainer: Trainer, device: Device) -> tuple[float, int]:
    """A compiled cell of one epoch has no later epoch to take samples_per_s from, so its compilation would be
    inside the figure: the epoch's first step, and its last (a smaller last batch is another shape, compiled
    again), run once before the timed epoch, their results dropped. Returns (seconds, steps run)."""
    from trainbench.timing import Timer

    steps = sorted({0, trainer.steps_per_epoch - 1})
    with Timer(device.synchronize) as compiling:
        trainer.begin_epoch(1)
        for index in steps:
            trainer.step(index)
        trainer.end_epoch()
    return compiling.seconds, len(steps)


def epoch_noise(steady: list[EpochStats], epochs: int, summary: dict[str, Any]) -> dict[str, str]:
    """The spread of the epochs in samples_per_s, as benchmark records its blocks': epoch_time_cv_pct and
    samples_per_s_ci95 into `summary`, the trainbench.noisy tags returned (none from one epoch: no spread)."""
    from trainbench import progress
    from trainbench.timing import StepStats, mean_ci95

    which = f"epoch {steady[0].epoch}" if len(steady) == 1 else f"epochs {steady[0].epoch}-{steady[-1].epoch}"
    left_out = " (epoch 1, which compiles and allocates, left out)" if len(steady) < epochs else ""
    if len(steady) < 2:
        progress.line(f"train: samples_per_s from {which}{left_out}: one epoch, no interval (task.epochs=3 or more)")
        return {}
    cv_pct = StepStats.of([e.seconds for e in steady]).cv_pct
    _, ci95 = mean_ci95([e.samples / e.seconds for e in steady])
    summary["epoch_time_cv_pct"] = cv_pct
    summary["samples_per_s_ci95"] = ci95
    progress.line(
        f"train: samples_per_s from {which}{left_out}: {summary['samples_per_s']:,.0f} +/- {ci95:,.0f} "
        f"(95% CI over {len(steady)} epochs), epoch times vary by {cv_pct:.1f}% (cv)"
    )
    return noise_tags("epoch times", cv_pct, "more task.epochs, a larger data.num_samples, or a quiet machine")


def fit_epochs(device: Device, trainer: Trainer, epochs: int, sync_every_step: bool) -> list[tuple[float, EpochResult]]:
    """The training call of timed_region=fit / build_fit: (seconds, result) per epoch. A trainer with a fit of
    its own (Keras' model.fit) runs it; otherwise trainbench's epoch loop, each epoch between synchronizations."""
    from trainbench.frameworks.base import FittingTrainer
    from trainbench.timing import time_block

    if isinstance(trainer, FittingTrainer):
        return trainer.fit(epochs, sync_every_step)

    def read_back(index: int) -> None:
        trainer.step(index)
        device.synchronize()

    results = []
    for epoch in range(1, epochs + 1):
        trainer.begin_epoch(epoch)
        block = time_block(read_back if sync_every_step else trainer.step, trainer.steps_per_epoch, device.synchronize)
        results.append((block.seconds, trainer.end_epoch()))
    return results


def initialise_device(framework: Framework, device: Device) -> float:
    """Seconds of the process's first product on the device, read back. TensorFlow creates its devices (context,
    memory allocator) at its first op and cuBLAS its handle at the first product: costs a process pays once."""
    import time

    started = time.perf_counter()
    framework.matmul(DEVICE_INIT_PRODUCT, "square").step()
    device.synchronize()
    return time.perf_counter() - started


def _epoch_line(stats: EpochStats, epochs: int) -> str:
    val = "" if stats.val_accuracy is None else f", val_accuracy {stats.val_accuracy:.3f}"
    wait = "" if stats.input_wait_s is None else f", waited {stats.input_wait_s:.2f} s for input"
    return (
        f"epoch {stats.epoch}/{epochs}: {stats.seconds:.2f} s, "
        f"{stats.samples / stats.seconds:,.0f} samples/s, train_loss {stats.train_loss:.4f}{val}{wait}"
    )
