"""Data-parallel Keras-on-JAX cells: keras.distribution.DataParallel over the cell's devices.

Keras creates every variable replicated on the device mesh once the distribution is set (before the model
is built). The train step stays one jitted program: the resident split is replicated on every device, the
step gathers the global batch (batch_size per device x devices) and constrains it to be split along the
mesh's `batch` axis, so XLA's partitioner runs each device on its slice and all-reduces the gradients; the
updated state keeps the variables' own shardings (as Keras' fit asks of jax.jit). On a CPU, XLA's host
platform is split into device.count devices (--xla_force_host_platform_device_count) before JAX loads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def split_host(count: Any) -> None:
    """Before JAX loads: let XLA show the host as `count` CPU devices (unless XLA_FLAGS already says)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if isinstance(count, int) and count > 1 and HOST_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICES_FLAG}={count}".strip()


def choose(available: list[Any], count: Any, backend: str) -> list[Any]:
    """The first `count` devices (`all`: every one); DeviceUnavailable when there are fewer."""
    from trainbench.frameworks.base import DeviceUnavailable

    wanted = len(available) if count == "all" else int(count)
    if len(available) < wanted:
        raise DeviceUnavailable(
            f"device.count={count} asks for {wanted} devices; JAX sees {len(available)} {backend} device(s)"
        )
    return available[:wanted]


class Shardings:
    """The cell's mesh as Keras distributes over it: replicated (weights, the resident split) and split
    along the batch (a step's global batch)."""

    def __init__(self, jax: Any, devices: list[Any]) -> None:
        import keras
        import numpy as np

        self.distribution = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(self.distribution)
        mesh = jax.sharding.Mesh(np.array(devices), ("batch",))  # the mesh DataParallel builds: one `batch` axis
        self.jax = jax
        self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        self.batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))

    @contextlib.contextmanager
    def undistributed(self) -> Iterator[None]:
        """Keras without the distribution, e.g. for evaluate: its data sharding refuses a last validation batch
        that the devices do not divide; the replicated weights serve one device as well."""
        import keras

        keras.distribution.set_distribution(None)
        try:
            yield
        finally:
            keras.distribution.set_distribution(self.distribution)

    def split_batch(self, batch: Any) -> Any:
        """Inside the jitted step: each device gets its slice of the global batch."""
        return self.jax.lax.with_sharding_constraint(batch, self.batch)


def tags(devices: list[Any]) -> dict[str, str]:
    nodes = len({device.process_index for device in devices})
    across = f" on {nodes} nodes" if nodes > 1 else ""
    return {
        "trainbench.data_parallel": f"keras.distribution.DataParallel ({len(devices)} {devices[0].platform} devices{across})"
    }
