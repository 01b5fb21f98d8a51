"""task=train: epochs over the training split, a validation pass after each.

The timed region is each epoch's training pass, as one block (trainbench.timing): shuffling, the batch
gather, the train step and the on-device loss and accuracy sums; not validation, not logging. The first
epoch pays for allocation, autotuning and compilation: it is reported on its own (first_epoch_time_s,
compile_time_s) and left out of samples_per_s whenever a later epoch exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.registry import schema
from trainbench.config.schema import need_count
from trainbench.tasks.base import DeviceInfo, TaskConfig, energy_meter, model_and_data, throughput_extras
from trainbench.timeline import mark

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework, RunLog


@dataclass(frozen=True)
class EpochStats:
    epoch: int  # from 1
    seconds: float  # the training pass, one synchronized block (validation excluded)
    samples: int
    train_loss: float
    train_accuracy: float
    val_loss: float | None
    val_accuracy: float | None

    def metrics(self) -> dict[str, float | None]:
        return {
            "epoch_time_s": self.seconds,
            "epoch_samples_per_s": self.samples / self.seconds if self.seconds > 0 else None,
            "train_loss": self.train_loss,
            "train_accuracy": self.train_accuracy,
            "val_loss": self.val_loss,
            "val_accuracy": self.val_accuracy,
        }


@schema("task", "train")
@dataclass
class TrainTask(TaskConfig):
    timed_region: ClassVar[str] = "epoch"
    data_parallel: ClassVar[bool] = True
    epochs: int = 3  # 0 builds the model and records it without training

    def check(self, at: str) -> None:
        need_count(self.epochs, f"{at}.epochs", 0, 100_000, "e.g. task.epochs=3 (0 builds the model only)")

    def tags(self, cell: CellConfig) -> dict[str, Any]:
        return {**super().tags(cell), "trainbench.epochs": self.epochs}

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.timing import Timer, time_block

        model, data, flops = model_and_data(framework, cell, log)
        if self.epochs == 0:
            mark("cell: ready for the first step")
            return {}
        trainer = framework.trainer(model, data, cell)
        mark("cell: ready for the first step")
        log.tags({"trainbench.samples_per_epoch": trainer.samples_per_epoch})
        epochs: list[EpochStats] = []
        meter = energy_meter(framework, device)
        # Energy covers all epochs, validation included: the counters cannot be paused per batch.
        with meter, Timer(framework.synchronize) as total:
            for epoch in range(1, self.epochs + 1):
                trainer.begin_epoch(epoch)
                bar = progress.EpochBar(trainer.steps_per_epoch, f"epoch {epoch}/{self.epochs}")
                block = time_block(bar.wrap(trainer.step), trainer.steps_per_epoch, framework.synchronize)
                bar.close()
                result = trainer.end_epoch()
                val_loss, val_accuracy = trainer.evaluate()
                stats = EpochStats(epoch, block.seconds, trainer.samples_per_epoch, result.train_loss,
                                   result.train_accuracy, val_loss, val_accuracy)
                epochs.append(stats)
                log.metrics(stats.metrics(), step=epoch)
                val = "" if val_accuracy is None else f", val_accuracy {val_accuracy:.3f}"
                progress.line(f"epoch {epoch}/{self.epochs}: {stats.seconds:.2f} s, "
                              f"{stats.samples / stats.seconds:,.0f} samples/s, train_loss {stats.train_loss:.4f}{val}")
        steady = epochs[1:] or epochs
        steady_s_per_sample = sum(e.seconds for e in steady) / sum(e.samples for e in steady)
        summary: dict[str, Any] = {
            "total_time_s": total.seconds,
            "first_epoch_time_s": epochs[0].seconds,
            "samples_per_s": 1.0 / steady_s_per_sample,
            **meter.metrics(sum(e.samples for e in epochs)),
        }
        if len(epochs) > 1:  # what the first epoch cost beyond a steady one: compilation, autotuning
            summary["compile_time_s"] = max(0.0, epochs[0].seconds - epochs[0].samples * steady_s_per_sample)
        log.tags(meter.tags())
        throughput_extras(summary, data, flops, device, cell, log)
        return summary
