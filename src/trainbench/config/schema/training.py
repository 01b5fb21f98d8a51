"""The task, precision, optim and optimize groups: what a cell does (task configs extend TaskConfig in
trainbench/tasks/<name>.py), in which precision, with which optimizer, and how far frameworks may optimize it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema.base import Choice, finite

if TYPE_CHECKING:
    from trainbench.config.schema.cell import CellConfig


@dataclass
class TaskConfig(Choice):
    """Base of every task's config: what a task is (the ClassVars below) and the checks every task shares. Its
    behaviour (what it records, how it runs) is trainbench.tasks.base.Task, which each task module's dataclass
    extends with its settings."""

    uses_model: ClassVar[bool] = True  # false: model, data and optim mean nothing to it (matmul)
    unused_groups: ClassVar[tuple[str, ...]] = ()
    timed_region: ClassVar[str] = "steps"  # what its headline figure times (trainbench.timed_region)
    sync_every_step: ClassVar[bool] = False  # fit regions: the loss read back after every step
    data_parallel: ClassVar[bool] = False  # true: it can run on several devices at once (device.count > 1)
    input_pipeline: ClassVar[bool] = False  # true: data.pipeline=loader feeds its timed steps
    # How the report shows its runs (trainbench.store.runs, trainbench.report): the setting tags only this task
    # records, each with its column's heading (shown in a table of its own when it uses no model), and the
    # report metric its figure is (None: the first of the report's metrics a run has).
    setting_tags: ClassVar[dict[str, str]] = {}
    headline: ClassVar[str | None] = None

    def check_timing(self, at: str, regions: tuple[str, ...]) -> None:
        """For tasks whose timed region is a setting: one of `regions` (the first is the default, which never
        synchronizes inside its block), and sync_every_step only with one of the others (a framework's fit)."""
        need(
            self.timed_region in regions, f"{at}.timed_region", self.timed_region, f"choose one of {', '.join(regions)}"
        )
        fits = " or ".join(regions[1:])
        need(
            not self.sync_every_step or self.timed_region != regions[0],
            f"{at}.sync_every_step",
            self.sync_every_step,
            f"reproduces the per-step read-back inside a framework's fit: use it with task.timed_region={fits} "
            f"(task.timed_region={regions[0]} never synchronizes inside its block)",
        )

    def check_cell(self, cell: CellConfig) -> None:
        """Raise ConfigError for what this task cannot do with the cell's other groups (judged at compose time)."""
        if self.uses_model and not self.input_pipeline:
            need(
                cell.data.pipeline == "device",
                "data.pipeline",
                cell.data.pipeline,
                f"task={self.name} times steps on batches already on the device, so no input pipeline is "
                "timed: use data.pipeline=device, or task=train to time a loader",
            )


AUTOCAST_DTYPES = (None, "bfloat16", "float16")


@schema("precision", "precision")
@dataclass
class PrecisionConfig(Choice):
    tf32: bool = False  # TF32 tensor-core math for fp32 matmuls and convolutions (NVIDIA Ampere and newer)
    autocast: str | None = None  # null | bfloat16 | float16: mixed precision (fp32 weights and optimizer state)

    def check(self, at: str) -> None:
        need(self.autocast in AUTOCAST_DTYPES, f"{at}.autocast", self.autocast, "null, bfloat16 or float16")


@dataclass
class OptimConfig(Choice):
    lr: float = 0.01
    weight_decay: float = 0.0  # L2 penalty (SGD, Adam: added to the gradient as PyTorch does; AdamW: decoupled)

    def check(self, at: str) -> None:
        need(finite(self.lr) and 0 < self.lr <= 100, f"{at}.lr", self.lr, "must be a finite number > 0 (and <= 100)")
        need(
            finite(self.weight_decay) and 0 <= self.weight_decay <= 10,
            f"{at}.weight_decay",
            self.weight_decay,
            "must be a finite number >= 0",
        )


@schema("optim", "sgd")
@dataclass
class SgdConfig(OptimConfig):
    momentum: float = 0.9

    def check(self, at: str) -> None:
        super().check(at)
        need(finite(self.momentum) and 0 <= self.momentum < 1, f"{at}.momentum", self.momentum, "must be in [0, 1)")


@schema("optim", "adam")
@dataclass
class AdamConfig(OptimConfig):
    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def check(self, at: str) -> None:
        super().check(at)
        for key in ("beta1", "beta2"):
            value = getattr(self, key)
            need(finite(value) and 0 <= value < 1, f"{at}.{key}", value, "must be in [0, 1)")
        need(finite(self.eps) and 0 < self.eps < 1, f"{at}.eps", self.eps, "must be a small number > 0, e.g. 1e-8")


@schema("optimize", "optimize")
@dataclass
class OptimizeConfig(Choice):
    """How hard each framework is asked to go: `none` runs models as written, `fast` asks for its best. Each
    framework expands `fast` into its own knobs (its config's `auto` values, e.g. framework.channels_last)."""

    compile: bool = False  # PyTorch: torch.compile; TensorFlow: XLA (jit_compile); JAX always compiles

    def fast(self) -> bool:
        """Whether each framework is asked for its best: what a framework knob left at `auto` follows."""
        return self.name == "fast"
