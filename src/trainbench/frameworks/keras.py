"""Keras 3 adapter: framework=tensorflow (TensorFlow backend) and framework=jax (JAX backend).

With keras_models, the only module that imports keras, tensorflow or jax, and none of them at import time:
Keras reads KERAS_BACKEND when it is first imported, and for device=cpu the GPUs must be hidden before
TensorFlow or JAX initialise (or they take GPU memory anyway). So __init__ picks the backend and
select_device imports, in that order.

gpu = CUDA on Linux (TensorFlow or JAX), or Metal on Apple silicon (TensorFlow with tensorflow-metal).
Training is `model.fit` on the same arrays as PyTorch: uint8 images preprocessed on the device by a
weightless first layer (keras_models.Preprocess), or token ids for the keras-hub text models; a callback
times each epoch's training pass and reports it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from trainbench import progress
from trainbench.data import Dataset
from trainbench.frameworks.base import DeviceUnavailable, EpochStats, OnEpochEnd
from trainbench.timing import Timer

# framework name (conf/framework/<name>.yaml) -> Keras backend
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax"}
# precision.autocast -> Keras dtype policy (variables stay float32 under the mixed ones)
DTYPE_POLICIES = {None: "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
METAL_NO_XLA = "XLA (jit_compile) is not supported by tensorflow-metal: compiled as a plain tf.function graph"
JAX_ALWAYS_JITS = "Keras on JAX always compiles the train step with XLA (jax.jit): compile=false does not apply"


class Adapter:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.name = cfg["framework"]["name"]
        if self.name not in KERAS_BACKENDS:
            raise ValueError(f"framework `{self.name}` has no Keras backend: use one of {', '.join(KERAS_BACKENDS)}")
        self.keras_backend = KERAS_BACKENDS[self.name]
        loaded = sys.modules.get("keras")
        if loaded is not None and loaded.backend.backend() != self.keras_backend:
            raise RuntimeError(f"keras is already loaded with the {loaded.backend.backend()} backend in this process")
        os.environ["KERAS_BACKEND"] = self.keras_backend
        precision = cfg["precision"]
        self.tf32 = bool(precision["tf32"])
        self.autocast: str | None = precision["autocast"]
        self.policy = DTYPE_POLICIES[self.autocast]
        self.backend = "cpu"
        self.compile_reason: str | None = None
        self._model: Any = None
        self._pending: Any = None  # outputs of the last resident step or matmul, for synchronize

    # -- device -------------------------------------------------------------------------------
    def select_device(self, requested: str) -> str:
        select = self._select_tensorflow if self.keras_backend == "tensorflow" else self._select_jax
        self.backend = select(requested)
        import keras

        keras.config.set_dtype_policy(self.policy)
        self._seed(keras)
        if self.keras_backend == "jax" and not self.cfg["compile"]:
            self.compile_reason = JAX_ALWAYS_JITS
        elif self.backend == "metal" and self.cfg["compile"]:
            self.compile_reason = METAL_NO_XLA
            progress.line(f"compile=true not applied: {METAL_NO_XLA}")
        return self.backend

    def _select_tensorflow(self, requested: str) -> str:
        if requested == "cpu":
            # Before TensorFlow loads: CUDA is then never initialised and no GPU memory is taken.
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if requested == "cpu" or not gpus:
            if requested == "gpu":
                raise DeviceUnavailable(_no_tensorflow_gpu_reason(tf))
            tf.config.set_visible_devices([], "GPU")  # Metal too, which CUDA_VISIBLE_DEVICES does not hide
            backend = "cpu"
        else:
            tf.config.set_visible_devices(gpus[:1], "GPU")  # one device, as PyTorch's cuda:0
            # Take memory as the model needs it, not all of it up front: peak memory then means something.
            tf.config.experimental.set_memory_growth(gpus[0], True)
            backend = "metal" if sys.platform == "darwin" else "cuda"
        # TensorFlow uses TF32 by default on Ampere and newer: "fp32" must mean fp32.
        tf.config.experimental.enable_tensor_float_32_execution(self.tf32)
        return backend

    def _select_jax(self, requested: str) -> str:
        if requested == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX loads: no GPU backend, no GPU memory taken
        import jax

        gpus: list[Any] = []
        if requested != "cpu":
            try:
                gpus = jax.devices("gpu")
            except RuntimeError:  # no GPU platform at all
                gpus = []
        if gpus:
            backend = "cuda"
            jax.config.update("jax_default_device", gpus[0])
        elif requested == "gpu":
            raise DeviceUnavailable(_no_jax_gpu_reason(jax))
        else:
            backend = "cpu"
            jax.config.update("jax_default_device", jax.devices("cpu")[0])
        # JAX lets fp32 matmuls and convolutions use TF32 on NVIDIA by default: "fp32" must mean fp32.
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if self.tf32 else "highest")
        return backend

    def versions(self) -> dict[str, str]:
        """The framework's own version first (tasks take the first value as trainbench.framework_version)."""
        import keras

        if self.cfg["model"].get("keras_hub") and self.cfg["model"]["input"] == "text":
            extra = {"sw.keras_hub": _installed("keras-hub")}
        else:
            extra = {}
        if self.keras_backend == "tensorflow":
            import tensorflow as tf

            tags = {"sw.tensorflow": tf.__version__, "sw.keras": keras.__version__, **extra}
            if self.backend == "cuda":
                build = tf.sysconfig.get_build_info()
                tags["sw.cuda"] = str(build.get("cuda_version", ""))
                tags["sw.cudnn"] = str(build.get("cudnn_version", ""))
            elif self.backend == "metal":
                tags["sw.tensorflow_metal"] = _installed("tensorflow-metal")
            return tags
        import jax
        import jaxlib

        tags = {"sw.jax": jax.__version__, "sw.jaxlib": jaxlib.__version__, "sw.keras": keras.__version__, **extra}
        if self.backend == "cuda":
            tags["sw.cuda"] = _jax_cuda_version(jax)
        return tags

    def flags(self) -> dict[str, str]:
        model = self.cfg["model"]
        tags = {
            "trainbench.tf32": str(self.tf32).lower(),
            "trainbench.autocast": self.autocast or "none",
            "trainbench.compile": str(self._jit_compile()).lower(),
            # Keras' convolutions are NHWC on every backend (trainbench never asks for channels_first).
            "trainbench.channels_last": str(model["input"] == "image" and model["builder"] != "mlp").lower(),
            "keras.backend": self.keras_backend,
            "keras.dtype_policy": self.policy,
        }
        if self.compile_reason:
            tags["trainbench.compile_reason"] = self.compile_reason
        if self.keras_backend == "jax":
            import jax

            tags["jax.matmul_precision"] = str(jax.config.jax_default_matmul_precision)
        return tags

    def synchronize(self) -> None:
        if self.keras_backend == "tensorflow":
            # On the CPU, TensorFlow returns from an op or a tf.function once it has run: nothing queued.
            if self.backend == "cuda":
                import tensorflow as tf

                tf.test.experimental.sync_devices()
            elif self.backend == "metal":
                # tensorflow-metal has no SyncDevice kernel; reading values back waits for Metal's in-order
                # queue up to the ops that wrote them: the last step's outputs and the newest weights.
                import tensorflow as tf

                newest = [] if self._model is None else self._model.trainable_variables[-1:]
                for value in tf.nest.flatten([self._pending, *newest]):
                    if value is not None:
                        value.numpy()
        else:
            # JAX has no "wait for the device": wait for the newest weights (outputs of every train step,
            # written back at the end of each fit epoch and each train_on_batch) and for the last
            # resident step's state or matmul product.
            import jax

            waiting = [] if self._model is None else [variable.value for variable in self._model.trainable_variables]
            jax.block_until_ready([*waiting, self._pending])

    def peak_device_memory_mb(self) -> float | None:
        if self.backend == "cpu":
            return None
        try:
            if self.keras_backend == "tensorflow":
                import tensorflow as tf

                return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
            import jax

            stats = jax.devices()[0].memory_stats() or {}
            peak = stats.get("peak_bytes_in_use")
            return None if peak is None else peak / 2**20
        except (ValueError, RuntimeError, AttributeError):  # no counter on this device (e.g. Metal)
            return None

    # -- model --------------------------------------------------------------------------------
    def build_model(self, model_cfg: dict[str, Any], data: Dataset) -> Any:
        import keras

        from trainbench.frameworks import keras_models

        self._seed(keras)
        if data.kind == "text":
            if not model_cfg["keras_hub"]:
                raise ValueError(f"model `{model_cfg['name']}` names no keras-hub backbone (`keras_hub:` in its YAML)")
            with self._tensorflow_refused():
                self._model = keras_models.text_classifier(model_cfg, data.seq_len, data.num_classes)
        else:
            self._model = keras_models.build(model_cfg, (data.image_size, data.image_size, data.channels),
                                             data.num_classes)
        return self._model

    def num_parameters(self, model: Any) -> int:
        from trainbench.frameworks import keras_models

        return keras_models.count_trainable(model)

    def flops_per_sample(self, model: Any, data: Dataset, cfg: dict[str, Any]) -> float | None:
        from trainbench.frameworks import keras_models

        if data.kind == "text":
            return keras_models.transformer_training_flops_per_sample(cfg["model"], data.seq_len, data.num_classes)
        return keras_models.training_flops_per_sample(model)

    # -- training -----------------------------------------------------------------------------
    def fit(self, model: Any, data: Dataset, cfg: dict[str, Any], on_epoch_end: OnEpochEnd) -> None:
        if cfg["epochs"] == 0:
            return
        import keras

        from trainbench.frameworks import keras_models

        trainer = model  # text: token ids go to the model as they are
        if data.kind == "image":
            # The same weights behind a weightless preprocessing layer: fit feeds it the uint8 arrays.
            images = keras.Input(data.train.inputs.shape[1:], dtype="uint8")
            trainer = keras.Model(images, model(_preprocess(keras_models, data)(images)), name=f"{model.name}_train")
        self._compile(trainer, cfg)
        batch_size = cfg["batch_size"]
        callbacks = [_epoch_recorder(keras, self.synchronize, len(data.train), on_epoch_end)]
        if progress.interactive():
            callbacks.append(_progress_bar(keras, -(-len(data.train) // batch_size), cfg["epochs"]))
        validation = (data.val.inputs, data.val.labels) if len(data.val) else None
        trainer.fit(data.train.inputs, data.train.labels, batch_size=batch_size, epochs=cfg["epochs"],
                    validation_data=validation, shuffle=True, verbose=0, callbacks=callbacks)

    def resident_train_step(self, model: Any, data: Dataset, cfg: dict[str, Any]) -> Callable[[], None]:
        from trainbench.frameworks import keras_models

        count = cfg["batch_size"]
        batch = self._on_device(data.train.inputs[:count])
        if data.kind == "image":
            # Preprocessed once, on the device, outside the timed steps (as the PyTorch adapter does).
            batch = _preprocess(keras_models, data)(batch)
        target = self._on_device(data.train.labels[:count])
        self._compile(model, cfg)
        state: list[Any] = []  # JAX: the training state, threaded from one step to the next

        def one_step() -> None:
            if not state:
                # The first step builds the optimizer and compiles the train step (it is warm-up).
                model.train_on_batch(batch, target)
                state.append(_jax_training_state(model) if self.keras_backend == "jax" else None)
                return
            # Then the compiled step alone, as fit runs it: train_on_batch would add, per step, a
            # metrics reset, a read-back of the loss and (JAX) a write-back of every variable.
            # (x, y, sample_weight), as train_on_batch passes it: another structure would recompile.
            if self.keras_backend == "jax":
                logs, state[0] = model.train_function(state[0], iter([(batch, target, None)]))
                self._pending = (logs, state[0])
            else:
                self._pending = model.train_function(iter([(batch, target, None)]))

        return one_step

    # -- matmul -------------------------------------------------------------------------------
    def matmul_step(self, n: int, shape: str) -> Callable[[], None]:
        """One product in the cell's precision: n x n @ n x n (square) or 1 x n @ n x 1 (vector)."""
        dtype = self._matmul_dtype()
        a_shape, b_shape = ((n, n), (n, n)) if shape == "square" else ((1, n), (n, 1))
        if self.keras_backend == "jax":
            import jax
            import jax.numpy as jnp

            key_a, key_b = jax.random.split(jax.random.key(self.cfg["seed"]))
            a, b = jax.random.normal(key_a, a_shape, dtype), jax.random.normal(key_b, b_shape, dtype)
            product = jax.jit(jnp.matmul)

            def multiply() -> None:
                self._pending = product(a, b)  # kept: synchronize waits for it

            return multiply
        import tensorflow as tf

        with tf.device(self._tf_device()):
            generator = tf.random.Generator.from_seed(self.cfg["seed"])
            a = tf.cast(generator.normal(a_shape), dtype)
            b = tf.cast(generator.normal(b_shape), dtype)

        def multiply_tf() -> None:
            with tf.device(self._tf_device()):
                self._pending = tf.linalg.matmul(a, b)

        return multiply_tf

    def matmul_element_bytes(self) -> int:
        return 4 if self._matmul_dtype() == "float32" else 2

    def _matmul_dtype(self) -> str:
        if self.cfg["precision"]["name"] == "tf32" and self.backend != "cuda":
            raise DeviceUnavailable(f"TF32 is an NVIDIA tensor-core mode (Ampere or newer); {self.backend} "
                                    "computes fp32: use precision=fp32")
        dtype = self.autocast or "float32"
        try:  # the first product tells whether this device implements the dtype at all
            import keras

            keras.ops.convert_to_numpy(keras.ops.matmul(keras.ops.ones((2, 2), dtype), keras.ops.ones((2, 2), dtype)))
        except Exception as error:  # TensorFlow and XLA raise their own types for a missing kernel
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DeviceUnavailable(f"{dtype} matmul not supported on {self.backend}: {reason}") from None
        return dtype

    # -- internals ----------------------------------------------------------------------------
    def _compile(self, model: Any, cfg: dict[str, Any]) -> None:
        import keras

        from trainbench.frameworks import keras_models

        if cfg["model"]["output_activation"] is None:
            loss: Any = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        elif cfg["model"]["output_activation"] == "sigmoid":
            loss = keras_models.sigmoid_categorical_crossentropy
        else:
            raise ValueError(f"model.output_activation={cfg['model']['output_activation']!r}: use null (logits) or sigmoid")
        # mixed_float16: Keras wraps the optimizer in a LossScaleOptimizer (dynamic loss scaling) itself.
        model.compile(optimizer=_optimizer(keras, cfg["optim"]), loss=loss,
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                      jit_compile=self._jit_compile())

    def _seed(self, keras: Any) -> None:
        """keras.utils.set_random_seed: Python, NumPy, Keras' initialisers and shuffling (and TensorFlow)."""
        with self._tensorflow_refused():
            keras.utils.set_random_seed(self.cfg["seed"])

    @contextlib.contextmanager
    def _tensorflow_refused(self) -> Iterator[None]:
        """In a JAX cell, `import tensorflow` fails while this is open. keras.utils.set_random_seed and
        keras-hub import TensorFlow wherever it is installed, and do without it where it is not; a JAX
        cell must not load it (seconds of import, and a second set of CUDA libraries beside jaxlib's).
        Keras and keras-hub then leave TensorFlow alone for the rest of the process."""
        if self.keras_backend == "tensorflow" or "tensorflow" in sys.modules:
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

    def _jit_compile(self) -> bool:
        if self.keras_backend == "jax":
            return True
        return bool(self.cfg["compile"]) and self.backend != "metal"

    def _on_device(self, array: Any) -> Any:
        if self.keras_backend == "jax":
            import jax

            return jax.device_put(array)
        import tensorflow as tf

        with tf.device(self._tf_device()):
            return tf.identity(tf.convert_to_tensor(array))

    def _tf_device(self) -> str:
        return "/CPU:0" if self.backend == "cpu" else "/GPU:0"


def _jax_training_state(model: Any) -> tuple[list[Any], ...]:
    """What Keras' JAX train step takes and returns: trainable, non-trainable, optimizer and metric
    variables' values. Copies: the compiled step donates (consumes) its input state."""
    import jax.numpy as jnp

    groups = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
              model.metrics_variables)
    return tuple([jnp.copy(variable.value) for variable in group] for group in groups)


def _preprocess(keras_models: Any, data: Dataset) -> Any:
    return keras_models.Preprocess(data.image_size, data.channels, data.mean, data.std, name="preprocess")


def _optimizer(keras: Any, optim: dict[str, Any]) -> Any:
    """The optimizers of pytorch._optimizer, with PyTorch's semantics.

    torch's SGD and Adam apply weight_decay as L2 (added to the gradient); Keras' weight_decay is
    decoupled (AdamW's): so SGD and Adam add it to the gradient here. AdamW is the same in both.
    torch's Adam epsilon is 1e-8 (Keras' default 1e-7); Keras adds it to sqrt(v) before the bias
    correction, torch after: the same update up to epsilon's scale.
    """
    lr, decay = optim["lr"], optim["weight_decay"]
    if optim["name"] == "adamw":
        return keras.optimizers.AdamW(learning_rate=lr, weight_decay=decay, epsilon=1e-8)
    if optim["name"] == "sgd":
        base, options = keras.optimizers.SGD, {"momentum": optim["momentum"]}
    else:
        base, options = keras.optimizers.Adam, {"epsilon": 1e-8}
    if not decay:
        return base(learning_rate=lr, **options)
    ops = keras.ops

    class CoupledWeightDecay(base):  # type: ignore[misc, valid-type]
        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            gradient = ops.add(gradient, ops.multiply(ops.cast(variable, gradient.dtype), decay))
            super().update_step(gradient, variable, learning_rate)

    return CoupledWeightDecay(learning_rate=lr, **options)


def _epoch_recorder(keras: Any, synchronize: Callable[[], None], samples: int, report: OnEpochEnd) -> Any:
    """A callback timing each epoch's training pass (validation excluded) and reporting EpochStats."""

    class EpochRecorder(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.timer: Timer | None = None
            self.seconds = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.timer = Timer(synchronize).__enter__()

        def on_test_begin(self, logs: Any = None) -> None:
            self._stop()  # fit starts validating: the training pass is over

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._stop()  # no validation split: the epoch ends with its training pass
            logs = logs or {}
            report(EpochStats(epoch + 1, self.seconds, samples, float(logs["loss"]), float(logs["accuracy"]),
                              _number(logs.get("val_loss")), _number(logs.get("val_accuracy"))))

        def _stop(self) -> None:
            if self.timer is not None:
                self.timer.__exit__(None, None, None)  # synchronizes before reading the clock
                self.seconds, self.timer = self.timer.seconds, None

    return EpochRecorder()


def _progress_bar(keras: Any, steps: int, epochs: int) -> Any:
    class ProgressBar(keras.callbacks.Callback):
        async_safe = True  # counting batches reads no tensor: Keras may call it off the training thread

        def __init__(self) -> None:
            super().__init__()
            self.bar: progress.EpochBar | None = None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.bar = progress.EpochBar(steps, f"epoch {epoch + 1}/{epochs}")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.bar is not None:
                self.bar.update()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.bar is not None:
                self.bar.close()

    return ProgressBar()


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _no_tensorflow_gpu_reason(tf: Any) -> str:
    cuda = tf.sysconfig.get_build_info().get("cuda_version") if tf.test.is_built_with_cuda() else None
    build = f"CUDA build: yes, CUDA {cuda}" if cuda else "CUDA build: no"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None:
        build += f"; CUDA_VISIBLE_DEVICES={hidden!r}"
    if sys.platform == "darwin":
        metal = _installed("tensorflow-metal")
        hint = (f"tensorflow-metal {metal} is installed but found no Metal GPU" if metal
                else "Metal needs tensorflow-metal (pip install tensorflow-metal) on Apple silicon")
    else:
        hint = "Metal needs tensorflow-metal on Apple silicon"
    return (f"no GPU visible to TensorFlow {tf.__version__} "
            f"(tf.config.list_physical_devices('GPU') is empty; {build}); {hint}")


def _no_jax_gpu_reason(jax: Any) -> str:
    platforms = sorted({device.platform for device in jax.devices()})
    plugin = [name for name in ("jax-cuda13-plugin", "jax-cuda12-plugin") if _installed(name)]
    build = f"{plugin[0]} {_installed(plugin[0])} is installed" if plugin else "no CUDA plugin installed: pip install 'jax[cuda12]'"
    return (f"no GPU visible to JAX {jax.__version__} (jax.devices('gpu') found none; platforms: "
            f"{', '.join(platforms)}; {build}); Keras on JAX runs on CUDA GPUs only here")


def _jax_cuda_version(jax: Any) -> str:
    """'12.8' from the GPU client's platform version (e.g. 'cuda 12080'), else the text as it is."""
    text = str(getattr(jax.devices()[0].client, "platform_version", ""))
    found = re.search(r"cuda\D*(\d{4,5})", text, re.IGNORECASE)
    if not found:
        return text.strip()
    number = int(found.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"
