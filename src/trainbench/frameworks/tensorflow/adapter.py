"""framework=tensorflow: Keras 3 on TensorFlow. gpu = CUDA on Linux, Metal on Apple silicon (tensorflow-metal).

Each train step is one tf.function (XLA with optimize.compile, except on Metal where XLA does not run): the
batch gather from the epoch's permutation by a step counter kept on the device, then Keras' own train_step.
The host passes nothing per step. data.pipeline=loader: a tf.data pipeline on the host CPU (LoaderTrainer);
task.timed_region=fit / build_fit: Keras' own model.fit (trainbench.frameworks.keras.adapter.FitTrainer)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.keras.adapter import (
    HostBatches,
    KerasAdapter,
    KerasDevice,
    KerasTrainer,
    installed,
)
from trainbench.frameworks.tensorflow import data_parallel

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig
    from trainbench.data import Dataset
    from trainbench.frameworks.base import StepClock

METAL_NO_XLA = "XLA (jit_compile) is not supported by tensorflow-metal: compiled as a plain tf.function graph"
SPLIT_CPU_NO_XLA = (
    "XLA cannot place a replica's variables on TensorFlow's logical CPUs (Keras' own fit fails the "
    "same way): MirroredStrategy on a split CPU runs plain tf.function graphs"
)


class TensorFlowDevice(KerasDevice):
    memory_source = "tf.config.experimental.get_memory_info peak"
    adapter: Adapter

    def step_clock(self) -> StepClock | None:
        from trainbench.measure.timing import HostClock

        return HostClock() if self.backend == "cpu" else None  # no device events in TensorFlow

    def peak_memory_mb(self) -> float | None:
        if self.backend == "cpu":
            return None
        try:
            return float(self.adapter.tf.config.experimental.get_memory_info("GPU:0")["peak"]) / 2**20
        except (ValueError, RuntimeError):  # no counter on this device (Metal)
            return None

    def pool_mb(self) -> tuple[float, float] | None:
        """The peak bytes in use against the BFC allocator's limit (DeviceAttributes.memory_limit of the GPU)."""
        peak = self.peak_memory_mb()
        if peak is None:
            return None
        try:
            from tensorflow.python.client import device_lib

            limits = [d.memory_limit for d in device_lib.list_local_devices() if d.device_type == "GPU"]
        except Exception:  # a private module: without it, no memory line (the search doubles instead)
            return None
        return (peak, limits[0] / 2**20) if limits else None


class Adapter(KerasAdapter):
    keras_backend = "tensorflow"
    device_type = TensorFlowDevice
    strategy: Any = None  # tf.distribute.MirroredStrategy when the cell runs on several devices
    _state_reader: Any = None  # read_back's tf.function, traced for the device_state whose ids follow
    _state_reader_ids: list[int] | None = None

    def bind_device(self, device: DeviceConfig) -> str:
        from trainbench.frameworks.base import DeviceUnavailable

        if device.name == "cpu":
            # Before TensorFlow loads: CUDA is then never initialised and no GPU memory is taken.
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import tensorflow as tf

        self.tf = tf
        gpus = tf.config.list_physical_devices("GPU")
        if device.name == "cpu" or not gpus:
            if device.name == "gpu":
                raise DeviceUnavailable(_no_tensorflow_gpu_reason(tf))
            tf.config.set_visible_devices([], "GPU")  # Metal too, which CUDA_VISIBLE_DEVICES does not hide
            backend = "cpu"
            chosen = data_parallel.choose(tf, gpus, device.count, backend)
        else:
            backend = "metal" if sys.platform == "darwin" else "cuda"
            chosen = data_parallel.choose(tf, gpus, device.count, backend)
            tf.config.set_visible_devices(chosen, "GPU")  # the cell's devices (one: as PyTorch's cuda:0)
            if self.cell.framework.memory_growth:  # type: ignore[attr-defined]
                for gpu in chosen:
                    tf.config.experimental.set_memory_growth(gpu, True)
        self.replicas = len(chosen)
        if self.replicas > 1:
            self.strategy = data_parallel.mirror(tf, chosen, backend)
        # TensorFlow uses TF32 by default on Ampere and newer: "fp32" must mean fp32.
        tf.config.experimental.enable_tensor_float_32_execution(self.tf32)
        if backend == "metal" and self.cell.optimize.compile:
            self.compile_reason = METAL_NO_XLA
        if backend == "cpu" and self.replicas > 1 and self.cell.optimize.compile:
            self.compile_reason = SPLIT_CPU_NO_XLA
        return backend

    def version(self) -> str:
        return str(self.tf.__version__)

    def backend_versions(self) -> dict[str, str]:
        tags = {"sw.tensorflow": self.tf.__version__}
        if self.backend == "cuda":
            build = self.tf.sysconfig.get_build_info()
            tags["sw.cuda"] = str(build.get("cuda_version", ""))
            tags["sw.cudnn"] = str(build.get("cudnn_version", ""))
        elif self.backend == "metal":
            tags["sw.tensorflow_metal"] = installed("tensorflow-metal")
        return tags

    def jit_compile(self) -> bool:
        split_cpu = self.backend == "cpu" and self.replicas > 1
        return bool(self.cell.optimize.compile) and self.backend != "metal" and not split_cpu

    def flags(self) -> dict[str, str]:
        threading = self.tf.config.threading
        tags = {
            **super().flags(),
            # As TensorFlow reports them (TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS): 0 is its own choice.
            "trainbench.intra_op_threads": _threads(threading.get_intra_op_parallelism_threads()),
            "trainbench.inter_op_threads": _threads(threading.get_inter_op_parallelism_threads()),
        }
        if self.replicas > 1:
            tags.update(data_parallel.tags(self.replicas, self.backend))
        return tags

    def synchronize(self) -> None:
        if self.backend == "cuda":
            self.tf.test.experimental.sync_devices()
        elif self.backend == "metal":
            self.read_back()
        # On the CPU, TensorFlow returns from an op or a tf.function once it has run: nothing is queued.

    def read_back(self) -> Any:
        """Wait for the cell's device work where TensorFlow has no "wait for the device" (tensorflow-metal has
        no SyncDevice kernel): copy to the host, in one small tensor, the first element of what the work writes
        last and of what it prepared on the device (`device_state`: the optimizer's iteration counter, the
        metrics' sums, the trainer's position and permutation, the split prepared on the device) and of the
        newest outputs of work that writes no variable (`pending`: a product, a prediction). Returns what was
        read, as float32 (None when there was nothing to read).

        Why that is enough, with or without a trainer's newest output (Keras' fit keeps its own):
        - TensorFlow's read of a variable sees every write issued before it, on every device: the copy cannot
          finish before the last step queued has counted itself, nor before the prepared split exists.
        - A copy from a plug-in device to the host first waits for the device's compute stream, which holds
          every kernel issued so far in issue order (TensorFlow's PluggableDevice contract:
          CopyPluggableDeviceTensorToCPU in core/common_runtime/pluggable_device/pluggable_device_util.cc):
          so the work with no data path to what is read (the weights' updates) is done too.
        The read is issued after everything it waits for, so it is never a stale value that was ready early."""
        tf = self.tf
        state = self.device_state()
        if [id(value) for value in state] != self._state_reader_ids:
            self._state_reader = _first_elements(tf, state)
            self._state_reader_ids = [id(value) for value in state]
        newest = [value for value in tf.nest.flatten(self.pending) if value is not None and hasattr(value, "numpy")]
        with tf.device(self.tf_device()):
            read = [self._state_reader()] if self._state_reader is not None else []
            read += [tf.cast(tf.reshape(value, [-1])[:1], tf.float32) for value in newest]
        return tf.concat(read, 0).numpy() if read else None

    def on_device(self, array: Any) -> Any:
        tf = self.tf
        with tf.device(self.tf_device()):
            return tf.identity(tf.convert_to_tensor(array))

    def tf_device(self) -> str:
        return "/CPU:0" if self.backend == "cpu" else "/GPU:0"

    def trainer_types(self) -> tuple[type[KerasTrainer], type[KerasTrainer]]:
        return Trainer, LoaderTrainer

    def matmul_step(self, n: int, shape: str, fresh_operands: bool) -> Callable[[], None]:
        tf = self.tf
        dtype = self.matmul_dtype()
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        if fresh_operands:

            def draw_and_multiply() -> None:
                # tf.random.normal (the global generator, seeded by the cell) eagerly, as a user's timed loop
                with tf.device(self.tf_device()):
                    a = tf.cast(tf.random.normal(a_shape), dtype)
                    b = tf.cast(tf.random.normal(b_shape), dtype)
                    self.pending = tf.linalg.matmul(a, b)

            return draw_and_multiply
        with tf.device(self.tf_device()):
            generator = tf.random.Generator.from_seed(self.cell.seed)
            a = tf.cast(generator.normal(a_shape), dtype)
            b = tf.cast(generator.normal(b_shape), dtype)

        def multiply() -> None:
            with tf.device(self.tf_device()):
                self.pending = tf.linalg.matmul(a, b)

        return multiply


class Trainer(KerasTrainer):
    """Keras' train_step in a tf.function that gathers its own batch: a step counter and the epoch's
    permutation live on the device, so a step takes no arguments from the host."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        super().__init__(adapter, model, data, cell)
        tf = self.tf = adapter.tf
        with tf.device(adapter.tf_device()):
            self.order = tf.Variable(tf.range(self.samples_per_epoch, dtype=tf.int32), trainable=False)
            self.position = tf.Variable(0, dtype=tf.int32, trainable=False)
        self.shuffle = tf.random.Generator.from_seed(cell.seed)
        self._steps: dict[int, Any] = {}
        self.strategy = adapter.strategy
        if self.strategy is not None:  # every replica gathers from its own copy of the split
            self.replica_data = (
                data_parallel.per_replica(self.strategy, tf, self.inputs),
                data_parallel.per_replica(self.strategy, tf, self.labels),
            )

    def _step_for(self, size: int) -> Any:
        if size not in self._steps:
            if self.strategy is not None:
                return self._replicated_step_for(size)
            tf, model = self.tf, self.model
            inputs, labels, order, position = self.inputs, self.labels, self.order, self.position

            def train() -> Any:
                positions = tf.slice(order, [position * self.batch_size], [size])
                logs = model.train_step((tf.gather(inputs, positions), tf.gather(labels, positions)))
                position.assign_add(1)
                return logs["loss"]

            self._steps[size] = tf.function(train, jit_compile=self.adapter.jit_compile())
        return self._steps[size]

    def _replicated_step_for(self, size: int) -> Any:
        """The step under MirroredStrategy: Keras' train_step on every replica's slice of the global batch."""
        tf, model, strategy = self.tf, self.model, self.strategy
        order, position, replicas = self.order, self.position, self.adapter.replicas
        inputs, labels = self.replica_data

        def replica_step(inputs: Any, labels: Any) -> Any:
            offset, length = data_parallel.replica_slice(tf, size, replicas)
            positions = tf.slice(order, [position * self.batch_size + offset], [length])
            return model.train_step((tf.gather(inputs, positions), tf.gather(labels, positions)))["loss"]

        # XLA compiles each replica's step (as Keras' fit does), never the step across devices; it needs
        # static shapes, so a last batch that does not split evenly runs as a plain graph.
        static = size % replicas == 0
        compiled = tf.function(replica_step, jit_compile=self.adapter.jit_compile() and static)

        def train() -> Any:
            losses = data_parallel.run_step(strategy, compiled, inputs, labels)
            position.assign_add(1)
            return losses

        self._steps[size] = tf.function(train)
        return self._steps[size]

    def device_state(self) -> list[Any]:
        return [*super().device_state(), self.order, self.position]

    def begin_epoch(self, epoch: int) -> None:
        tf = self.tf
        self.model.reset_metrics()
        with tf.device(self.adapter.tf_device()):  # type: ignore[attr-defined]
            keys = self.shuffle.uniform([self.samples_per_epoch])
            self.order.assign(tf.cast(tf.argsort(keys), tf.int32))
            self.position.assign(0)

    def step(self, index: int) -> None:
        size = self.batch_size if index < self.full_steps else self.tail
        with self.tf.device(self.adapter.tf_device()):  # type: ignore[attr-defined]
            self.adapter.pending = self._step_for(size)()

    def resident_step(self) -> Callable[[], None]:
        tf, model = self.tf, self.model
        if self.strategy is not None:  # the first batch_size samples on every replica
            per_device = self.batch_size // self.adapter.replicas
            inputs, labels = (
                data_parallel.per_replica(self.strategy, tf, part[:per_device]) for part in (self.inputs, self.labels)
            )
            compiled = tf.function(
                lambda x, y: model.train_step((x, y))["loss"], jit_compile=self.adapter.jit_compile()
            )
            replicated = tf.function(lambda: data_parallel.run_step(self.strategy, compiled, inputs, labels))

            def replicated_step() -> None:
                self.adapter.pending = replicated()

            return replicated_step
        batch = (self.inputs[: self.batch_size], self.labels[: self.batch_size])
        step = tf.function(lambda: model.train_step(batch)["loss"], jit_compile=self.adapter.jit_compile())

        def one_step() -> None:
            with tf.device(self.adapter.tf_device()):  # type: ignore[attr-defined]
                self.adapter.pending = step()

        return one_step

    def make_predict(self) -> Callable[[Any], Any]:
        model = self.model
        return self.tf.function(lambda x: model(x, training=False), jit_compile=self.adapter.jit_compile())


class LoaderTrainer(HostBatches, Trainer):
    """data.pipeline=loader: a tf.data pipeline on the host CPU feeds each step: the uint8 split shuffled each
    epoch, each sample prepared by `map` on `data.loader_workers` parallel calls (scale, bilinear resize
    without antialiasing, gray -> RGB, normalise, NHWC), batched and prefetched. A step takes its batch from
    the iterator (made by the epoch's first step, inside the timed epoch) and the compiled train_step copies
    it to the device."""

    def training_split(self) -> tuple[Any, Any, bool]:
        return self.host_first_batch()

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        super().__init__(adapter, model, data, cell)
        tf = self.tf
        self.dataset = self._pipeline()
        self._train = tf.function(lambda x, y: model.train_step((x, y))["loss"], jit_compile=adapter.jit_compile())
        self._batches: Any = None

    def _pipeline(self) -> Any:
        import numpy as np

        tf, data, cell = self.tf, self.data, self.cell
        workers = cell.data.loader_workers
        with tf.device("/CPU:0"):
            samples = tf.data.Dataset.from_tensor_slices((data.train.inputs, data.train.labels.astype(np.int32)))
            samples = samples.shuffle(len(data.train), seed=cell.seed, reshuffle_each_iteration=True)
            if data.kind == "image":
                size, channels = data.image_size, data.channels
                mean = tf.constant(data.mean, tf.float32)
                std = tf.constant(data.std, tf.float32)

                def prepare(image: Any, label: Any) -> tuple[Any, Any]:
                    x = tf.transpose(tf.cast(image, tf.float32) / 255.0, (1, 2, 0))
                    if image.shape[-1] != size or image.shape[-2] != size:
                        x = tf.image.resize(x, (size, size), method="bilinear", antialias=False)
                    if image.shape[0] != channels:
                        x = tf.repeat(x, channels // image.shape[0], axis=-1)
                    return (x - mean) / std, label

                samples = samples.map(prepare, num_parallel_calls=workers or None)
            return samples.batch(self.batch_size).prefetch(tf.data.AUTOTUNE)

    def begin_epoch(self, epoch: int) -> None:
        self.model.reset_metrics()
        self._batches = None
        self.input_wait_s = 0.0

    def step(self, index: int) -> None:
        if self._batches is None:
            self._batches = iter(self.dataset)
        x, y = self.wait(self._batches)
        with self.tf.device(self.adapter.tf_device()):  # type: ignore[attr-defined]
            self.adapter.pending = self._train(x, y)

    def end_epoch(self) -> Any:
        return self.with_wait(super().end_epoch())


def _first_elements(tf: Any, values: list[Any]) -> Any:
    """A tf.function returning the first element of each of `values` (variables read as they are when it is
    called) as one float32 vector, or None when there is none. Without XLA: it runs where the values are."""
    import math

    present = [value for value in values if math.prod(tuple(value.shape)) > 0]

    def first_elements() -> Any:
        return tf.stack([tf.cast(tf.reshape(value, [-1])[0], tf.float32) for value in present])

    return tf.function(first_elements) if present else None


def _no_tensorflow_gpu_reason(tf: Any) -> str:
    cuda = tf.sysconfig.get_build_info().get("cuda_version") if tf.test.is_built_with_cuda() else None
    build = f"CUDA build: yes, CUDA {cuda}" if cuda else "CUDA build: no"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None:
        build += f"; CUDA_VISIBLE_DEVICES={hidden!r}"
    if sys.platform == "darwin":
        metal = installed("tensorflow-metal")
        hint = (
            f"tensorflow-metal {metal} is installed but found no Metal GPU"
            if metal
            else "Metal needs tensorflow-metal (pip install tensorflow-metal) on Apple silicon"
        )
    else:
        hint = "Metal needs tensorflow-metal on Apple silicon"
    return (
        f"no GPU visible to TensorFlow {tf.__version__} "
        f"(tf.config.list_physical_devices('GPU') is empty; {build}); {hint}"
    )


if TYPE_CHECKING:
    from trainbench.frameworks import base

    def _held_to_the_contract(
        adapter: Adapter, device: TensorFlowDevice, trainer: Trainer, loader_trainer: LoaderTrainer, cell: CellConfig
    ) -> None:
        """trainbench.frameworks.load imports adapters by name, so no call site ties them to the contract: this
        does. mypy checks each class against the Protocol it stands for and names any member it lacks, and
        refuses to build an adapter or device that lacks one of the Keras backend's own (keras.adapter's
        KerasBackend, KerasDeviceMemory, KerasPredict)."""
        Adapter(cell), TensorFlowDevice(adapter)
        _adapter: base.Framework = adapter
        _device: base.Device = device
        _trainer: base.Trainer = trainer
        _loader_trainer: base.Trainer = loader_trainer


def _threads(count: int) -> str:
    """A thread count as TensorFlow reports it; 0 means TensorFlow chooses (one per core the process may use)."""
    return str(count) if count else "auto"
