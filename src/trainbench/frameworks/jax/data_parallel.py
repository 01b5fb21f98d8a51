"""Data-parallel Keras-on-JAX cells over the cell's devices, one jitted program a step.

Keras creates every variable replicated on the device mesh once keras.distribution.DataParallel is set (before
the model is built); the resident split is replicated on every device; the updated state keeps the variables'
own shardings (as Keras' fit asks of jax.jit). The step (framework.data_parallel_step) is either
- `per_device` (per_device_step): shard_map over the mesh's `batch` axis. Each device gathers its own slice of
  the global batch (batch_size per device x devices) and runs Keras' forward, loss and gradients on it, so
  BatchNorm's batch statistics are the device's own, as in PyTorch's DDP; the gradients are averaged across the
  devices (on GPUs in buckets: `averaged`), then every device applies the same optimizer step. The BatchNorm moving
  statistics are averaged too, and the metric sums added up, so the state stays one.
- `keras`: Keras' own train step on the global batch, constrained to be split along the `batch` axis: XLA's
  partitioner runs each device on its slice and all-reduces the gradients, and reduces every BatchNorm's
  statistics across the devices, layer by layer, in the forward and the backward pass (synchronised BatchNorm):
  small all-reduces on the step's critical path.
An epoch's last batch, when the devices do not divide it, takes the `keras` step. On a CPU, XLA's host platform
is split into device.count devices (--xla_force_host_platform_device_count) before JAX loads.
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
        self.jax, self.mesh = jax, mesh
        self.bucket_bytes = bucket_bytes_for(devices)
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

    def per_device_step(self, model: Any, size: int) -> Any:
        """The `per_device` train step for global batches of `size` (a multiple of the device count), taken
        from the resident split: (state, inputs, labels, order, start) -> state, as the `keras` step; jit it."""
        jax = self.jax
        local = size // self.mesh.size
        update = _local_update(jax, model, self.bucket_bytes)

        def on_each_device(state: Any, inputs: Any, labels: Any, order: Any, start: Any) -> Any:
            first = start + jax.lax.axis_index(AXIS) * local
            positions = jax.lax.dynamic_slice(order, (first,), (local,))
            return update(state, jax.numpy.take(inputs, positions, axis=0), jax.numpy.take(labels, positions, axis=0))

        # check_vma off: the integer state is replicated by construction, which shard_map cannot see.
        every = jax.sharding.PartitionSpec()
        return jax.shard_map(on_each_device, mesh=self.mesh, in_specs=every, out_specs=every, check_vma=False)

    def per_device_batch_step(self, model: Any) -> Any:
        """The `per_device` train step for a global batch already split along the mesh (the loader's):
        (state, x, y) -> state; jit it."""
        jax = self.jax
        every, split = jax.sharding.PartitionSpec(), jax.sharding.PartitionSpec(AXIS)
        return jax.shard_map(
            _local_update(jax, model, self.bucket_bytes),
            mesh=self.mesh,
            in_specs=(every, split, split),
            out_specs=every,
            check_vma=False,
        )


def _local_update(jax: Any, model: Any, bucket_bytes: int) -> Any:
    """One device's part of the `per_device` step, inside shard_map: Keras' forward, loss and gradients on the
    device's slice (x, y), the gradients averaged across the devices, Keras' optimizer step, then the moving
    statistics averaged and the metric sums added up, so that every device holds the same state."""
    numpy = jax.numpy
    gradients = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)

    def update(state: Any, x: Any, y: Any) -> Any:
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        (_, aux), grads = gradients(
            trainable, non_trainable, metrics_variables, x, y, None, training=True,
            optimizer_variables=optimizer_variables,
        )  # fmt: skip
        loss, predictions, non_trainable, metrics = aux
        grads = averaged(jax, grads, bucket_bytes)
        trainable, optimizer_variables = model.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        # Integer state (dropout's seed generators) is the same on every device.
        moving = [i for i, value in enumerate(non_trainable) if numpy.issubdtype(value.dtype, numpy.inexact)]
        non_trainable = list(non_trainable)
        for i, value in zip(moving, averaged(jax, [non_trainable[i] for i in moving], bucket_bytes), strict=True):
            non_trainable[i] = value
        _, metrics = model._update_metrics_variables(metrics, loss, x, y, predictions, None)
        # Keras' metrics keep sums (total, count): the global batch's are the sums of each device's additions.
        metrics = [old + jax.lax.psum(new - old, AXIS) for old, new in zip(metrics_variables, metrics, strict=True)]
        return trainable, non_trainable, optimizer_variables, metrics

    return update


AXIS = "batch"
# On GPUs the gradients are all-reduced in buffers of about this size, filled from the last layer back, as DDP's
# buckets: one all-reduce per tensor costs XLA:GPU a copy into and out of the combined collective for each of
# ResNet-50's 267 averaged tensors, small kernels that outweigh the transfer (results/2026-11-29-jax-buckets).
BUCKET_BYTES = 25 * 2**20


def bucket_bytes_for(devices: list[Any]) -> int:
    """BUCKET_BYTES on GPUs, else 0 (one all-reduce per tensor): XLA:CPU runs a raveled buffer's all-reduce and
    slices far slower than its own per-tensor all-reduces (the seed MLP on 2 host devices: 40 against 6,300
    samples/s), and TPUs were not measured."""
    return BUCKET_BYTES if devices[0].platform == "gpu" else 0


def averaged(jax: Any, values: list[Any], bucket_bytes: int) -> list[Any]:
    """lax.pmean of each value across the devices. With bucket_bytes, as few all-reduces: the values raveled
    into one buffer per bucket (one dtype a bucket), filled from the last value back as DDP fills its buckets."""
    if bucket_bytes <= 0:
        return list(jax.lax.pmean(list(values), AXIS))
    numpy = jax.numpy
    buckets: list[list[int]] = []
    size = 0
    for i in reversed(range(len(values))):
        value = values[i]
        nbytes = value.size * value.dtype.itemsize
        if not buckets or size + nbytes > bucket_bytes or values[buckets[-1][0]].dtype != value.dtype:
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += nbytes
    result = list(values)
    for bucket in buckets:
        flat = jax.lax.pmean(numpy.concatenate([values[i].ravel() for i in bucket]), AXIS)
        offset = 0
        for i in bucket:
            result[i] = flat[offset : offset + values[i].size].reshape(values[i].shape)
            offset += values[i].size
    return result


def describe(devices: list[Any], step: str) -> str:
    """trainbench.data_parallel: how the step ran over which devices."""
    nodes = len({device.process_index for device in devices})
    across = f" on {nodes} nodes" if nodes > 1 else ""
    where = f"{len(devices)} {devices[0].platform} devices{across}"
    if step == "per_device":
        buckets = bucket_bytes_for(devices)
        averaging = f"in {buckets // 2**20} MB buckets" if buckets else "per tensor"
        return (
            f"per-device step, shard_map over {where}: BatchNorm statistics per device, gradients averaged"
            f" {averaging} (as DDP); mesh and variables from keras.distribution.DataParallel"
        )
    return f"keras.distribution.DataParallel ({where}): Keras' train step partitioned by XLA, BatchNorm synchronised"


def tags(devices: list[Any], step: str) -> dict[str, str]:
    return {"trainbench.data_parallel": describe(devices, step)}
