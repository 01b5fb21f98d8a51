"""The PyTorch trainer of a data-parallel cell: the model in DistributedDataParallel, each global batch split
by rank.

It keeps what a 1-device cell sees per epoch: every rank draws the same permutation (same seed), global
batch i is batch_size x world_size consecutive positions of it, and rank r trains on its slice (DDP then
averages the gradients: one step on the global batch). The epoch's loss and accuracy are summed over
ranks. batch_size stays per device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.pytorch.trainer import Trainer

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.data import Dataset
    from trainbench.frameworks.pytorch.adapter import Adapter
    from trainbench.frameworks.pytorch.distributed import World


def shard(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """(offset, length) of rank's part of a global batch of `size`: as equal as can be, in rank order."""
    base, extra = divmod(size, world_size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


class DataParallelTrainer(Trainer):
    """The PyTorch trainer with the model in DistributedDataParallel and each global batch split by rank."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.world: World = adapter.world
        self.module = model
        device_ids = [adapter.device.index] if adapter.device.type == "cuda" else None
        # Gradients as views into DDP's all-reduce buckets: one copy of the gradients, not two (BERT-Large: 1.3 GB
        # less per device), as a hand-written DDP loop sets it up (benchmarks/data_parallel.py).
        wrapped = DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)
        super().__init__(adapter, wrapped, data, cell)
        self.split_size = self.samples_per_epoch
        self.global_batch = self.batch_size * self.world.size
        full, tail = divmod(self.split_size, self.global_batch)
        if 0 < tail < self.world.size:  # a last batch too small to give every rank a sample is left out
            self.samples_per_epoch -= tail
            tail = 0
        self.steps_per_epoch = full + (1 if tail else 0)
        self._labels: list[Any] = []

    def _batch(self, index: int) -> tuple[Any, Any]:
        start = index * self.global_batch
        offset, length = shard(min(self.global_batch, self.samples_per_epoch - start), self.world.rank, self.world.size)
        positions = self.order[start + offset : start + offset + length]
        x = self.inputs[positions]
        if not self.prepared:
            x = self.adapter.prepare(x, self.data)
        return x, self.labels[positions]

    def begin_epoch(self, epoch: int) -> None:
        self.model.train()
        # The same permutation on every rank (same seed), as the 1-device cell draws it.
        self.order = self.torch.randperm(self.split_size, generator=self.generator, device=self.device)
        self._losses, self._predictions, self._labels = [], [], []

    def step(self, index: int) -> None:
        x, y = self._batch(index)
        loss, predicted = self.train_on(x, y)
        self._losses.append(loss.detach())
        self._predictions.append(predicted)
        self._labels.append(y)

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        torch = self.torch
        loss_sum, correct = self._eager_sums([len(y) for y in self._labels], torch.cat(self._labels), torch.float64)
        totals = torch.stack([loss_sum, correct.double()])
        torch.distributed.all_reduce(totals)  # the epoch's sums over every rank's samples
        loss_total, correct_total = totals.tolist()
        return EpochResult(loss_total / self.samples_per_epoch, correct_total / self.samples_per_epoch)

    def evaluate(self) -> tuple[float | None, float | None]:
        """The recording rank alone (rank 0 on one host), on its replica (every rank's weights are the same); the
        others go on to the next epoch's barrier. Only its figures are logged."""
        if not self.world.records:
            return None, None
        with self._unwrapped():
            return super().evaluate()

    def resident_step(self) -> Callable[[], None]:
        """The same per-device batch on every rank (a benchmark times steps, not data): the first
        batch_size samples, as a 1-device cell takes them."""
        x, y = Trainer._batch(self, 0)
        self.model.train()

        def one_step() -> None:
            self._train_without_metrics(x, y)

        return one_step

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        with self._unwrapped():
            return super().inference_step(batch_size)

    @contextlib.contextmanager
    def _unwrapped(self) -> Iterator[None]:
        wrapped, self.model = self.model, self.module
        try:
            yield
        finally:
            self.model = wrapped
