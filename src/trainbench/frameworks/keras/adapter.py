"""What the two Keras 3 frameworks share: the adapter base and the trainer base.

framework=tensorflow and framework=jax are small subclasses (trainbench/frameworks/<name>/adapter.py) that
bind the device, synchronize, read memory and build the compiled step their own way; everything Keras
does the same on both lives here. Keras reads KERAS_BACKEND when it is first imported, and for device=cpu
the GPUs must be hidden before TensorFlow or JAX initialise, so __init__ sets the backend and imports
nothing; bind imports.

The train task steps a Keras model exactly as it steps a PyTorch one: the split is prepared once on the
device (scaled, resized, normalised, NHWC) when it fits, each step gathers its batch from the epoch's
permutation inside the compiled step, and Keras' own train_step (optimizer, loss and metrics on the
device) does the rest. No host copy per step, as in PyTorch.

Two other ways in, as the cell asks:
- data.pipeline=loader: each backend's host input pipeline feeds every step (tf.data on TensorFlow, a thread
  pool on JAX: LoaderTrainer in each backend's adapter), each batch copied to the device inside the epoch.
- task.timed_region=fit / build_fit (FitTrainer): Keras' own model.fit on arrays prepared on the host, as the
  published studies ran it; fit slices and copies every batch itself.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from trainbench.frameworks.base import NO_DEVICE_EVENTS, uses_loader

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig, ModelConfig
    from trainbench.data import Dataset, Split
    from trainbench.frameworks.base import AfterTask, BuiltModel, Description, Matmul, StepClock

# precision.autocast -> Keras dtype policy (variables stay float32 under the mixed ones)
DTYPE_POLICIES = {None: "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
PREPARED_SHARE = 0.25  # prepare all inputs up front when they take at most this share of memory


class KerasBackend(Protocol):
    """What each Keras backend's adapter adds to KerasAdapter: how it binds, waits for and fills its device, names
    its releases, compiles, trains and runs a product. KerasAdapter subclasses this Protocol, so a backend's
    adapter that lacks one of these is abstract and mypy refuses to build it (its module's
    `_held_to_the_contract`)."""

    def bind_device(self, device: DeviceConfig) -> str:
        """Bind the backend's devices; return the backend that runs (cpu, cuda, metal)."""

    def version(self) -> str:
        """The backend framework's own release (trainbench.framework_version)."""

    def synchronize(self) -> None:
        """Wait for the cell's queued device work (the backend's way: trainers leave what they queued last in
        `pending` and `device_state`)."""

    def backend_versions(self) -> dict[str, str]:
        """The `sw.*` tags of the backend and the libraries under it, as loaded in this process."""

    def jit_compile(self) -> bool:
        """Whether model.compile asks for XLA's jit on this backend and device (trainbench.compile)."""

    def trainer_types(self) -> tuple[type[KerasTrainer], type[KerasTrainer]]:
        """The backend's trainers (trainbench.frameworks.base.Trainer): its loop on resident data, and the same
        loop fed by its host loader (data.pipeline=loader). Keras' own fit (FitTrainer) is every backend's."""

    def matmul_step(self, n: int, shape: str, fresh_operands: bool) -> Callable[[], None]:
        """The product as the backend runs it, on operands of `matmul_dtype`."""

    def on_device(self, array: Any) -> Any:
        """`array` (host memory) as a tensor on the cell's device."""


class KerasDeviceMemory(Protocol):
    """How each backend's device reads its memory: KerasDevice subclasses this Protocol (see KerasBackend)."""

    def peak_memory_mb(self) -> float | None:
        """The most memory the cell's tensors held on the device, in MiB; None where it cannot be read."""

    def pool_mb(self) -> tuple[float, float] | None:
        """(in use, reserved) by the backend's allocator, in MiB; None where it cannot be read."""


class KerasPredict(Protocol):
    """What each backend's trainer adds to KerasTrainer: KerasTrainer subclasses this Protocol (see KerasBackend)."""

    def make_predict(self) -> Callable[[Any], Any]:
        """The compiled forward pass in eval mode, inputs -> outputs, that inference_step runs."""


class KerasAdapter(KerasBackend):
    """`frameworks.base.Framework` (bind, describe, build, trainer, matmul) as Keras has them on every backend; each
    backend's subclass adds how it binds the device, waits for it and runs a product."""

    keras_backend: ClassVar[str]
    device_type: ClassVar[type[KerasDevice]]

    def __init__(self, cell: CellConfig) -> None:
        self.cell = cell
        self.name = cell.framework.name
        loaded = sys.modules.get("keras")
        if loaded is not None and loaded.backend.backend() != self.keras_backend:
            raise RuntimeError(f"keras is already loaded with the {loaded.backend.backend()} backend in this process")
        os.environ["KERAS_BACKEND"] = self.keras_backend
        self.tf32 = bool(cell.precision.tf32)
        self.policy = DTYPE_POLICIES[cell.precision.autocast]
        self.backend = "cpu"
        self.compile_reason: str | None = None
        self.pending: Any = None  # the newest outputs of work that writes no variable (a product, a prediction)
        # Values the cell's device work writes last (step counters, metric sums) and the tensors it prepared on
        # the device: set by the trainer, read back by synchronize where the device has no wait of its own.
        self.device_state: Callable[[], list[Any]] = list
        self.replicas = 1  # devices one step runs on (keras.distribution.DataParallel, tf MirroredStrategy)

    # -- the contract (trainbench.frameworks.base.Framework) ---------------------------------------------------
    def bind(self, device: DeviceConfig) -> KerasDevice:
        from trainbench.frameworks.base import DeviceUnavailable

        self.backend = self.bind_device(device)
        precision = self.cell.precision
        if precision.tf32 and precision.autocast is None and self.backend != "cuda":
            raise DeviceUnavailable(
                f"precision=tf32 needs an NVIDIA GPU (Ampere or newer); this cell got "
                f"{self.backend}, which computes fp32: use precision=fp32"
            )
        import keras

        keras.config.set_dtype_policy(self.policy)
        self._seed(keras)
        return self.device_type(self)

    def describe(self) -> Description:
        from trainbench.frameworks.base import Description

        return Description(self.version(), {**self.versions(), **self.flags()})

    def versions(self) -> dict[str, str]:
        import keras

        tags = {"sw.keras": keras.__version__, **self.backend_versions()}
        if self.cell.model.input == "text":
            tags["sw.keras_hub"] = installed("keras-hub")
        return tags

    def flags(self) -> dict[str, str]:
        from trainbench.config.schema import VisionModel

        tags = {
            "trainbench.tf32": str(self.tf32 and self.backend == "cuda").lower(),
            "trainbench.autocast": self.cell.precision.autocast or "none",
            "trainbench.compile": str(self.jit_compile()).lower(),
            # Keras' convolutions are NHWC on every backend (trainbench never asks for channels_first).
            "trainbench.channels_last": str(isinstance(self.cell.model, VisionModel)).lower(),
            "keras.backend": self.keras_backend,
            "keras.dtype_policy": self.policy,
        }
        if self.compile_reason:
            tags["trainbench.compile_reason"] = self.compile_reason
        return tags

    def build(self, model: ModelConfig, data: Dataset) -> BuiltModel:
        import keras

        from trainbench.frameworks.base import BuiltModel
        from trainbench.frameworks.keras import models

        self._seed(keras)
        if data.kind == "text":
            with self.tensorflow_refused():
                text_model: Any = model  # a TransformerModel: data.kind is text only for text models
                network = models.text_classifier(text_model, data.seq_len, data.num_classes, mask_padding=data.padded)
        else:
            network = models.build(model, (data.image_size, data.image_size, data.channels), data.num_classes)
        # Read off the layer graph (matrix products and convolutions), for models that do not count themselves.
        return BuiltModel(
            network, models.count_trainable(network), lambda training: models.flops_per_sample(network, training)
        )

    def trainer(self, network: Any, data: Dataset, cell: CellConfig) -> Any:
        if fit_mode(cell):
            return FitTrainer(self, network, data, cell)
        resident, loader_fed = self.trainer_types()
        return (loader_fed if uses_loader(cell) else resident)(self, network, data, cell)

    def matmul(self, n: int, shape: str, fresh_operands: bool = False) -> Matmul:
        from trainbench.frameworks.base import Matmul

        step = self.matmul_step(n, shape, fresh_operands)
        return Matmul(step, 4 if (self.cell.precision.autocast or "float32") == "float32" else 2)

    def matmul_dtype(self) -> str:
        from trainbench.frameworks.base import DeviceUnavailable

        dtype = self.cell.precision.autocast or "float32"
        try:  # the first product tells whether this device implements the dtype at all
            import keras

            keras.ops.convert_to_numpy(keras.ops.matmul(keras.ops.ones((2, 2), dtype), keras.ops.ones((2, 2), dtype)))
        except Exception as error:  # TensorFlow and XLA raise their own types for a missing kernel
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DeviceUnavailable(f"{dtype} matmul not supported on {self.backend}: {reason}") from None
        return dtype

    # -- shared helpers -----------------------------------------------------------------------
    def compile_model(self, model: Any) -> None:
        """Loss, optimizer and accuracy as every framework has them; jit_compile as the backend allows."""
        import keras

        from trainbench.frameworks.keras import models

        if getattr(self.cell.model, "output_activation", None) == "sigmoid":
            loss: Any = models.sigmoid_categorical_crossentropy
        else:
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        # mixed_float16: Keras wraps the optimizer in a LossScaleOptimizer (dynamic loss scaling) itself.
        model.compile(
            optimizer=optimizer(keras, self.cell.optim),
            loss=loss,
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            jit_compile=self.jit_compile(),
        )

    def prepared_split(self, split: Split, data: Dataset) -> tuple[Any, Any, bool]:
        """(inputs, labels, prepared) on the device: images scaled, resized, normalised and NHWC once when
        they fit in PREPARED_SHARE of the device's memory (as the PyTorch adapter does), else uint8 and
        prepared by the model's first layer every step."""
        import numpy as np

        from trainbench.frameworks.keras import models

        labels = self.on_device(split.labels.astype(np.int32))
        if data.kind == "text":
            return self.on_device(split.inputs.astype(np.int32)), labels, True
        prepared_bytes = len(split) * data.channels * data.image_size**2 * 4
        if prepared_bytes > PREPARED_SHARE * self.memory_bytes():
            return self.on_device(split.inputs), labels, False
        preprocess = preprocess_layer(models, data)
        chunks = [
            preprocess(self.on_device(split.inputs[start : start + 1024])) for start in range(0, len(split), 1024)
        ]
        import keras

        return (keras.ops.concatenate(chunks, axis=0) if len(chunks) > 1 else chunks[0]), labels, True

    def memory_bytes(self) -> int:
        """The device's memory: the GPU's as the probes read it, else the host's."""
        import psutil

        from trainbench.measure.hardware import host_tags

        gpu_gb = host_tags().get("hw.gpu_memory_gb")
        if self.backend == "cuda" and gpu_gb:
            return int(float(gpu_gb) * 2**30)
        return int(psutil.virtual_memory().total)

    def _seed(self, keras: Any) -> None:
        """keras.utils.set_random_seed: Python, NumPy, Keras' initialisers and shuffling (and TensorFlow)."""
        with self.tensorflow_refused():
            keras.utils.set_random_seed(self.cell.seed)

    @contextlib.contextmanager
    def tensorflow_refused(self) -> Iterator[None]:
        """Nothing to refuse on the TensorFlow backend (the JAX adapter overrides this)."""
        yield


class KerasDevice(KerasDeviceMemory):
    """The device(s) a Keras cell runs on (trainbench.frameworks.base.Device): one device, or the replicas of
    keras.distribution.DataParallel / tf MirroredStrategy. Each backend's subclass reads memory its own way."""

    memory_source: ClassVar[str]  # memory.source: how the peak is read
    no_step_clock_why = NO_DEVICE_EVENTS

    def __init__(self, adapter: KerasAdapter) -> None:
        self.adapter = adapter  # whose synchronize waits on what its trainers queued
        self.backend = adapter.backend
        self.count = adapter.replicas
        self.gpu_indices = list(range(adapter.replicas)) if adapter.backend == "cuda" else []

    def synchronize(self) -> None:
        self.adapter.synchronize()

    def step_clock(self) -> StepClock | None:
        return None  # no device events in TensorFlow or JAX

    def after_task(self) -> AfterTask:
        from trainbench.frameworks.base import AfterTask

        peak = self.peak_memory_mb()
        return AfterTask(peak, {} if peak is None else {"memory.source": self.memory_source})

    def release(self, network: Any) -> bool:
        """Never: XLA's and TensorFlow's BFC allocators are not reliably usable after running out of memory, so
        each batch_size=max probe runs in a process of its own."""
        return False


def fit_mode(cell: CellConfig) -> bool:
    """Whether the cell times Keras' own fit (task.timed_region=fit or build_fit)."""
    return getattr(cell.task, "timed_region", "") in ("fit", "build_fit")


def host_split(split: Split, data: Dataset) -> tuple[Any, Any]:
    """(inputs, labels) as a user of model.fit holds them in host memory: images scaled, resized and normalised
    once, float32 NHWC (trainbench.data.prepare_images); token ids int32; labels int32."""
    import numpy as np

    from trainbench.data import prepare_images

    labels = split.labels.astype(np.int32)
    if data.kind == "text":
        return split.inputs.astype(np.int32), labels
    return prepare_images(split.inputs, data, channels_last=True), labels


class FitTrainer:
    """task.timed_region=fit / build_fit: Keras' model.fit on host arrays, shuffled each epoch (fit's default),
    verbose=0. Epoch times come from a callback synchronized at each epoch's begin and end; with
    `sync_every_step` a batch-end callback makes Keras read every step's logs back to the host, as tf.keras 2's
    progress bar (verbose=1) did. Validation runs after fit, never inside it."""

    def __init__(self, adapter: KerasAdapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        import math
        import time

        self.adapter, self.model, self.data, self.cell = adapter, model, data, cell
        self.batch_size = int(cell.batch_size)
        started = time.perf_counter()
        self.inputs, self.labels = host_split(data.train, data)
        self.host_prep_time_s = time.perf_counter() - started  # inside build_fit's block: recorded apart too
        adapter.compile_model(model)
        adapter.device_state = lambda: end_of_step_state(model)  # fit's metric sums exist once it has begun
        self.samples_per_epoch = len(self.labels)
        self.steps_per_epoch = math.ceil(self.samples_per_epoch / self.batch_size)

    def fit(self, epochs: int, sync_every_step: bool = False, samples: int | None = None) -> list[tuple[float, Any]]:
        """`epochs` epochs over the first `samples` samples (all: None): (seconds, EpochResult) per epoch."""
        import keras

        clock = _epoch_clock(keras, self.adapter.synchronize)
        callbacks = [clock, _step_read_back(keras)] if sync_every_step else [clock]
        count = self.samples_per_epoch if samples is None else samples
        self.adapter.pending = None
        self.model.fit(
            self.inputs[:count],
            self.labels[:count],
            batch_size=self.batch_size,
            epochs=epochs,
            shuffle=True,
            verbose=0,
            callbacks=callbacks,
        )
        return list(clock.epochs)

    def evaluate(self) -> tuple[float | None, float | None]:
        if len(self.data.val) == 0:
            return None, None
        inputs, labels = host_split(self.data.val, self.data)
        result = self.model.evaluate(inputs, labels, batch_size=self.batch_size, verbose=0, return_dict=True)
        return float(result["loss"]), float(result["accuracy"])


def end_of_step_state(model: Any) -> list[Any]:
    """The variables a Keras train step writes last, each once: the optimizer's iteration counter (incremented
    after the weights' updates) and the metrics' sums (updated after the loss). A few scalars, whatever the
    model's size."""
    optimizer = getattr(model, "optimizer", None)
    counters = [optimizer.iterations] if optimizer is not None else []
    return list({id(variable): variable for variable in [*counters, *model.metrics_variables]}.values())


def _epoch_clock(keras: Any, synchronize: Callable[[], None]) -> Any:
    """A callback timing each epoch of fit between synchronizations: `synchronize` waits for every step fit has
    queued (TensorFlow: on CUDA the device, on Metal a read-back of what the steps write last; JAX: Keras reads the
    epoch's logs, outputs of the last step's XLA program, back to the host before on_epoch_end). Epoch hooks
    only, so Keras keeps dispatching steps asynchronously."""
    import time

    from trainbench.frameworks.base import EpochResult

    class EpochClock(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[tuple[float, EpochResult]] = []
            self.began = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            synchronize()
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            synchronize()
            seconds = time.perf_counter() - self.began
            self.epochs.append((seconds, EpochResult(float(logs["loss"]), float(logs["accuracy"]))))

    return EpochClock()


def _step_read_back(keras: Any) -> Any:
    """A callback with a batch-end hook: Keras then dispatches no step ahead and reads each step's loss and
    accuracy back to the host (keras.callbacks.CallbackList), the per-step synchronization of tf.keras 2's
    progress bar and of a TF1 session.run."""

    class StepReadBack(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    return StepReadBack()


class KerasTrainer(KerasPredict):
    """The base of both backends' trainers (trainbench.frameworks.base.Trainer): data on the device, the
    model compiled, metrics read back after each epoch. Subclasses make the compiled steps."""

    def __init__(self, adapter: KerasAdapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        import math

        self.adapter, self.data, self.cell = adapter, data, cell
        self.batch_size = int(cell.batch_size) * adapter.replicas  # global: batch_size per device
        self.inputs, self.labels, self.prepared = self.training_split()
        self.model = model if self.prepared else with_preprocessing(model, data)
        adapter.compile_model(self.model)
        self.samples_per_epoch = len(data.train)
        self.steps_per_epoch = math.ceil(self.samples_per_epoch / self.batch_size)
        self.full_steps = self.samples_per_epoch // self.batch_size
        self.tail = self.samples_per_epoch - self.full_steps * self.batch_size
        # Builds the model, its optimizer and metric variables without running a step (as fit does).
        self.model._symbolic_build(data_batch=(self.inputs[: self.batch_size], self.labels[: self.batch_size]))
        self._validation: tuple[Any, Any, bool] | None = None
        adapter.device_state = self.device_state

    def training_split(self) -> tuple[Any, Any, bool]:
        """(inputs, labels, prepared) the steps use: the training split on the device (prepared_split)."""
        return self.adapter.prepared_split(self.data.train, self.data)

    def device_state(self) -> list[Any]:
        """What the steps write last (end_of_step_state) and the training split prepared on the device."""
        return [*end_of_step_state(self.model), self.inputs, self.labels]

    def end_epoch(self) -> Any:
        from trainbench.frameworks.base import EpochResult

        self.sync_state()
        result = self.model.get_metrics_result()
        return EpochResult(float(result["loss"]), float(result["accuracy"]))

    def sync_state(self) -> None:
        """Put the newest weights, optimizer and metric state back into the model's variables."""

    def evaluate(self) -> tuple[float | None, float | None]:
        if len(self.data.val) == 0:
            return None, None
        self.sync_state()
        if self._validation is None:
            self._validation = self.adapter.prepared_split(self.data.val, self.data)
        inputs, labels, prepared = self._validation
        evaluator = self.model if prepared == self.prepared else with_preprocessing(self.model, self.data)
        if evaluator is not self.model:
            self.adapter.compile_model(evaluator)
        result = evaluator.evaluate(inputs, labels, batch_size=self.batch_size, verbose=0, return_dict=True)
        return float(result["loss"]), float(result["accuracy"])

    def inference_step(self, batch_size: int) -> Callable[[], None]:
        self.sync_state()
        count = min(batch_size, self.samples_per_epoch)
        x = self.inputs[:count]
        predict = self.make_predict()

        def forward() -> None:
            self.adapter.pending = predict(x)

        return forward


class HostBatches:
    """data.pipeline=loader for a Keras trainer: what both backends' loaders share. The training split stays
    on the host (only its first batch goes to the device, prepared, to build the model); `wait` times each
    step's wait for its next batch, summed per epoch into input_wait_s."""

    input_wait_s = 0.0

    def host_first_batch(self: Any) -> tuple[Any, Any, bool]:
        inputs, labels = host_split(self.data.train.first(self.batch_size), self.data)
        return self.adapter.on_device(inputs), self.adapter.on_device(labels), True

    def wait(self, batches: Iterator[Any]) -> Any:
        import time

        waiting = time.perf_counter()
        batch = next(batches)
        self.input_wait_s += time.perf_counter() - waiting
        return batch

    def with_wait(self, result: Any) -> Any:
        import dataclasses

        return dataclasses.replace(result, input_wait_s=self.input_wait_s)


def with_preprocessing(model: Any, data: Dataset) -> Any:
    """The same weights behind a weightless first layer taking the stored uint8 NCHW images."""
    import keras

    from trainbench.frameworks.keras import models

    images = keras.Input(data.train.inputs.shape[1:], dtype="uint8")
    return keras.Model(images, model(preprocess_layer(models, data)(images)), name=f"{model.name}_from_uint8")


def preprocess_layer(models: Any, data: Dataset) -> Any:
    return models.Preprocess(data.image_size, data.channels, data.mean, data.std, name="preprocess")


def optimizer(keras: Any, optim: Any) -> Any:
    """The optimizers of the PyTorch adapter, with PyTorch's semantics.

    torch's SGD and Adam apply weight_decay as L2 (added to the gradient); Keras' weight_decay is
    decoupled (AdamW's): so SGD and Adam add it to the gradient here. AdamW is the same in both.
    Keras adds Adam's epsilon to sqrt(v) before the bias correction, torch after: the same update up to
    epsilon's scale.
    """
    lr, decay = optim.lr, optim.weight_decay
    if optim.name == "adamw":
        return keras.optimizers.AdamW(
            learning_rate=lr, weight_decay=decay, beta_1=optim.beta1, beta_2=optim.beta2, epsilon=optim.eps
        )
    if optim.name == "sgd":
        base, options = keras.optimizers.SGD, {"momentum": optim.momentum}
    else:
        base, options = keras.optimizers.Adam, {"beta_1": optim.beta1, "beta_2": optim.beta2, "epsilon": optim.eps}
    if not decay:
        return base(learning_rate=lr, **options)
    ops = keras.ops

    class CoupledWeightDecay(base):  # type: ignore[misc, valid-type]
        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            gradient = ops.add(gradient, ops.multiply(ops.cast(variable, gradient.dtype), decay))
            super().update_step(gradient, variable, learning_rate)

    return CoupledWeightDecay(learning_rate=lr, **options)


def installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


if TYPE_CHECKING:
    from trainbench.frameworks import base

    def _held_to_the_contract(fit_trainer: FitTrainer) -> None:
        """The train task finds Keras' own fit by the FittingTrainer Protocol: mypy holds FitTrainer to it."""
        _fit_trainer: base.FittingTrainer = fit_trainer
