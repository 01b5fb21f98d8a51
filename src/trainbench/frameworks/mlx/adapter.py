"""MLX adapter: the only module, with .models, that imports mlx for a cell. gpu = Metal on Apple silicon,
CUDA where an MLX CUDA build is installed; else the CPU.

MLX is lazy: an operation records work, `mx.eval` computes it. Each train step therefore ends with
`mx.async_eval` of the new state (queued, not waited for), and `synchronize` waits for everything queued,
at every timed boundary, as `torch.cuda.synchronize` does. MLX has no device events: per-step percentiles
come from the benchmark task's separate synchronized pass (on a CPU too: MLX computes on its own thread).

Inputs are prepared once on the host (scaled, resized, normalised, NHWC: trainbench.data.prepare_images,
the same steps as the other frameworks) and moved to the device; each step gathers its batch from the
epoch's permutation. optimize.compile compiles the step with mx.compile (model, optimizer, loss scale and
random state passed in and out, so BatchNorm statistics and dropout stay right).

Precision as in the other frameworks: fp32 means no TF32 (MLX otherwise computes fp32 products in TF32 on
NVIDIA GPUs), tf32 needs CUDA. Mixed precision: MLX has no autocast, so the fp32 weights stay the master
copy and each forward pass runs on a bf16/fp16 working copy of them (token ids stay integers); training
takes the gradients in that precision and applies them, in fp32, to the master copy; fp16 scales the loss
as torch's GradScaler does. Peak memory is MLX's own counter (its allocator's peak over the whole cell, as
torch's max_memory_allocated); on a CPU, as elsewhere, none is reported.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.base import NO_DEVICE_EVENTS

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig, ModelConfig
    from trainbench.data import Dataset, Split
    from trainbench.frameworks.base import AfterTask, BuiltModel, Description, Matmul, StepClock


class Adapter:
    """`frameworks.base.Framework` on MLX (bind, describe, build, trainer, matmul); the Device, Trainers and step clock
    it hands out are the classes below, each held to its protocol at the end of this module."""

    name = "mlx"

    def __init__(self, cell: CellConfig) -> None:
        import os
        import platform

        from trainbench.frameworks.base import DeviceUnavailable
        from trainbench.frameworks.mlx import why_no_mlx

        # Read once, at the first product: "fp32" must mean fp32 on CUDA (MLX's default there is TF32).
        os.environ["MLX_ENABLE_TF32"] = "1" if cell.precision.tf32 else "0"
        try:
            import mlx.core as mx
        except ImportError as error:  # requirements.txt leaves MLX out where it has no wheel (macOS 13, Intel Macs)
            why = why_no_mlx(platform.system(), platform.machine(), platform.mac_ver()[0])
            detail = next(iter(str(error).splitlines()), type(error).__name__)  # "No module named 'mlx'"
            raise DeviceUnavailable(f"{why} ({detail})") from error

        self.mx, self.cell = mx, cell
        self.backend = "cpu"
        self.pending: Any = None
        self.dtype = {None: None, "bfloat16": mx.bfloat16, "float16": mx.float16}[cell.precision.autocast]

    # -- the contract (trainbench.frameworks.base.Framework) ---------------------------------------------------
    def bind(self, device: DeviceConfig) -> MlxDevice:
        from trainbench.frameworks.base import DeviceUnavailable

        mx = self.mx
        metal = mx.metal.is_available()
        cuda = hasattr(mx, "cuda") and mx.cuda.is_available()
        if device.name == "cpu":
            backend = "cpu"
        elif metal or cuda:
            backend = "metal" if metal else "cuda"
        elif device.name == "gpu":
            raise DeviceUnavailable(
                f"no GPU for MLX {self.version()}: Metal is not available (Apple silicon macOS with `pip install "
                "mlx`), and this MLX build has no CUDA backend (NVIDIA: `pip uninstall -y mlx-cpu && pip install "
                "'mlx[cuda13]'`)"
            )
        else:
            backend = "cpu"
        precision = self.cell.precision
        if precision.tf32 and precision.autocast is None and backend != "cuda":
            raise DeviceUnavailable(
                f"precision=tf32 needs an NVIDIA GPU (Ampere or newer); this cell got {backend}, "
                "which computes fp32: use precision=fp32"
            )
        mx.set_default_device(mx.cpu if backend == "cpu" else mx.gpu)
        mx.random.seed(self.cell.seed)
        self.backend = backend
        return MlxDevice(mx, backend)

    def version(self) -> str:
        return importlib.metadata.version("mlx")

    def describe(self) -> Description:
        from trainbench.frameworks.base import Description

        return Description(self.version(), {**self._versions(), **self._flags()})

    def _versions(self) -> dict[str, str]:
        tags = {"sw.mlx": self.version()}
        for backend in ("mlx-metal", "mlx-cuda-13", "mlx-cuda-12", "mlx-cpu"):
            try:
                tags[f"sw.{backend.replace('-', '_')}"] = importlib.metadata.version(backend)
            except importlib.metadata.PackageNotFoundError:
                continue
        return tags

    def _flags(self) -> dict[str, str]:
        from trainbench.config.schema import VisionModel

        return {
            "trainbench.tf32": str(bool(self.cell.precision.tf32) and self.backend == "cuda").lower(),
            "trainbench.autocast": self.cell.precision.autocast or "none",
            "trainbench.compile": str(bool(self.cell.optimize.compile)).lower(),
            "trainbench.channels_last": str(isinstance(self.cell.model, VisionModel)).lower(),  # MLX is NHWC
            "mlx.master_weights": "fp32",
            "mlx.loss_scale": "dynamic" if self.cell.precision.autocast == "float16" else "none",
        }

    def build(self, model: ModelConfig, data: Dataset) -> BuiltModel:
        from trainbench.frameworks.base import BuiltModel
        from trainbench.frameworks.mlx import models

        self.mx.random.seed(self.cell.seed)
        if data.kind == "text":
            network = models.text_classifier(model, data.seq_len, data.num_classes, mask_padding=data.padded)  # type: ignore[arg-type]
        else:
            network = models.build(model, (data.image_size, data.image_size, data.channels), data.num_classes)
        self.mx.eval(network.parameters())
        return BuiltModel(
            network, models.num_parameters(network), lambda training: self._flops_per_sample(network, data, training)
        )

    def _flops_per_sample(self, network: Any, data: Dataset, training: bool) -> float | None:
        """Counted as torch.utils.flop_counter counts the PyTorch build: every Linear and convolution of
        one forward pass on one sample, recorded as it runs (training: forward + backward). Attention is no
        Linear: models with attention count themselves (ModelConfig.flops_per_sample)."""
        from trainbench.measure.flops import dense_and_conv_flops

        layers = _matrix_products(self.mx, network, self._inputs(data.train.first(1), data))
        return dense_and_conv_flops(layers, training)

    def trainer(self, network: Any, data: Dataset, cell: CellConfig) -> Trainer:
        return Trainer(self, network, data, cell)

    def matmul(self, n: int, shape: str, fresh_operands: bool = False) -> Matmul:
        from trainbench.frameworks.base import Matmul

        mx = self.mx
        dtype = self.dtype or mx.float32
        element_bytes = 4 if self.dtype is None else 2
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        if fresh_operands:

            def draw_and_multiply() -> None:  # lazy: the draws run with the product
                self.pending = mx.random.normal(a_shape).astype(dtype) @ mx.random.normal(b_shape).astype(dtype)
                mx.async_eval(self.pending)

            return Matmul(draw_and_multiply, element_bytes)
        a = mx.random.normal(a_shape).astype(dtype)
        b = mx.random.normal(b_shape).astype(dtype)
        mx.eval(a, b)

        def multiply() -> None:
            self.pending = a @ b
            mx.async_eval(self.pending)

        return Matmul(multiply, element_bytes)

    # -- inputs -------------------------------------------------------------------------------
    def _inputs(self, split: Split, data: Dataset) -> Any:
        from trainbench.data import prepare_images

        if data.kind == "text":
            return self.mx.array(split.inputs.astype("int32"))
        return self.mx.array(prepare_images(split.inputs, data, channels_last=True))


class MlxDevice:
    """The device an MLX cell runs on (trainbench.frameworks.base.Device): one, as MLX's distributed API is not
    used yet. `synchronize` waits for everything queued (mx.synchronize)."""

    memory_source = "mlx get_peak_memory"
    no_step_clock_why = NO_DEVICE_EVENTS

    def __init__(self, mx: Any, backend: str) -> None:
        self.mx = mx
        self.backend = backend
        self.count = 1
        self.gpu_indices = [0] if backend == "cuda" else []

    def synchronize(self) -> None:
        self.mx.synchronize()

    def step_clock(self) -> StepClock | None:
        return None  # no device events; lazy evaluation makes the host clock meaningless even on a CPU

    def after_task(self) -> AfterTask:
        from trainbench.frameworks.base import AfterTask

        if self.backend == "cpu":
            return AfterTask(None, {})
        return AfterTask(float(self.mx.get_peak_memory()) / 2**20, {"memory.source": self.memory_source})

    def pool_mb(self) -> tuple[float, float] | None:
        """The peak against MLX's memory limit (on Metal, 1.5 x the recommended working set by default)."""
        if self.backend == "cpu":
            return None
        return float(self.mx.get_peak_memory()) / 2**20, float(self.mx.get_memory_limit()) / 2**20

    def release(self, network: Any) -> bool:
        """Never: MLX's recovery after running out of memory is untested here; each probe gets a process."""
        return False


class Trainer:
    """The model, its data, optimizer and loss, bound on the device (trainbench.frameworks.base.Trainer)."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        import math

        import mlx.nn as nn

        mx = self.mx = adapter.mx
        self.adapter, self.model, self.data, self.cell, self.nn = adapter, model, data, cell, nn
        self.dtype = adapter.dtype
        self.batch_size = int(cell.batch_size)
        self.inputs = adapter._inputs(data.train, data)
        self.labels = mx.array(data.train.labels.astype("int32"))
        self.samples_per_epoch = len(data.train)
        self.steps_per_epoch = math.ceil(self.samples_per_epoch / self.batch_size)
        self.optimizer = _optimizer(cell.optim)
        # torch.amp.GradScaler's defaults: start at 2^16, halve on a non-finite gradient (and skip that step),
        # double after 2000 finite steps in a row. Kept on the device: no step waits for the host.
        self.loss_scale = (
            {"scale": mx.array(2.0**16), "finite_steps": mx.array(0)} if cell.precision.autocast == "float16" else {}
        )
        self.order = mx.arange(self.samples_per_epoch)
        self._losses: list[Any] = []
        self._predictions: list[Any] = []
        self._step: Callable[[Any, Any], tuple[Any, Any]] | None = None  # built at the first training step
        mx.eval(self.inputs, self.labels)

    def _loss(self, logits: Any, labels: Any) -> Any:
        nn, mx = self.nn, self.mx
        if getattr(self.cell.model, "output_activation", None) == "sigmoid":  # the seed blog's head
            probs = mx.sigmoid(logits)
            probs = mx.maximum(probs / probs.sum(axis=1, keepdims=True), 1e-7)
            return -mx.take_along_axis(mx.log(probs), labels[:, None], axis=1).mean()
        return nn.losses.cross_entropy(logits, labels, reduction="mean")

    def _working(self, tree: Any) -> Any:
        """`tree`'s floating-point arrays in the cell's mixed precision (token ids stay integers)."""
        from mlx.utils import tree_map

        mx, dtype = self.mx, self.dtype
        if dtype is None:
            return tree
        return tree_map(lambda a: a.astype(dtype) if mx.issubdtype(a.dtype, mx.floating) else a, tree)

    def _predict(self, x: Any) -> Any:
        """Eval-mode logits in the cell's precision: the forward pass runs on a working copy of every weight
        (BatchNorm statistics too, or they would promote it back to fp32), the fp32 master copy stays."""
        model = self.model
        if self.dtype is None:
            return model(x)
        master = model.parameters()
        model.update(self._working(master))
        try:
            return model(self._working(x))
        finally:
            model.update(master)

    def _make_step(self) -> Callable[[Any, Any], tuple[Any, Any]]:
        from mlx.utils import tree_flatten, tree_map

        mx, model, optimizer, scaler = self.mx, self.model, self.optimizer, self.loss_scale
        # Its state exists before the step is compiled, so the first call traces the step once, whole.
        optimizer.init(model.trainable_parameters())

        def loss_of(params: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
            model.update(params)
            logits = model(self._working(x)).astype(mx.float32)
            loss = self._loss(logits, y)
            differentiated = loss * scaler["scale"] if scaler else loss
            return differentiated, loss, mx.argmax(logits, axis=1)

        gradient = mx.value_and_grad(loss_of)
        decay = self.cell.optim.weight_decay if self.cell.optim.name == "adam" else 0.0

        def step(x: Any, y: Any) -> tuple[Any, Any]:
            master = model.trainable_parameters()
            (_, loss, predicted), grads = gradient(self._working(master), x, y)
            scale = scaler.get("scale")
            if self.dtype is not None:  # back to fp32 (and unscaled) for the master copy
                grads = tree_map(
                    lambda g: g.astype(mx.float32) if scale is None else g.astype(mx.float32) / scale, grads
                )
            if decay:  # torch's Adam: L2 added to the gradient (MLX's Adam has no weight_decay)
                grads = tree_map(lambda g, p: g + decay * p, grads, master)
            if not scaler:
                model.update(optimizer.apply_gradients(grads, master))
                return loss, predicted
            scale = scaler["scale"]  # loss scaling is on: the scale exists
            finite = mx.stack([mx.isfinite(g).all() for _, g in tree_flatten(grads)]).all()
            before = tree_map(lambda a: a, optimizer.state)  # new containers, the same arrays
            updated = optimizer.apply_gradients(grads, master)
            keep = lambda new, old: mx.where(finite, new, old)  # noqa: E731  (a skipped step changes nothing)
            model.update(tree_map(keep, updated, master))
            optimizer.state.update(tree_map(keep, optimizer.state, before))
            streak = scaler["finite_steps"] + 1
            grow = streak >= 2000
            scaler["scale"] = mx.where(finite, mx.where(grow, scale * 2, scale), scale * 0.5)
            scaler["finite_steps"] = mx.where(finite & ~grow, streak, 0)
            return loss, predicted

        if self.cell.optimize.compile:
            state = [model.state, optimizer.state, scaler, mx.random.state]
            return mx.compile(step, inputs=state, outputs=state)
        return step

    def _train_step(self, x: Any, y: Any) -> tuple[Any, Any]:
        if self._step is None:
            self._step = self._make_step()
        loss, predicted = self._step(x, y)
        # Queue the step's every result: a lazy array nobody asks for is never computed.
        self.adapter.pending = [loss, predicted, self.model.parameters(), self.optimizer.state, self.loss_scale]
        self.mx.async_eval(self.adapter.pending)
        return loss, predicted

    # -- the train task's epoch ---------------------------------------------------------------
    def begin_epoch(self, epoch: int) -> None:
        mx = self.mx
        self.model.train()
        self.order = mx.random.permutation(self.samples_per_epoch, key=mx.random.key(self.cell.seed + epoch))
        # Computed now, before the epoch's timed block, as the other frameworks draw theirs: left lazy, the
        # first step would compute it inside the block (synchronize waits for queued work, not for this).
        mx.eval(self.order)
        self._losses, self._predictions = [], []

    def step(self, index: int) -> None:
        positions = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        loss, predicted = self._train_step(self.inputs[positions], self.labels[positions])
        self._losses.append(loss)
        self._predictions.append(predicted)

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        mx = self.mx
        sizes = mx.array(
            [min(self.batch_size, self.samples_per_epoch - i * self.batch_size) for i in range(self.steps_per_epoch)],
            dtype=mx.float32,
        )
        loss_sum = (mx.stack(self._losses) * sizes).sum()
        correct = (mx.concatenate(self._predictions) == self.labels[self.order]).sum()
        return EpochResult(loss_sum.item() / self.samples_per_epoch, correct.item() / self.samples_per_epoch)

    def evaluate(self) -> tuple[float | None, float | None]:
        if len(self.data.val) == 0:
            return None, None
        mx = self.mx
        inputs = self.adapter._inputs(self.data.val, self.data)
        labels = mx.array(self.data.val.labels.astype("int32"))
        self.model.eval()
        loss_sum, correct = mx.array(0.0), mx.array(0)
        for start in range(0, len(self.data.val), self.batch_size):
            x, y = inputs[start : start + self.batch_size], labels[start : start + self.batch_size]
            logits = self._predict(x).astype(mx.float32)
            loss_sum = loss_sum + self._loss(logits, y) * y.shape[0]
            correct = correct + (mx.argmax(logits, axis=1) == y).sum()
            mx.async_eval(loss_sum, correct)  # one batch's graph at a time, not the whole split's
        self.model.train()
        return loss_sum.item() / len(self.data.val), correct.item() / len(self.data.val)

    # -- the benchmark and inference tasks ----------------------------------------------------
    def resident_step(self) -> Callable[[], None]:
        x, y = self.inputs[: self.batch_size], self.labels[: self.batch_size]
        self.model.train()

        def one_step() -> None:
            self._train_step(x, y)

        return one_step

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        mx, model = self.mx, self.model
        x = self.inputs[: min(batch_size, self.samples_per_epoch)]
        mx.eval(x)
        model.eval()
        forward = mx.compile(self._predict, inputs=[model.state]) if self.cell.optimize.compile else self._predict

        def predict() -> None:
            self.adapter.pending = forward(x)
            mx.async_eval(self.adapter.pending)

        return predict


def _optimizer(optim: Any) -> Any:
    """torch's optimizers as MLX has them: SGD's weight_decay is L2 in both, AdamW's decoupled in both, and
    Adam and AdamW correct their moments' bias as torch does (MLX's default does not)."""
    import mlx.optimizers as optimizers

    if optim.name == "sgd":
        return optimizers.SGD(learning_rate=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay)
    betas = [optim.beta1, optim.beta2]
    if optim.name == "adamw":
        return optimizers.AdamW(
            learning_rate=optim.lr, betas=betas, eps=optim.eps, weight_decay=optim.weight_decay, bias_correction=True
        )
    return optimizers.Adam(learning_rate=optim.lr, betas=betas, eps=optim.eps, bias_correction=True)


def _matrix_products(mx: Any, model: Any, sample: Any) -> list[tuple[int, int]]:
    """(output positions, kernel size) of every Linear and Conv2d as one forward pass runs them."""
    import mlx.nn as nn

    recorded: list[tuple[int, int]] = []
    originals = {cls: cls.__call__ for cls in (nn.Linear, nn.Conv2d)}

    def recording(original: Any) -> Any:
        def call(layer: Any, x: Any) -> Any:  # a plain function, so Python binds `layer` as it does methods
            out = original(layer, x)
            outputs = int(out.size // out.shape[0])  # per sample: positions x output channels/features
            recorded.append((outputs, int(layer.weight.size // layer.weight.shape[0])))
            return out

        return call

    try:
        for cls, original in originals.items():
            cls.__call__ = recording(original)
        training = model.training
        model.eval()
        mx.eval(model(sample))
        model.train(training)
    finally:
        for cls, original in originals.items():
            cls.__call__ = original
    return recorded


if TYPE_CHECKING:
    from trainbench.frameworks import base

    def _held_to_the_contract(adapter: Adapter, device: MlxDevice, trainer: Trainer) -> None:
        """trainbench.frameworks.load imports adapters by name, so no call site ties them to the contract: this
        does. mypy checks each class against the Protocol it stands for and names any member it lacks."""
        _adapter: base.Framework = adapter
        _device: base.Device = device
        _trainer: base.Trainer = trainer
