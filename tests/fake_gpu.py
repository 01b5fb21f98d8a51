"""A fake CUDA device for batch_size=max's probing process (we have no GPU here), named as the adapter of a
subclass of the framework's config (tests/test_measurement.py: an adapter is never a setting).

A training step of batch b needs FIXED_MB + PER_SAMPLE_MB x b of the CAPACITY_MB it reports, and fits under
FITS_UNDER_MB (fragmentation leaves less than the capacity); more raises an error named as PyTorch's (torch.OutOfMemoryError, whose class name is how trainbench recognises it). Like PyTorch on CUDA, it
says another step may run in the same process after a probe (RECOVERS), and counts what the search asks of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from trainbench.frameworks.base import BuiltModel

FIXED_MB, PER_SAMPLE_MB, CAPACITY_MB, FITS_UNDER_MB = 5_400.0, 75.0, 80_000.0, 77_000.0


class OutOfMemoryError(RuntimeError):
    pass


class Adapter:
    RECOVERS = True
    made: ClassVar[list[Adapter]] = []  # every instance, for the test to read

    def __init__(self, cell: Any) -> None:
        self.cell = cell
        self.peak_mb = 0.0
        self.models_built = self.resets = 0
        self.steps: list[int] = []  # the batch of every step run
        Adapter.made.append(self)

    # the framework's half of the contract (trainbench.frameworks.base.Framework)
    def bind(self, device: Any) -> Adapter:
        return self  # the device's half, below

    def build(self, model: Any, data: Any) -> BuiltModel:
        from trainbench.frameworks.base import BuiltModel

        self.models_built += 1
        self.peak_mb = max(self.peak_mb, FIXED_MB)
        return BuiltModel(object(), 0, lambda training: None)

    def trainer(self, network: Any, data: Any, cell: Any) -> Any:
        return _Trainer(self, int(cell.batch_size))

    # the device's (trainbench.frameworks.base.Device)
    backend = "cuda"

    def synchronize(self) -> None:
        pass

    def pool_mb(self) -> tuple[float, float]:
        return self.peak_mb, CAPACITY_MB

    def release(self, network: Any) -> bool:
        self.resets += 1
        self.peak_mb = FIXED_MB if network is not None else 0.0
        return self.RECOVERS


class _Trainer:
    def __init__(self, adapter: Adapter, batch: int) -> None:
        self.adapter, self.batch = adapter, batch

    def resident_step(self) -> Any:
        def step() -> None:
            need = FIXED_MB + PER_SAMPLE_MB * self.batch
            self.adapter.steps.append(self.batch)
            if need > FITS_UNDER_MB:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 3.06 GiB. GPU 0 has a total capacity")
            self.adapter.peak_mb = max(self.adapter.peak_mb, need)

        return step


def largest_batch() -> int:
    """The largest batch that fits within batch_size=max's headroom."""
    from trainbench.cell.batch_search import HEADROOM

    return int((min(FITS_UNDER_MB, (1 - HEADROOM) * CAPACITY_MB) - FIXED_MB) // PER_SAMPLE_MB)
