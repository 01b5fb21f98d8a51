"""task=inference: forward passes in eval mode without gradients, as a model is served.

Two figures per cell, each after its own warm-up: latency at batch 1 (`latency_ms_p50/p90/p99/mean`, per
request, from device events between requests where the framework has them free to record (CUDA), else from
a synchronized pass: a served request waits for its answer) and throughput at the cell's batch size
(`samples_per_s`, from a block of passes with one synchronization at each end). Energy and MFU (forward
FLOPs) cover the throughput block, as they cover the timed steps in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.registry import schema
from trainbench.config.schema import SyntheticImages, SyntheticText, need_count, replace
from trainbench.tasks.base import DeviceInfo, Task, energy_meter, model_and_data, noise_tags, throughput_extras

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework, RunLog


@schema("task", "inference")
@dataclass
class InferenceTask(Task):
    timed_region: ClassVar[str] = "inference"
    warmup_steps: int = 10  # untimed passes before each measurement (compilation, autotuning, allocation)
    steps: int = 50  # timed passes at the cell's batch size, as one block
    latency_steps: int = 100  # requests of one sample, for the latency percentiles

    def check(self, at: str) -> None:
        need_count(self.warmup_steps, f"{at}.warmup_steps", 0, 10**6, "e.g. task.warmup_steps=10")
        need_count(self.steps, f"{at}.steps", 1, 10**7, "e.g. task.steps=50")
        need_count(self.latency_steps, f"{at}.latency_steps", 1, 10**7, "e.g. task.latency_steps=100")

    def prepared(self, cell: CellConfig) -> CellConfig:
        """Synthetic data: generate the one batch the passes use."""
        if isinstance(cell.data, (SyntheticImages, SyntheticText)) and isinstance(cell.batch_size, int):
            return replace(cell, data={"num_samples": cell.batch_size, "num_val_samples": 0})
        return cell

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        from trainbench import progress
        from trainbench.measure.timing import Plan, StepStats, indexed, measure

        model, data, flops = model_and_data(framework, cell, log, training=False)
        sync = device.bound.synchronize
        trainer = framework.trainer(model, data, cell)
        batch = min(int(cell.batch_size), len(data.train))

        progress.phase(f"batch 1 latency: {self.latency_steps} requests after {self.warmup_steps} warm-up ones")
        requests = Plan(
            warmup_steps=self.warmup_steps,
            steps=self.latency_steps,
            pass_steps=self.latency_steps,
            pass_what="requests",
            throughput=False,
        )
        single = measure(
            progress.steps_with_lines(indexed(trainer.inference_step(1)), "batch 1 latency"),
            sync,
            requests,
            device.bound.step_clock(),
            None,
            device.bound.no_step_clock_why,
        )
        latency = StepStats.of(single.step_times_s)

        progress.phase(f"batch {batch} throughput: {self.steps} passes after {self.warmup_steps} warm-up ones")
        meter = energy_meter(device)
        passing = progress.steps_with_lines(indexed(trainer.inference_step(batch)), f"batch {batch} throughput")
        passes = measure(passing, sync, Plan(self.warmup_steps, self.steps), None, meter)
        figures = passes.figures(batch)
        log.tags(
            {
                "trainbench.latency_source": single.step_time_source,
                **meter.tags(),
                **noise_tags(
                    "latencies", latency.cv_pct, "more task.warmup_steps, more task.latency_steps, or a quiet machine"
                ),
            }
        )
        progress.line(
            f"inference: batch 1 p50 {latency.p50_ms:.3f} ms (p99 {latency.p99_ms:.3f}); "
            f"batch {batch}: {figures['samples_per_s']:,.0f} samples/s"
        )
        summary: dict[str, Any] = {
            **latency.metrics("latency"),
            **figures,
            **meter.metrics(batch * passes.timed_steps),
        }
        throughput_extras(summary, data, flops, device, cell, log)
        return summary
