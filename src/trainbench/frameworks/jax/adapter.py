"""framework=jax: Keras 3 on JAX. Every train step is one XLA program (jax.jit): the batch gather from the
epoch's permutation and Keras' own stateless train_step (forward, loss, gradients, optimizer, metrics).
The training state is threaded from step to step, as Keras' fit does, and written back into the model's
variables after each epoch's timed block. data.pipeline=loader: batches prepared on the host by a thread pool
(LoaderTrainer); task.timed_region=fit / build_fit: Keras' own model.fit (keras.adapter.FitTrainer)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from trainbench.frameworks.jax import data_parallel, nodes
from trainbench.frameworks.keras.adapter import (
    HostBatches,
    KerasAdapter,
    KerasDevice,
    KerasTrainer,
    fit_mode,
    installed,
)

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig, DeviceConfig
    from trainbench.data import Dataset

JAX_ALWAYS_JITS = (
    "Keras on JAX always compiles the train step with XLA (jax.jit): optimize.compile=false does not apply"
)


class JaxDevice(KerasDevice):
    """No device events (step_clock None): JAX dispatches asynchronously even on a CPU."""

    memory_source = "jax memory_stats peak_bytes_in_use"
    adapter: Adapter

    def _stats(self) -> dict[str, Any]:
        return self.adapter.jax.local_devices()[0].memory_stats() or {}  # across nodes: this node's first

    def peak_memory_mb(self) -> float | None:
        if self.backend == "cpu":
            return None
        peak = self._stats().get("peak_bytes_in_use")
        return None if peak is None else float(peak) / 2**20

    def pool_mb(self) -> tuple[float, float] | None:
        """The peak bytes in use against the allocator's limit (XLA_PYTHON_CLIENT_MEM_FRACTION of the GPU)."""
        if self.backend == "cpu":
            return None
        stats = self._stats()
        peak, limit = stats.get("peak_bytes_in_use"), stats.get("bytes_limit")
        return None if peak is None or not limit else (float(peak) / 2**20, float(limit) / 2**20)


class Adapter(KerasAdapter):
    keras_backend = "jax"
    device_type = JaxDevice
    shardings: data_parallel.Shardings | None = None  # set when the cell runs on several devices

    def bind_device(self, device: DeviceConfig) -> str:
        from trainbench.frameworks.base import DeviceUnavailable

        if device.name == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX loads: no GPU backend, no GPU memory taken
        if not self.cell.framework.preallocate:  # type: ignore[attr-defined]
            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        data_parallel.split_host(device.count)
        import jax

        if device.nodes > 1:  # before JAX makes its devices: they are then every node's
            nodes.join(jax, device.nodes, cpu=device.name == "cpu")
        gpus: list[Any] = []
        if device.name != "cpu":
            try:
                gpus = jax.local_devices(backend="gpu")
            except RuntimeError:  # no GPU platform at all
                gpus = []
        if gpus:
            backend = "cuda"
        elif device.name == "gpu":
            raise DeviceUnavailable(_no_jax_gpu_reason(jax))
        else:
            backend = "cpu"
        local = data_parallel.choose(gpus or jax.local_devices(backend="cpu"), device.count, backend)
        self.devices = nodes.global_devices(jax, local) if device.nodes > 1 else local
        self.replicas = len(self.devices)
        jax.config.update("jax_default_device", local[0])
        self.shardings = data_parallel.Shardings(jax, self.devices) if self.replicas > 1 else None
        # JAX lets fp32 matmuls and convolutions use TF32 on NVIDIA by default: "fp32" must mean fp32.
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if self.tf32 else "highest")
        if not self.cell.optimize.compile:
            self.compile_reason = JAX_ALWAYS_JITS
        self.jax = jax
        return backend

    def version(self) -> str:
        return str(self.jax.__version__)

    def backend_versions(self) -> dict[str, str]:
        import jaxlib

        tags = {"sw.jax": self.jax.__version__, "sw.jaxlib": jaxlib.__version__}
        if self.backend == "cuda":
            tags["sw.cuda"] = _jax_cuda_version(self.jax)
        return tags

    def flags(self) -> dict[str, str]:
        tags = {
            **super().flags(),
            "jax.matmul_precision": str(self.jax.config.jax_default_matmul_precision),
            # XLA reports no thread count: what XLA_FLAGS (threads.XLA_FLAGS) sets, else its own choice.
            "trainbench.intra_op_threads": xla_intra_op_threads(os.environ.get("XLA_FLAGS", "")),
        }
        if self.replicas > 1:
            tags.update(data_parallel.tags(self.devices, self.data_parallel_step()))
        if self.cell.device.nodes > 1:
            tags.update(nodes.tags(self.jax, self.devices, self.backend))
        return tags

    def jit_compile(self) -> bool:
        return True

    def data_parallel_step(self) -> str:
        """framework.data_parallel_step as it runs: Keras' model.fit (task.timed_region=fit) has its own."""
        return "keras" if fit_mode(self.cell) else str(self.cell.framework.data_parallel_step)  # type: ignore[attr-defined]

    def synchronize(self) -> None:
        # JAX has no "wait for the device": wait for the newest outputs of the queue (the training state,
        # or the last product or prediction).
        # Buffers donated to a later step (or to Keras' evaluate) are gone; the ones that replaced them
        # are newer, so waiting on what is still alive is enough.
        alive = [
            leaf
            for leaf in self.jax.tree_util.tree_leaves(self.pending)
            if hasattr(leaf, "is_deleted") and not leaf.is_deleted()
        ]
        if alive:
            self.jax.block_until_ready(alive)

    def on_device(self, array: Any) -> Any:
        # Data-parallel: a copy on every device, as each PyTorch rank holds the split.
        return self.jax.device_put(array, self.shardings.replicated if self.shardings else None)

    def trainer_types(self) -> tuple[type[KerasTrainer], type[KerasTrainer]]:
        return Trainer, LoaderTrainer

    def matmul_step(self, n: int, shape: str, fresh_operands: bool) -> Callable[[], None]:
        jax = self.jax
        import itertools

        import jax.numpy as jnp

        dtype = self.matmul_dtype()
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        if fresh_operands:
            seed = jax.random.key(self.cell.seed)

            @jax.jit
            def draw_and_multiply(index: Any) -> Any:  # one program: both draws and the product
                key_a, key_b = jax.random.split(jax.random.fold_in(seed, index))
                return jnp.matmul(jax.random.normal(key_a, a_shape, dtype), jax.random.normal(key_b, b_shape, dtype))

            calls = itertools.count()

            def fresh() -> None:
                self.pending = draw_and_multiply(next(calls))

            return fresh
        key_a, key_b = jax.random.split(jax.random.key(self.cell.seed))
        a, b = jax.random.normal(key_a, a_shape, dtype), jax.random.normal(key_b, b_shape, dtype)
        product = jax.jit(jnp.matmul)

        def multiply() -> None:
            self.pending = product(a, b)

        return multiply

    @contextlib.contextmanager
    def tensorflow_refused(self) -> Iterator[None]:
        """In a JAX cell, `import tensorflow` fails while this is open. keras.utils.set_random_seed and
        keras-hub import TensorFlow wherever it is installed, and do without it where it is not; a JAX
        cell must not load it (seconds of import, and a second set of CUDA libraries beside jaxlib's).
        Keras and keras-hub then leave TensorFlow alone for the rest of the process."""
        if "tensorflow" in sys.modules:
            yield
            return
        refused = ("tensorflow", "tensorflow_text")
        for name in refused:
            sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
        try:
            yield
        finally:
            for name in refused:
                sys.modules.pop(name, None)


class Trainer(KerasTrainer):
    """Keras' fit loop on JAX, minus the host: one jitted program per step, state threaded through."""

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        super().__init__(adapter, model, data, cell)
        self.jax = adapter.jax
        self.key = self.jax.random.key(cell.seed)
        self.order = self.jax.numpy.arange(self.samples_per_epoch)
        self.state: Any = None
        self._steps: dict[int, Any] = {}
        # Data-parallel: the variables' shardings, for the state each step returns (read before the state is
        # taken out of the model).
        self.state_shardings = self.model._get_state_sharding_spec() if adapter.shardings else None

    def _step_for(self, size: int) -> Any:
        """The jitted step for batches of `size` (the tail batch of an epoch gets its own)."""
        if size not in self._steps:
            jax, model, shardings = self.jax, self.model, self.adapter.shardings  # type: ignore[attr-defined]
            per_device = self.adapter.data_parallel_step() == "per_device"  # type: ignore[attr-defined]
            if shardings is not None and per_device and size % self.adapter.replicas == 0:
                step = shardings.per_device_step(model, size)
                self._steps[size] = jax.jit(step, donate_argnums=0, out_shardings=self.state_shardings)
                return self._steps[size]

            def train(state: Any, inputs: Any, labels: Any, order: Any, start: Any) -> Any:
                positions = jax.lax.dynamic_slice(order, (start,), (size,))
                batch = (jax.numpy.take(inputs, positions, axis=0), jax.numpy.take(labels, positions, axis=0))
                if shardings is not None:
                    batch = shardings.split_batch(batch)
                _, state = model.train_step(state, batch)
                return state

            self._steps[size] = jax.jit(train, donate_argnums=0, out_shardings=self.state_shardings)
        return self._steps[size]

    def _take_state(self) -> None:
        """The model's variables as the step's state, the way Keras' fit takes them (and purges them)."""
        if self.state is None:
            self.state = self.model._get_jax_state(
                trainable_variables=True,
                non_trainable_variables=True,
                optimizer_variables=True,
                metrics_variables=True,
                purge_model_variables=True,
            )

    def sync_state(self) -> None:
        if self.state is None:
            return
        trainable, non_trainable, optimizer_state, metrics = self.state
        self.model._jax_state = {
            "trainable_variables": trainable,
            "non_trainable_variables": non_trainable,
            "optimizer_variables": optimizer_state,
            "metrics_variables": metrics,
        }
        self.model._jax_state_synced = False
        self.model.jax_state_sync()
        self.model._jax_state = None
        self.state = None

    def evaluate(self) -> tuple[float | None, float | None]:
        shardings = self.adapter.shardings  # type: ignore[attr-defined]
        if shardings is None:
            return super().evaluate()
        with shardings.undistributed():
            return super().evaluate()

    def begin_epoch(self, epoch: int) -> None:
        self.sync_state()
        self.model.reset_metrics()
        self._take_state()
        self.key, shuffle = self.jax.random.split(self.key)
        self.order = self.jax.random.permutation(shuffle, self.samples_per_epoch)
        # Done before the epoch's timed block, as in the other frameworks: synchronize waits for the state only.
        self.order.block_until_ready()

    def step(self, index: int) -> None:
        size = self.batch_size if index < self.full_steps else self.tail
        self.state = self._step_for(size)(self.state, self.inputs, self.labels, self.order, index * self.batch_size)
        self.adapter.pending = self.state

    def resident_step(self) -> Callable[[], None]:
        self.sync_state()
        self._take_state()
        step = self._step_for(self.batch_size)
        # The first batch_size samples on every device (data-parallel: repeated to fill the global batch).
        order = self.jax.numpy.arange(max(self.samples_per_epoch, self.batch_size)) % self.samples_per_epoch

        def one_step() -> None:
            self.state = step(self.state, self.inputs, self.labels, order, 0)
            self.adapter.pending = self.state

        return one_step

    def make_predict(self) -> Callable[[Any], Any]:
        model = self.model
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        forward = self.jax.jit(lambda x: model.stateless_call(trainable, non_trainable, x, training=False)[0])
        return forward


class LoaderTrainer(HostBatches, Trainer):
    """data.pipeline=loader: JAX has no input pipeline of its own, so batches are prepared on the host by a
    pool of `data.loader_workers` threads (trainbench.data.prepare_images on each batch: scale, bilinear resize
    as F.interpolate without antialiasing, gray -> RGB, normalise, NHWC; NumPy releases the GIL for most of
    it), 2 batches per worker prefetched in order, each put on the device by the step that uses it. The
    iterator starts with the epoch's first step, inside the timed epoch."""

    def training_split(self) -> tuple[Any, Any, bool]:
        return self.host_first_batch()

    def __init__(self, adapter: Adapter, model: Any, data: Dataset, cell: CellConfig) -> None:
        import numpy as np

        super().__init__(adapter, model, data, cell)
        self.workers = cell.data.loader_workers
        self.shuffle = np.random.default_rng(cell.seed)
        self._batches: Any = None
        self._pool: Any = None
        if self.workers:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="trainbench-loader")
        model = self.model
        self._train = self.jax.jit(lambda state, x, y: model.train_step(state, (x, y))[1], donate_argnums=0)
        self._across_nodes = adapter.shardings is not None and cell.device.nodes > 1
        self._per_device: Any = None
        if adapter.shardings is not None and adapter.data_parallel_step() == "per_device":
            step = adapter.shardings.per_device_batch_step(model)
            self._per_device = self.jax.jit(step, donate_argnums=0, out_shardings=self.state_shardings)

    def _prepare(self, positions: Any) -> tuple[Any, Any]:
        from trainbench.data import Split
        from trainbench.frameworks.keras.adapter import host_split

        if self._across_nodes:  # each node prepares its own share of the global batch, no more
            positions = nodes.own_share(
                positions, self.jax.process_index(), self.jax.process_count(), self.adapter.replicas
            )
        return host_split(Split(self.data.train.inputs[positions], self.data.train.labels[positions]), self.data)

    def _iterate(self, order: Any) -> Iterator[tuple[Any, Any]]:
        from collections import deque

        starts = iter(range(0, self.samples_per_epoch, self.batch_size))
        if self._pool is None:
            for start in starts:
                yield self._prepare(order[start : start + self.batch_size])
            return
        pending: deque[Any] = deque()

        def submit() -> None:
            start = next(starts, None)
            if start is not None:
                pending.append(self._pool.submit(self._prepare, order[start : start + self.batch_size]))

        for _ in range(2 * self.workers):
            submit()
        while pending:
            batch = pending.popleft().result()
            submit()
            yield batch

    def begin_epoch(self, epoch: int) -> None:
        super().begin_epoch(epoch)
        self._batches = None
        self.input_wait_s = 0.0

    def step(self, index: int) -> None:
        if self._batches is None:
            self._batches = self._iterate(self.shuffle.permutation(self.samples_per_epoch))
        x, y = self.wait(self._batches)
        batch = self.adapter.shardings.batch if self.adapter.shardings else None  # type: ignore[attr-defined]
        size = self.batch_size if index < self.full_steps else self.tail
        per_device = self._per_device is not None and size % self.adapter.replicas == 0
        if self._across_nodes:  # the nodes' shares, one global batch split along the mesh
            x, y = (self.jax.make_array_from_process_local_data(batch, part) for part in (x, y))
        elif per_device:
            x, y = self.jax.device_put(x, batch), self.jax.device_put(y, batch)
        else:
            x, y = self.jax.device_put(x), self.jax.device_put(y)
        train = self._per_device if per_device else self._train
        self.state = train(self.state, x, y)
        self.adapter.pending = self.state

    def end_epoch(self) -> Any:
        return self.with_wait(super().end_epoch())


def _no_jax_gpu_reason(jax: Any) -> str:
    platforms = sorted({device.platform for device in jax.devices()})
    plugin = [name for name in ("jax-cuda13-plugin", "jax-cuda12-plugin") if installed(name)]
    build = (
        f"{plugin[0]} {installed(plugin[0])} is installed"
        if plugin
        else "no CUDA plugin installed: pip install 'jax[cuda12]'"
    )
    return (
        f"no GPU visible to JAX {jax.__version__} (jax.devices('gpu') found none; platforms: "
        f"{', '.join(platforms)}; {build}); Keras on JAX runs on CUDA GPUs only here"
    )


def _jax_cuda_version(jax: Any) -> str:
    """'12.8' from the GPU client's platform version (e.g. 'cuda 12080'), else the text as it is."""
    text = str(getattr(jax.devices()[0].client, "platform_version", ""))
    found = re.search(r"cuda\D*(\d{4,5})", text, re.IGNORECASE)
    if not found:
        return text.strip()
    number = int(found.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


if TYPE_CHECKING:
    from trainbench.frameworks import base

    def _held_to_the_contract(
        adapter: Adapter, device: JaxDevice, trainer: Trainer, loader_trainer: LoaderTrainer, cell: CellConfig
    ) -> None:
        """trainbench.frameworks.load imports adapters by name, so no call site ties them to the contract: this
        does. mypy checks each class against the Protocol it stands for and names any member it lacks, and
        refuses to build an adapter or device that lacks one of the Keras backend's own (keras.adapter's
        KerasBackend, KerasDeviceMemory, KerasPredict)."""
        Adapter(cell), JaxDevice(adapter)
        _adapter: base.Framework = adapter
        _device: base.Device = device
        _trainer: base.Trainer = trainer
        _loader_trainer: base.Trainer = loader_trainer


def xla_intra_op_threads(xla_flags: str) -> str:
    """XLA's CPU threads for one op as XLA_FLAGS sets them: 1 without Eigen's thread pool, the number given to
    intra_op_parallelism_threads, else "auto" (one per core the process may use)."""
    if "--xla_cpu_multi_thread_eigen=false" in xla_flags:
        return "1"
    match = re.search(r"intra_op_parallelism_threads=(\d+)", xla_flags)
    return match.group(1) if match else "auto"
