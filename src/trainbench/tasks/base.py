"""What every task shares: `Task`, the behaviour every task's dataclass extends (the cell as it runs, its run's
name and tags, `run`), and the steps each task takes around its own measurement (build the model, count its
FLOPs, the energy meter, MFU, the noise warning).

A task is one module in trainbench/tasks/ with one dataclass extending Task: registered as
`schema/task/<name>`, it is the task's config (conf/task/<name>.yaml extends it; its checks and the data every
task has are trainbench.config.schema.TaskConfig) and its behaviour. Nothing outside the task module checks a
task's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainbench.config.schema import ImageData, TaskConfig, TextData

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, ModelConfig
    from trainbench.data import Dataset
    from trainbench.energy import EnergyMeter
    from trainbench.frameworks.base import BuiltModel, Device, Framework, RunLog


# Step times on a quiet machine vary by a few percent (coefficient of variation). Above 10% the spread is as
# large as the differences a comparison is made for (fast mode or not, one framework or another: often 10-30%),
# so the figure is not one to quote alone: the cell warns and is tagged trainbench.noisy=true.
NOISY_CV_PCT = 10.0


@dataclass(frozen=True)
class DeviceInfo:
    """Where the cell runs: the devices its framework bound, and what the task names them by."""

    bound: Device  # synchronize, the step clock
    label: str  # hw.label, e.g. "NVIDIA H100 80GB HBM3"
    host: dict[str, str]  # hw.* tags

    @property
    def backend(self) -> str:  # cpu, cuda, rocm, mps, metal
        return self.bound.backend

    @property
    def count(self) -> int:  # devices the cell runs on (data-parallel): its figures are for all of them together
        return self.bound.count


@dataclass
class Task(TaskConfig):
    """A task's behaviour. Every task module's dataclass extends it; it runs inside the cell's process, after
    the device is bound (`run`), and the parent names and tags the cell's run with it before that."""

    def prepared(self, cell: CellConfig) -> CellConfig:
        """The cell as it will really run (e.g. how many synthetic samples are generated): what is recorded."""
        return cell

    def run_name(self, cell: CellConfig, backend: str) -> str:
        """`{framework}-{model}-{backend}-bs{batch_size}` (trainbench.run_naming.run_name, the one naming rule);
        before the backend is known, the device asked for."""
        from trainbench.run_naming import run_name

        return run_name(
            framework=cell.framework.name,
            backend=backend,
            task=self.name,
            model=cell.model.name,
            batch_size=cell.batch_size,
        )

    def tags(self, cell: CellConfig) -> dict[str, Any]:
        """trainbench.* tags of the things that change the measured quantity (the report never merges
        runs that differ in any of them)."""
        tags: dict[str, Any] = {
            "trainbench.task": self.name,
            "trainbench.timed_region": self.timed_region,
            "trainbench.precision": cell.precision.name,
            "trainbench.optimize": cell.optimize.name,
            "trainbench.num_devices": cell.device.count,
        }
        if self.sync_every_step:  # a study's setting that slows fast GPUs: visible wherever the figure is
            tags["trainbench.sync_every_step"] = "true"
        if self.uses_model:
            tags.update(
                {
                    "trainbench.model": cell.model.name,
                    "trainbench.data": cell.data.name,
                    "trainbench.batch_size": cell.batch_size,
                    "trainbench.pipeline": cell.data.pipeline,
                }
            )
            if cell.data.pipeline == "loader":
                tags["trainbench.loader"] = f"{cell.framework.input_pipeline()}, {cell.data.loader_workers} workers"
            if isinstance(cell.data, ImageData):
                tags["trainbench.image_size"] = cell.data.image_size
            if isinstance(cell.data, TextData):
                tags["trainbench.seq_len"] = cell.data.seq_len
        return tags

    def run(self, framework: Framework, cell: CellConfig, log: RunLog, device: DeviceInfo) -> dict[str, Any]:
        raise NotImplementedError


def task_of(cell: CellConfig) -> Task:
    """The cell's task, with its behaviour (the schema types the field as the config base it extends)."""
    task = cell.task
    if not isinstance(task, Task):
        raise TypeError(f"task `{task.name}` is a {type(task).__name__}, which does not extend tasks.base.Task")
    return task


def model_and_data(
    framework: Framework, cell: CellConfig, log: RunLog, training: bool = True
) -> tuple[Any, Dataset, float | None]:
    """Load the data, build the model, log its size and FLOPs; return (network, data, flops per sample)."""
    from trainbench import data as datasets
    from trainbench import progress
    from trainbench.timeline import mark

    progress.phase(f"loading the data ({cell.data.name})")
    data = datasets.load(cell.data, cell.seed)
    mark("cell: data loaded")
    log.params(actual_data_params(cell, data))
    progress.phase(f"building the model ({cell.model.name})")
    built = framework.build(cell.model, data)
    mark("cell: model built")
    flops = log_size(cell.model, built, data, training, log)
    return built.network, data, flops


def flops_per_sample(model: ModelConfig, built: BuiltModel, data: Dataset, training: bool) -> float | None:
    """The model's own count where its sizes give one, so every framework records the same figure; else the
    framework's counter's, on the network it built."""
    own = model.flops_per_sample(data, training)
    return own if own is not None else built.flops_per_sample(training)


def log_size(model: ModelConfig, built: BuiltModel, data: Dataset, training: bool, log: RunLog) -> float | None:
    """Log the built network's parameters and its FLOPs per sample (flops_per_sample); return the FLOPs."""
    from trainbench import progress
    from trainbench.timeline import mark

    progress.phase("counting the model's FLOPs")
    flops = flops_per_sample(model, built, data, training)
    mark("cell: FLOPs counted")
    log.metrics({"num_parameters": built.num_parameters, "flops_per_sample": flops})
    return flops


def actual_data_params(cell: CellConfig, data: Dataset) -> dict[str, int]:
    """Sample counts the config left to the dataset (null = all): the params record what really ran."""
    actual = {}
    if cell.data.num_samples is None:
        actual["data.num_samples"] = len(data.train)
    if cell.data.num_val_samples is None:
        actual["data.num_val_samples"] = len(data.val)
    return actual


def energy_meter(device: DeviceInfo) -> EnergyMeter:
    """The energy counter of the devices the cell uses (GPU energy when on GPUs, the CPU's otherwise)."""
    from trainbench.energy import EnergyMeter

    bound = device.bound
    return EnergyMeter(bound.backend, bound.gpu_indices or [0], synchronize=bound.synchronize)


def utilisation(achieved_tflops: float, device: DeviceInfo, precision: str, log: RunLog) -> dict[str, float]:
    """achieved_tflops, and mfu against the devices' published dense peak for the cell's precision (the peak
    of one device times the devices used; device_peak_tflops stays one device's)."""
    from trainbench import peaks

    if device.backend == "cpu":
        peak, source = peaks.cpu_peak_tflops(device.host, precision)
    else:
        cores = device.host.get("hw.gpu_cores")
        peak = peaks.peak_tflops(device.label, precision, int(cores) if cores and cores.isdigit() else None)
        source = "published dense peak" if peak else None
    if not peak:
        log.tags(
            {
                "mfu.reason": peaks.why_no_peak(device.label, precision)
                or f"no peak known for {device.label} at {precision}"
            }
        )
        return {"achieved_tflops": achieved_tflops}
    log.tags({"mfu.peak_source": source})
    # Data-parallel ranks on a CPU share its one peak; on GPUs each brings its own.
    devices = 1 if device.backend == "cpu" else device.count
    return {"achieved_tflops": achieved_tflops, "device_peak_tflops": peak, "mfu": achieved_tflops / (peak * devices)}


def throughput_extras(
    summary: dict[str, Any],
    data: Dataset,
    flops_per_sample: float | None,
    device: DeviceInfo,
    cell: CellConfig,
    log: RunLog,
) -> None:
    """tokens_per_s for text, achieved TFLOPS and MFU where FLOPs are known, and the per-device figures of a
    data-parallel cell: added to `summary`."""
    rate = summary.get("samples_per_s")
    if not rate:
        return
    summary["num_devices"] = device.count
    if device.count > 1:
        summary["samples_per_s_per_device"] = rate / device.count
    if data.kind == "text":
        # Every sequence is seq_len tokens long as the model sees it (padding included).
        summary["tokens_per_s"] = rate * data.seq_len
    if flops_per_sample:
        summary.update(utilisation(flops_per_sample * rate / 1e12, device, cell.precision.name, log))


def noisy_warning(what: str, cv_pct: float, advice: str) -> str | None:
    """The one line to print when `what` varied too much to quote (cv_pct above NOISY_CV_PCT), else None."""
    if not cv_pct > NOISY_CV_PCT:
        return None
    return f"trainbench: warning: {what} vary by {cv_pct:.0f}% (cv): the figure is noisy; try {advice}"


def noise_tags(what: str, cv_pct: float, advice: str) -> dict[str, str]:
    """Print the warning when `what` is too noisy to quote; the trainbench.noisy tags either way."""
    from trainbench import progress

    warning = noisy_warning(what, cv_pct, advice)
    if warning is None:
        return {"trainbench.noisy": "false"}
    progress.warning(warning)
    return {"trainbench.noisy": "true", "trainbench.noisy_reason": f"{what} cv {cv_pct:.1f}% > {NOISY_CV_PCT:g}%"}
