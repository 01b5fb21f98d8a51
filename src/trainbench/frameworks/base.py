"""The contract between tasks and framework adapters: everything a task may ask of a framework.

An adapter is the class `Adapter` in the module its config names (`adapter:` in conf/framework/<name>.yaml,
e.g. trainbench.frameworks.pytorch.adapter). It is the only code that imports its framework, and it is
imported only inside a cell's own process. Tasks (trainbench/tasks/) drive adapters through `Framework`
and the objects it returns (`Device`, `Trainer`, `StepClock`), nothing else; a type checker holds both sides to
it (each adapter module ends with the assignments that tie its classes to these protocols).

Light on purpose: the parent imports this module (for DeviceUnavailable) and never a framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from trainbench.config.schema import CellConfig, DeviceConfig, ModelConfig
    from trainbench.data import Dataset

# Device.no_step_clock_why where the framework records no events on the device at all
NO_DEVICE_EVENTS = "no device events"


def uses_loader(cell: CellConfig) -> bool:
    """Whether the cell's trainer is fed by the host loader: data.pipeline=loader under a task that times one
    (the batch_size=max probes run the benchmark task on the same cell: resident batches)."""
    return cell.data.pipeline == "loader" and bool(getattr(cell.task, "input_pipeline", False))


class DeviceUnavailable(RuntimeError):
    """The cell cannot run on this machine (no such device, a dtype it lacks). str() says what was checked."""


class NodeLost(RuntimeError):
    """A node of a multi-node cell went (killed, lost, its ranks stopped) or its ranks never joined: str() names
    it. An expected outcome: the sweep prints one line and keeps the traceback in the run."""


class RunLog(Protocol):
    """Where a cell's figures go: the cell's MLflow run (as JSON lines to the process that launched the cell:
    trainbench.cell.events.PipeLog), or nowhere (trainbench.store.tracking.NullLog, for the probes of batch_size=max
    and for data-parallel ranks > 0)."""

    def metrics(self, values: Mapping[str, float | None], step: int = 0) -> None: ...

    def tags(self, values: Mapping[str, Any]) -> None: ...

    def params(self, values: Mapping[str, Any]) -> None: ...

    def text(self, text: str, artifact_file: str) -> None: ...

    def figure(self, figure: Figure, artifact_file: str) -> None: ...


class StepClock(Protocol):
    """Timestamps between steps taken on the device's own timeline (CUDA events), so per-step percentiles cost
    no host synchronization. `durations_s` may synchronize: call it after the block."""

    source: str  # what the timestamps are, for the `trainbench.step_time_source` tag

    def reserve(self, marks: int) -> None:
        """Called before a block's opening synchronization: have `marks` timestamps ready, so that taking one
        inside the block costs no allocation."""
        ...

    def mark(self) -> None: ...

    def durations_s(self) -> list[float]: ...


@dataclass(frozen=True)
class EpochResult:
    """What a training pass accumulated on the device, read back after its timed block."""

    train_loss: float
    train_accuracy: float
    input_wait_s: float | None = None  # data.pipeline=loader: time the epoch's steps waited for their batch


class Trainer(Protocol):
    """A model bound to its data, optimizer and loss on the cell's device: the train task's loop calls
    `begin_epoch`, then `step(i)` for i in range(steps_per_epoch) inside one timed block, then
    `end_epoch` and `evaluate` outside it. Steps must not synchronize the host with the device. A trainer built
    for task.timed_region=fit / build_fit may instead be a FittingTrainer."""

    steps_per_epoch: int
    samples_per_epoch: int

    def begin_epoch(self, epoch: int) -> None:
        """Shuffle for epoch `epoch` (from 1) and reset the on-device accumulators."""

    def step(self, index: int) -> None:
        """Train on batch `index` of this epoch's order; accumulate loss and accuracy on the device."""

    def end_epoch(self) -> EpochResult: ...

    def evaluate(self) -> tuple[float | None, float | None]:
        """(val_loss, val_accuracy) over the validation split; (None, None) without one."""

    def resident_step(self) -> Callable[[], None]:
        """One training step on one batch kept on the device (the benchmark task times these)."""

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        """One forward pass in eval mode without gradients on a resident batch of `batch_size`."""


@runtime_checkable
class FittingTrainer(Protocol):
    """A trainer with a fit of its own (Keras' model.fit on host arrays), built for task.timed_region=fit /
    build_fit: the train task times `fit` in place of its loop (trainbench.tasks.train.fit_epochs)."""

    # The seconds its set-up spent preparing the host arrays fit reads (recorded by build_fit, whose block
    # holds them).
    host_prep_time_s: float

    def fit(self, epochs: int, sync_every_step: bool = False) -> list[tuple[float, EpochResult]]:
        """(seconds, result) of each of `epochs` epochs; with sync_every_step, each step waits for the device."""
        ...


@dataclass(frozen=True)
class Description:
    """What a bound framework says about itself, for the cell's tags (Framework.describe)."""

    version: str  # the framework's own version: trainbench.framework_version
    # sw.* (the framework and the libraries under it, as loaded in this process) and every numeric and
    # optimisation flag in force (tf32, autocast, compile, ...)
    tags: dict[str, str]


@dataclass(frozen=True)
class BuiltModel:
    """A freshly initialised network and what it costs (Framework.build)."""

    network: Any  # what the framework's trainer takes
    num_parameters: int  # trainable parameters, counted the same way in every framework
    # FLOPs per sample as the framework counts them: flops_per_sample(True) for training (forward + backward),
    # (False) for a forward pass; None where it cannot count. A call: counting may run the model once.
    flops_per_sample: Callable[[bool], float | None]


@dataclass(frozen=True)
class Matmul:
    """One product in the cell's precision (Framework.matmul)."""

    step: Callable[[], None]
    element_bytes: int  # of each operand element: what the vector product's GB/s counts


@dataclass(frozen=True)
class AfterTask:
    """What the device says once the task has run (Device.after_task)."""

    # The most memory the cell's tensors held on the device at once, in MiB (allocator caches excluded); None
    # on a CPU.
    peak_memory_mb: float | None
    # memory.source (how that figure was measured; with the figure only), and what else qualifies the figures
    # (trainbench.mps_fallback_ops)
    tags: dict[str, str]


class Device(Protocol):
    """The devices a cell runs on, as its framework bound them (Framework.bind): what tasks ask of them."""

    backend: str  # cpu, cuda, rocm, mps or metal: what the figures measure
    # Devices the cell's steps run on together (data-parallel: every rank's or every replica's). A trainer's
    # samples_per_epoch and a step's batch are for all of them: batch_size per device x count.
    count: int
    # Indices (as the energy meter and NVML count them) of every GPU this cell uses on this machine, so its
    # energy is summed over all of them; [] on a CPU.
    gpu_indices: list[int]

    def synchronize(self) -> None:
        """Block until all queued device work is done (a data-parallel rank: and every rank has got here)."""

    def step_clock(self) -> StepClock | None:
        """Device events for per-step times without host synchronization, or None where the framework has
        none, or none free to record between the steps of a timed block. The task then takes percentiles from a
        separate synchronized pass and says so, with `no_step_clock_why`."""

    @property
    def no_step_clock_why(self) -> str:
        """Why `step_clock` gives None here, for the step_time_source tag of the synchronized pass: "no device
        events", or why the events there would slow the block they time (only read where it gives None)."""

    def after_task(self) -> AfterTask:
        """Called once, after the task: it may run work of its own (PyTorch on MPS: one probe step, as no peak
        counter exists there)."""

    def pool_mb(self) -> tuple[float, float] | None:
        """For batch_size=max's memory line (trainbench.cell.batch_search), in MiB: the most device memory the
        framework's allocator held since it started or since `release` (its pool where it has one, so the
        fragmentation a batch at the edge meets is in it), and the most it could hold. None on a CPU, or where
        the framework does not say."""

    def release(self, network: Any) -> bool:
        """After a batch_size=max probe, which may have run out of memory: drop what its step left on the device
        (the network's gradients, the allocator's cached blocks) and restart the peak counter. True where another
        step may then run in this process and measure its own peak (PyTorch on CUDA, eager steps); False where
        running out can leave the allocator unusable or the peak cannot restart: each probe then runs in a
        process of its own."""


class Framework(Protocol):
    """What every adapter implements: all a task asks of a framework. `Adapter(cell)` must not touch a device
    yet; `bind` comes first, the rest after it."""

    name: str

    def bind(self, device: DeviceConfig) -> Device:
        """Bind the cell to `device` (cpu, gpu, auto; `count` devices) and return what runs. Raises
        DeviceUnavailable naming what was checked."""

    def describe(self) -> Description: ...

    def build(self, model: ModelConfig, data: Dataset) -> BuiltModel:
        """A freshly initialised model for `data`'s input shape and classes, on the bound device."""

    def trainer(self, network: Any, data: Dataset, cell: CellConfig) -> Trainer: ...

    def matmul(self, n: int, shape: str, fresh_operands: bool = False) -> Matmul:
        """n x n @ n x n (square) or 1 x n @ n x 1 (vector), on random operands drawn once on the device;
        `fresh_operands`: each call draws its own on the device first. Raises DeviceUnavailable where the
        device lacks the precision's dtype."""
