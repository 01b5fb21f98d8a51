"""Data-parallel Keras-on-TensorFlow cells: tf.distribute.MirroredStrategy over the cell's devices.

The strategy is made the process's current one (tf.distribute.experimental_set_strategy: a cell's process
runs one cell), so Keras builds and compiles the model, its optimizer and metrics as mirrored variables
(Keras scales the loss and all-reduces the gradients itself, as in its own fit). The train step is still
one tf.function: it runs Keras' train_step on every replica with strategy.run, each replica gathering its
slice of the global batch from its own copy of the resident split. On a CPU the host is split into
device.count logical CPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def mirror(tf: Any, devices: list[Any], backend: str) -> Any:
    """A MirroredStrategy over `devices` (physical GPUs made visible, or the CPU split in as many logical
    CPUs), set as the current strategy; returns it."""
    if backend == "cpu":
        tf.config.set_logical_device_configuration(devices[0], [tf.config.LogicalDeviceConfiguration()] * len(devices))
        names = [f"/CPU:{i}" for i in range(len(devices))]
    else:
        names = [f"/GPU:{i}" for i in range(len(devices))]
    strategy = tf.distribute.MirroredStrategy(names)
    tf.distribute.experimental_set_strategy(strategy)
    return strategy


def choose(tf: Any, gpus: list[Any], count: Any, backend: str) -> list[Any]:
    """The devices a cell of device.count=`count` runs on: the first GPUs, or the CPU `count` times over."""
    from trainbench.frameworks.base import DeviceUnavailable

    if backend == "cpu":
        return tf.config.list_physical_devices("CPU") * (1 if count == "all" else int(count))
    wanted = len(gpus) if count == "all" else int(count)
    if len(gpus) < wanted:
        raise DeviceUnavailable(f"device.count={count} asks for {wanted} GPUs; TensorFlow sees {len(gpus)}")
    return gpus[:wanted]


def per_replica(strategy: Any, tf: Any, value: Any) -> Any:
    """`value` copied once onto every replica's device (each replica gathers from its own copy)."""
    return strategy.experimental_distribute_values_from_function(lambda _: tf.identity(value))


def replica_slice(tf: Any, size: int, replicas: int) -> tuple[Any, Any]:
    """(offset, length) of this replica's part of a global batch of `size`, inside strategy.run: as equal as
    can be, in replica order (plain ints when the batch divides evenly, so XLA sees static shapes)."""
    base, extra = divmod(size, replicas)
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    if extra == 0:
        return replica * base, base
    return replica * base + tf.minimum(replica, extra), base + tf.cast(replica < extra, tf.int32)


def run_step(strategy: Any, step: Callable[..., Any], *args: Any) -> Any:
    """step(*args) on every replica; the replicas' outputs, for synchronize to wait on."""
    return strategy.experimental_local_results(strategy.run(step, args=args))


def tags(count: int, backend: str) -> dict[str, str]:
    return {"trainbench.data_parallel": f"tf.distribute.MirroredStrategy ({count} {backend} replicas)"}
