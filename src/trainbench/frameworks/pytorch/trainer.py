"""The PyTorch trainer: the model bound to its data, optimizer and loss on the cell's device, stepped by the
train, benchmark and inference tasks (trainbench.frameworks.base.Trainer). What each step does, and why, is
in trainbench.frameworks.pytorch.adapter's docstring; the adapter builds these, and the data-parallel
trainer (trainbench.frameworks.pytorch.data_parallel) extends Trainer. Imports neither of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.data import Dataset
    from trainbench.frameworks.pytorch.adapter import Adapter

KEPT_LOGITS_BYTES = 256 * 2**20  # an epoch's logits kept for one argmax after it, when no larger than this
CAPTURE_WARMUP_STEPS = 3  # eager steps on a side stream before capture, as PyTorch's CUDA-graph recipe asks


class Trainer:
    """The model, its data, optimizer and loss, bound on the device: what the train, benchmark and inference
    tasks step through (trainbench.frameworks.base.Trainer)."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        from trainbench.frameworks.pytorch import models

        torch = adapter.torch
        self.adapter, self.model, self.data, self.cell, self.torch = adapter, model, data, cell, torch
        self.device = adapter.device
        self.batch_size = int(cell.batch_size)
        self.inputs, self.labels, self.prepared = self._training_split()
        self.samples_per_epoch = len(self.labels)
        self.steps_per_epoch = models.ceil_div(self.samples_per_epoch, self.batch_size)
        self.loss_fn = models.loss_function(cell.model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = models.optimizer(params, cell.optim, fused=adapter.fused(), capturable=adapter.captures())
        self.scaler = torch.amp.GradScaler(self.device.type) if adapter.autocast == torch.float16 else None
        self.generator = torch.Generator(device=self.device).manual_seed(cell.seed)
        self.order = torch.arange(self.samples_per_epoch, device=self.device)
        self.keeps_logits = data.num_classes * self.samples_per_epoch * 4 <= KEPT_LOGITS_BYTES
        self.graphed = adapter.graphs_compiled()
        self._forward = self._forward_function(with_predictions=True)
        # An epoch's partial last batch is compiled without CUDA graphs. With them, its graph would run eagerly
        # in the first epoch and be recorded in the second (cudagraph trees record a graph on its second call),
        # inside a timed epoch: a capture and two host synchronizations. Without, it costs the first epoch's
        # compilation only, and once an epoch the launches a graph would save.
        partial = self.samples_per_epoch % self.batch_size != 0
        self._partial_forward = (
            self._forward_function(with_predictions=True, graphs=False) if self.graphed and partial else None
        )
        self._forward_loss_only: Callable[[Any, Any], tuple[Any, Any]] | None = None
        self._validation: tuple[Any, Any, bool] | None = None
        self._losses: list[Any] = []
        self._predictions: list[Any] = []
        self._captured: CapturedEpoch | None = None

    def _training_split(self) -> tuple[Any, Any, bool]:
        return self.adapter.prepared_split(self.data.train, self.data)

    # -- one step -----------------------------------------------------------------------------
    def _forward_function(self, with_predictions: bool, graphs: bool = True) -> Callable[[Any, Any], tuple[Any, Any]]:
        """forward + loss (+ what the epoch's accuracy needs): what torch.compile gets when compile is on.
        The accuracy needs either the logits (a view, no kernel: kept when an epoch's logits fit
        KEPT_LOGITS_BYTES, their argmax taken once after the epoch) or, when they do not fit or compile
        fuses it for free, their argmax. Autocast's weight cache is off under capture, as CUDA graphs require."""
        model, loss_fn, adapter = self.model, self.loss_fn, self.adapter
        mixed, cache = adapter.autocast is not None, not adapter.captures()
        argmax = with_predictions and (adapter.compiles() or not self.keeps_logits)

        def forward_loss(x: Any, y: Any) -> tuple[Any, Any]:
            logits = model(x)
            loss = loss_fn(logits.float() if mixed else logits, y)
            if not with_predictions:
                return loss, None
            return loss, (logits.argmax(1) if argmax else logits.detach())  # argmax: integers, no graph

        run = adapter.compiled(forward_loss, graphs) if adapter.compiles() else forward_loss

        def autocast_forward_loss(x: Any, y: Any) -> tuple[Any, Any]:
            # Autocast around the compiled function, as in PyTorch's AMP recipe: entered inside it, the compiled
            # step spent longer in its GEMMs (results/2026-11-22-gpu).
            with adapter.autocast_context(cache):
                return run(x, y)

        return autocast_forward_loss

    def _update(self, loss: Any) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()

    def train_on(self, x: Any, y: Any) -> tuple[Any, Any]:
        partial_forward = self._partial_forward if len(y) != self.batch_size else None
        graphed = self.graphed and partial_forward is None
        self.optimizer.zero_grad(set_to_none=True)
        if graphed:
            self.torch.compiler.cudagraph_mark_step_begin()
        loss, predicted = (partial_forward or self._forward)(x, y)
        self._update(loss)
        if graphed:  # kept until the epoch ends, past the replays that reuse the graph's outputs
            return loss.detach().clone(), predicted.clone()
        return loss, predicted

    def _train_without_metrics(self, x: Any, y: Any) -> None:
        if self._forward_loss_only is None:
            self._forward_loss_only = self._forward_function(with_predictions=False)
        self.optimizer.zero_grad(set_to_none=True)
        if self.graphed:
            self.torch.compiler.cudagraph_mark_step_begin()
        loss, _ = self._forward_loss_only(x, y)
        self._update(loss)

    def _batch(self, index: int) -> tuple[Any, Any]:
        positions = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        x = self.inputs[positions]
        if not self.prepared:
            x = self.adapter.prepare(x, self.data)
        return x, self.labels[positions]

    # -- the train task's epoch ---------------------------------------------------------------
    def begin_epoch(self, epoch: int) -> None:
        self.model.train()
        self.order = self.torch.randperm(self.samples_per_epoch, generator=self.generator, device=self.device)
        self._losses, self._predictions = [], []
        if self.adapter.captures() and self.steps_per_epoch > 1:
            if self._captured is None:
                self._captured = CapturedEpoch(self)
            self._captured.begin(self.order)

    def step(self, index: int) -> None:
        if self._captured is not None and self._captured.covers(index):
            self._captured.replay(index)
            return
        loss, predicted = self.train_on(*self._batch(index))
        self._losses.append(loss.detach())
        self._predictions.append(predicted)

    def probe_step(self) -> None:
        """A step as the epoch runs it, on its first batch, its outputs dropped: what the MPS memory probe runs
        after the last epoch (whose kept losses and logits are still held, as in its last step)."""
        self.train_on(*self._batch(0))

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        torch = self.torch
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        if self._captured is not None:
            captured_loss, captured_correct = self._captured.sums()
            loss_sum, correct = loss_sum + captured_loss, correct + captured_correct
        if self._losses:
            first = self.steps_per_epoch - len(self._losses)  # the batches run eagerly (all, or the tail)
            sizes = [
                min(self.batch_size, self.samples_per_epoch - i * self.batch_size)
                for i in range(first, self.steps_per_epoch)
            ]
            eager_loss, eager_correct = self._eager_sums(sizes, self.labels[self.order[first * self.batch_size :]])
            loss_sum, correct = loss_sum + eager_loss, correct + eager_correct
        return EpochResult(loss_sum.item() / self.samples_per_epoch, correct.item() / self.samples_per_epoch)

    def _eager_sums(self, sizes: list[int], labels: Any, dtype: Any = None) -> tuple[Any, Any]:
        """(loss sum, correct predictions) of the eagerly run batches of `sizes` samples, from the losses and
        predictions kept as views during the epoch: the kernels run here, after the timed block."""
        torch = self.torch
        dtype = dtype or torch.float32
        weights = torch.tensor(sizes, device=self.device, dtype=dtype)
        loss_sum = (torch.stack([loss.to(dtype) for loss in self._losses]) * weights).sum()
        predicted = torch.cat(self._predictions)
        if predicted.dim() == 2:  # the kept logits: one argmax for the whole epoch
            predicted = predicted.argmax(1)
        return loss_sum, (predicted == labels).sum()

    def evaluate(self) -> tuple[float | None, float | None]:
        if len(self.data.val) == 0:
            return None, None
        torch = self.torch
        if self._validation is None:
            self._validation = self.adapter.prepared_split(self.data.val, self.data)
        inputs, labels, prepared = self._validation
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        with torch.no_grad():
            for start in range(0, len(labels), self.batch_size):
                x, y = inputs[start : start + self.batch_size], labels[start : start + self.batch_size]
                if not prepared:
                    x = self.adapter.prepare(x, self.data)
                with self.adapter.autocast_context():
                    logits = self.model(x).float()
                loss_sum += self.loss_fn(logits, y) * len(y)
                correct += (logits.argmax(1) == y).sum()
        self.model.train()
        return loss_sum.item() / len(labels), correct.item() / len(labels)

    # -- the benchmark and inference tasks ----------------------------------------------------
    def resident_step(self) -> Callable[[], None]:
        """A training step on the first batch, kept on the device (captured as one CUDA graph under capture)."""
        x, y = self._batch(0)  # prepared here, once, outside the timed steps
        self.model.train()
        if self.adapter.captures():
            return capture_step(self.torch, lambda: self._train_without_metrics(x, y), self.optimizer)

        def one_step() -> None:
            self._train_without_metrics(x, y)

        self.adapter.probe_step = one_step
        return one_step

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        torch = self.torch
        count = min(batch_size, len(self.labels))
        x = self.inputs[:count] if self.prepared else self.adapter.prepare(self.inputs[:count], self.data)
        self.model.eval()
        forward = self.model
        if self.adapter.compiles():
            forward = self.adapter.compiled(self.model)

        def predict() -> None:
            with torch.inference_mode(), self.adapter.autocast_context():
                forward(x)

        if self.adapter.captures():
            return capture_step(torch, predict, None)
        self.adapter.probe_step = predict
        return predict


def leave_stops_to_the_cell(worker_id: int) -> None:
    """In each DataLoader worker: a stop (Ctrl-C, SIGTERM, SIGHUP reach the whole process group) is the cell's
    process's to answer; it closes its loader, which ends the workers. A worker that answered on its own would
    print a traceback (its half-sent batch's connection reset, or its death by SIGTERM reported by the cell's
    SIGCHLD handler at exit). A worker whose cell dies outright is killed by the kernel (Linux), so none outlives
    its cell."""
    import contextlib
    import signal
    import sys

    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2):  # SIGUSR2: the cell's PARENT_DIED
        signal.signal(stop, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    sys.excepthook = _quiet_when_the_cell_hangs_up


def _quiet_when_the_cell_hangs_up(kind: type[BaseException], error: BaseException, trace: Any) -> None:
    """A worker hands its batches' storage to the cell through multiprocessing's descriptor sharer, whose thread
    reports its errors through sys.excepthook: a connection the cell broke off means the cell is stopping (it
    records why), not a bug in the worker."""
    import sys

    if issubclass(kind, (ConnectionError, EOFError)):
        return
    sys.__excepthook__(kind, error, trace)


class LoaderTrainer(Trainer):
    """data.pipeline=loader: batches from a torch.utils.data.DataLoader, prepared on the host by its workers
    and copied to the device inside the timed epoch. The iterator is made by the epoch's first step, so
    starting the workers (the first epoch; later ones reuse them) is timed too, as a training loop pays it."""

    def _training_split(self) -> tuple[Any, Any, bool]:
        return None, self.torch.from_numpy(self.data.train.labels), True  # the split stays on the host

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        from trainbench.data import HostSamples

        super().__init__(adapter, model, data, cell)
        torch = self.torch
        workers = cell.data.loader_workers
        self.pinned = self.device.type == "cuda"
        self.loader = torch.utils.data.DataLoader(
            HostSamples(data.train, data),
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(cell.seed),
            pin_memory=self.pinned,
            persistent_workers=workers > 0,
            worker_init_fn=leave_stops_to_the_cell,
        )
        self._batches: Any = None
        self._labels: list[Any] = []
        self.input_wait_s = 0.0

    def begin_epoch(self, epoch: int) -> None:
        self.model.train()
        self._batches, self._losses, self._predictions, self._labels = None, [], [], []
        self.input_wait_s = 0.0

    def step(self, index: int) -> None:
        import time

        if self._batches is None:
            self._batches = iter(self.loader)
        waiting = time.perf_counter()
        x, y = next(self._batches)
        self.input_wait_s += time.perf_counter() - waiting
        x = x.to(self.device, non_blocking=self.pinned)
        if self.adapter.channels_last():
            x = x.contiguous(memory_format=self.torch.channels_last)
        y = y.to(self.device, non_blocking=self.pinned)
        loss, predicted = self.train_on(x, y)
        self._losses.append(loss.detach())
        self._predictions.append(predicted)
        self._labels.append(y)

    def probe_step(self) -> None:
        x, y = next(iter(self.loader))
        self.train_on(x.to(self.device), y.to(self.device))

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        loss_sum, correct = self._eager_sums([len(y) for y in self._labels], self.torch.cat(self._labels))
        count = self.samples_per_epoch
        return EpochResult(loss_sum.item() / count, correct.item() / count, self.input_wait_s)


class CapturedEpoch:
    """The full batches of an epoch as one CUDA graph replayed per batch, as a hand-written whole-step capture
    does it (benchmarks/bare_loops.py's graph variant): before each replay the batch's sample positions are
    copied into the graph's static index buffer; the graph gathers the batch, runs forward, backward and the
    optimizer step, and writes the logits to their samples' rows. A last partial batch runs eagerly on the
    same weights, gradients and optimizer state.

    Every kernel here is paid on each of the epoch's steps (the seed MLP's step is ~260 us on an H100, a small
    kernel 1-3 us), so the metrics cost one kernel beyond a bare graph's: the logits written to their rows.
    The loss and accuracy are computed from those rows after the timed block, by the step's own loss function.
    (An in-graph step counter and loss sum instead run 0.3% slower on an H100; the logits' copy costs 1.5-2%:
    see results/2026-11-24-h100.) When an epoch's logits are too large to keep
    (KEPT_LOGITS_BYTES), the graph keeps their argmax and sums the loss instead: two kernels and the argmax."""

    def __init__(self, trainer: Trainer) -> None:
        torch = trainer.torch
        self.trainer, self.torch = trainer, torch
        size, device = trainer.batch_size, trainer.device
        self.full_steps = trainer.samples_per_epoch // size
        self.order = torch.arange(trainer.samples_per_epoch, device=device)
        # The epoch's full batches as rows of the permutation (a view): row i is what replay(i) copies in.
        self.batches = self.order[: self.full_steps * size].view(self.full_steps, size)
        self.positions = self.batches[0].clone()  # the graph's static index buffer
        self.loss_sum: Any = None if trainer.keeps_logits else torch.zeros((), device=device)
        # Row i: the prediction for sample i (logits or their argmax), made in the first warm-up run, whose
        # shape and dtype it takes; the warm-ups run before the capture records any address.
        self.predictions: Any = None
        self.graph = _record(torch, self._body, trainer.optimizer)
        self.begin(self.order)

    def _body(self) -> None:
        trainer, positions = self.trainer, self.positions
        x = trainer.inputs.index_select(0, positions)
        if not trainer.prepared:
            x = trainer.adapter.prepare(x, trainer.data)
        y = trainer.labels.index_select(0, positions)
        loss, predicted = trainer._forward(x, y)
        loss.backward()
        trainer.optimizer.step()
        if self.predictions is None:
            shape = (self.trainer.samples_per_epoch, *predicted.shape[1:])
            self.predictions = self.torch.zeros(shape, dtype=predicted.dtype, device=predicted.device)
        self.predictions.index_copy_(0, positions, predicted.detach())
        if self.loss_sum is not None:
            self.loss_sum.add_(loss.detach(), alpha=trainer.batch_size)

    def begin(self, order: Any) -> None:
        self.order.copy_(order)
        if self.loss_sum is not None:
            self.loss_sum.zero_()

    def covers(self, index: int) -> bool:
        return index < self.full_steps

    def replay(self, index: int) -> None:
        self.positions.copy_(self.batches[index])
        self.graph.replay()

    def sums(self) -> tuple[Any, Any]:
        """(loss sum, correct predictions) over the captured batches: a few kernels once an epoch, after its
        timed block."""
        covered = self.batches.view(-1)
        predicted = self.predictions.index_select(0, covered)
        labels = self.trainer.labels.index_select(0, covered)
        loss_sum = self.loss_sum
        if predicted.dim() == 2:  # kept logits: the loss as each step computed it (a batch mean), summed
            loss_sum = self.trainer.loss_fn(predicted.float(), labels) * len(labels)
            predicted = predicted.argmax(1)
        return loss_sum, (predicted == labels).sum()


def _record(torch: Any, body: Callable[[], None], optimizer: Any) -> Any:
    """PyTorch's whole-network capture recipe: a few eager runs on a side stream (allocations, cuBLAS
    handles, optimizer state), then gradients set to None so backward allocates them from the graph's pool,
    then one recorded run. (The forward's autocast runs without its weight cache under capture.)"""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(CAPTURE_WARMUP_STEPS):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body()
    return graph


def capture_step(torch: Any, body: Callable[[], Any], optimizer: Any) -> Callable[[], None]:
    """`body` (a train step on a fixed batch, or a forward pass) recorded once as a CUDA graph."""
    return _record(torch, body, optimizer).replay
