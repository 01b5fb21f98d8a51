"""The interface every framework adapter implements, and what adapters hand back.

An adapter is one module (named by conf/framework/<name>.yaml) with a class `Adapter` implementing
`Framework`. It is the only module that imports its framework, and it is imported only inside a cell's
own process. Tasks (trainbench.tasks) drive adapters through this interface and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from trainbench.data import Dataset


class DeviceUnavailable(RuntimeError):
    """The requested device does not exist here. str() says what was checked."""


@dataclass(frozen=True)
class EpochStats:
    epoch: int  # from 1
    seconds: float  # synchronized wall time of the training pass (validation excluded)
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


OnEpochEnd = Callable[[EpochStats], None]


class Framework(Protocol):
    name: str

    def select_device(self, requested: str) -> str:
        """Bind the cell to a device: `cpu`, `gpu` or `auto` -> the backend that runs ("cpu", "cuda",
        "mps", "metal"). Raises DeviceUnavailable naming what was checked."""

    def versions(self) -> dict[str, str]:
        """sw.* tags: the framework and the libraries under it, as loaded in this process."""

    def build_model(self, model_cfg: dict[str, Any], data: Dataset) -> Any:
        """A freshly initialised model for `data`'s input shape and classes."""

    def num_parameters(self, model: Any) -> int:
        """Trainable parameters, counted the same way in every framework."""

    def flops_per_sample(self, model: Any, data: Dataset, cfg: dict[str, Any]) -> float | None:
        """Training FLOPs (forward + backward) per sample as the framework counts them; None if it cannot."""

    def fit(self, model: Any, data: Dataset, cfg: dict[str, Any], on_epoch_end: OnEpochEnd) -> None:
        """Train for cfg["epochs"] epochs, timing each through trainbench.timing; call on_epoch_end
        after each epoch's validation, outside the timed region."""

    def resident_train_step(self, model: Any, data: Dataset, cfg: dict[str, Any]) -> Callable[[], None]:
        """A callable doing one full training step on one batch already on the device."""

    def synchronize(self) -> None:
        """Block until all queued device work is done."""

    def peak_device_memory_mb(self) -> float | None:
        """Peak device memory this process allocated, or None where it cannot be read."""

    def flags(self) -> dict[str, str]:
        """The numeric and optimisation flags in force (tf32, autocast dtype, compile, ...) as tags."""
