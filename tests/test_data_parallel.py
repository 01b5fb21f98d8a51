"""Data-parallel cells (device.count > 1) on the frameworks' own engines, on the CPU: PyTorch DDP over gloo
ranks started by torch elastic, Keras DataParallel over XLA host devices, MirroredStrategy over logical
CPUs. They learn what one device learns, log once, scale against the 1-device cell, and a failing rank
fails the cell with its reason. Topology and the scaling chart are checked on their own, fast."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import metric_history
from test_report import make_entry
from trainbench.cell.in_cell import INJECT_FAULT_ENV
from trainbench.measure.topology import interconnect, parse_topology_matrix, physical_indices
from trainbench.report.plots import scaling_panels
from trainbench.report.selection import Entry

SAMPLES = Path(__file__).parent / "samples"
DIGITS = ["model=mlp", "data=digits", "device=cpu", "batch_size=32", "tracking.system_metrics_interval_s=0"]


def cells(result) -> dict[str, object]:
    """The sweep's cell runs by device count."""
    return {r.data.tags["trainbench.num_devices"]: r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"}


# ------------------------------------------------------------------------- scaling efficiency, in a real store


@pytest.mark.parametrize("noisy_single", [False, True])
def test_an_efficiency_carries_both_figures_errors_and_says_when_either_was_noisy(tmp_path, noisy_single) -> None:
    # A host-bound BERT-Large on a busy H100 host measured 451 +/- 20 seq/s on 1 GPU and 2,087 +/- 764 on 4:
    # "1.16" alone reads as super-linear scaling; with its interval and the noisy tag it reads as what it is.
    from mlflow.tracking import MlflowClient

    from conftest import with_schema
    from test_config import cell as compose_cell
    from trainbench.config import config_hash, replace
    from trainbench.measure.hardware import run_label
    from trainbench.sweep import scaling

    client = MlflowClient(with_schema(f"sqlite:///{tmp_path}/mlflow.db"))
    experiment = client.create_experiment("trainbench", artifact_location=str(tmp_path / "artifacts"))
    four = compose_cell("model=mlp", "task=benchmark", "device.count=4")
    common = {"trainbench.kind": "cell", "trainbench.outcome": "finished", "trainbench.framework_version": "2.11.0"}

    def run(hash_of, rate: float, ci95: float, noisy: bool) -> str:
        noise = {"trainbench.noisy": "true", "trainbench.noisy_reason": "step times cv 19.1% > 10%"} if noisy else {}
        made = client.create_run(experiment, tags={**common, **noise, "trainbench.config_hash": config_hash(hash_of)})
        client.log_metric(made.info.run_id, "samples_per_s", rate)
        client.log_metric(made.info.run_id, "samples_per_s_ci95", ci95)
        return made.info.run_id

    baseline = run(replace(four, device={"count": 1}), 451.0, 20.0, noisy_single)
    this = run(four, 2087.0, 764.0, False)
    label = run_label(common)  # the same machine as the 1-device run
    result = {"num_devices": 4, "samples_per_s": 2087.0, "hw_label": label, "framework_version": "2.11.0"}
    scaling.record(client, this, four, result)  # type: ignore[arg-type]

    recorded = client.get_run(this).data
    efficiency = 2087.0 / (4 * 451.0)
    assert recorded.metrics["scaling_efficiency"] == pytest.approx(efficiency)
    assert recorded.metrics["scaling_efficiency_ci95"] == pytest.approx(
        efficiency * ((764 / 2087) ** 2 + (20 / 451) ** 2) ** 0.5
    )
    assert recorded.tags["trainbench.scaling_baseline_run_id"] == baseline
    assert recorded.tags.get("trainbench.scaling_noisy") == ("true" if noisy_single else None)
    if noisy_single:
        assert recorded.tags["trainbench.scaling_noisy_reason"] == (
            "noisy: the 1-device run (step times cv 19.1% > 10%)"
        )


# ----------------------------------------------------------------------------------- on the CPU, slow


@pytest.mark.slow
def test_two_gloo_ranks_learn_what_one_process_learns_log_once_and_scale_against_it(trainbench) -> None:
    result = trainbench("-m", *DIGITS, "task.epochs=4", "device.count=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    single, double = cells(result)["1"], cells(result)["2"]
    # The same data per epoch, in global batches of 2 x 32: within a few points of the 1-process cell.
    assert double.data.metrics["val_accuracy"] >= 0.9
    assert abs(double.data.metrics["val_accuracy"] - single.data.metrics["val_accuracy"]) <= 0.03
    assert [m.step for m in metric_history(result.uri, double.info.run_id, "val_accuracy")] == [1, 2, 3, 4]
    tags, metrics = double.data.tags, double.data.metrics
    assert tags["trainbench.data_parallel"] == "torch DistributedDataParallel (gloo, 2 ranks)"
    # Each rank on cores of its own, and the host's load beside the figures.
    shares = re.fullmatch(r"rank 0: ([\d,-]+); rank 1: ([\d,-]+)", tags["trainbench.rank_cores"])
    assert shares is not None and not set(cores(shares[1])) & set(cores(shares[2])), tags["trainbench.rank_cores"]
    assert metrics["host_load_1m_start"] >= 0 and metrics["host_load_1m_end"] >= 0
    assert tags["trainbench.samples_per_epoch"] == single.data.tags["trainbench.samples_per_epoch"]
    assert metrics["num_devices"] == 2
    assert metrics["samples_per_s_per_device"] == pytest.approx(metrics["samples_per_s"] / 2)
    assert tags["trainbench.scaling_baseline_run_id"] == single.info.run_id
    assert metrics["scaling_efficiency"] == pytest.approx(
        metrics["samples_per_s"] / (2 * single.data.metrics["samples_per_s"])
    )
    assert "scaling_efficiency" not in single.data.metrics


def cores(spans: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5]."""
    found: list[int] = []
    for part in spans.split(","):
        first, _, last = part.partition("-")
        found += range(int(first), int(last or first) + 1)
    return found


@pytest.mark.slow
def test_a_crash_in_rank_1_fails_the_cell_with_its_reason(trainbench) -> None:
    result = trainbench(*DIGITS, "task.epochs=1", "device.count=2", env={INJECT_FAULT_ENV: "raise@1"})
    assert result.returncode == 1
    (cell,) = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    assert cell.data.tags["trainbench.outcome"] == "failed"
    assert cell.data.tags["trainbench.reason"] == (
        "RankFailed: rank 1 of 2 failed: RuntimeError: TRAINBENCH_INJECT_FAULT=raise: a deliberate failure"
    )
    assert "samples_per_s" not in cell.data.metrics  # rank 0 was stopped before it logged a figure


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "engine"),
    [
        ("jax", "per-device step, shard_map over 2 cpu devices: BatchNorm statistics per device, gradients averaged"),
        ("tensorflow", "tf.distribute.MirroredStrategy (2 cpu replicas)"),
    ],
)
def test_keras_runs_one_cell_on_two_host_devices(trainbench, framework: str, engine: str) -> None:
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"} if framework == "jax" else {}
    result = trainbench(*DIGITS, f"framework={framework}", "task.epochs=3", "device.count=2", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    assert cell.data.tags["trainbench.data_parallel"].startswith(engine)
    assert cell.data.tags["trainbench.num_devices"] == "2"
    assert cell.data.metrics["val_accuracy"] >= 0.9
    assert cell.data.tags["trainbench.scaling_reason"].startswith("no finished 1-device run of this cell")


# ------------------------------------------------------------------------------------------ fast


def test_a_task_on_one_device_refuses_a_device_count() -> None:
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, ConfigError, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        with pytest.raises(ConfigError, match="task=matmul runs on one device: use device.count=1"):
            validate(compose("config", overrides=["task=matmul", "device=cpu", "device.count=2"]))
        assert validate(compose("config", overrides=["task=benchmark", "device.count=all"])).device.count == "all"


def test_the_scaling_studys_bert_large_trains_as_the_reference_loops_do() -> None:
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["+scaling_cell=bert_large_bs32"]))
    assert (cell.optim.name, cell.optim.lr, cell.optim.weight_decay) == ("adamw", 0.0001, 0.0)
    assert (cell.batch_size, cell.precision.name, cell.model.name) == (32, "mixed_bf16", "bert_large")


@pytest.mark.parametrize("framework", ["pytorch", "jax", "tensorflow", "mlx"])
def test_the_scaling_studys_resnet50_runs_nhwc_in_every_framework(framework) -> None:
    # NHWC is PyTorch's choice (framework.channels_last) and the others' only layout: one preset asks for it in all.
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, ConfigError, validate
    from trainbench.store.setting import recorded

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["+scaling_cell=resnet50_bs256", f"framework={framework}"]))
        assert cell.framework.channels_last is True
        if framework != "pytorch":
            with pytest.raises(ConfigError, match="only framework=pytorch can switch it"):
                validate(compose("config", overrides=[f"framework={framework}", "framework.channels_last=false"]))
    from trainbench.config import params

    as_recorded = recorded({key: str(value) for key, value in params(cell).items()})
    assert ("framework.channels_last" in as_recorded) == (framework == "pytorch")  # a setting only where chosen


def test_more_gpus_than_the_cell_sees_is_unavailable_not_an_error() -> None:
    from trainbench.config.schema import DeviceConfig
    from trainbench.frameworks.base import DeviceUnavailable
    from trainbench.frameworks.pytorch.distributed import processes

    with pytest.raises(DeviceUnavailable, match="device.count=8 asks for 8 GPUs; this cell sees 0"):
        processes(DeviceConfig(name="gpu", count=8))
    # CPU ranks: as asked, up to a rank per core (trainbench.cell.cpu_ranks.bound_cpu_ranks)
    assert processes(DeviceConfig(name="cpu", count=3)) == min(3, len(os.sched_getaffinity(0)))


def test_the_launch_is_torchruns_standalone_unless_its_variables_name_other_nodes(monkeypatch) -> None:
    from trainbench.frameworks.pytorch.distributed import launch_config

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    local = launch_config(2)
    assert (local.nproc_per_node, local.max_nodes, local.rdzv_backend, local.max_restarts) == (2, 1, "c10d", 0)
    assert local.rdzv_endpoint == "localhost:0"
    for name, value in {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "head",
        "PET_MASTER_PORT": "29500",
    }.items():
        monkeypatch.setenv(name, value)
    spread = launch_config(8)
    assert (spread.nproc_per_node, spread.min_nodes, spread.max_nodes) == (8, 2, 2)
    assert spread.rdzv_backend == "static" and spread.rdzv_endpoint == "head:29500"


def test_the_gradients_live_in_the_all_reduce_buckets_one_copy_not_two(tmp_path: Path) -> None:
    """DDP's gradient_as_bucket_view, as a hand-written DDP loop sets it up: after a step each parameter's gradient is a
    view into one of DDP's all-reduce buckets, so the device holds the gradients once (BERT-Large: 1.3 GB less)."""
    import torch
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data as datasets
    from trainbench.config import CONF_DIR, validate
    from trainbench.frameworks.pytorch.adapter import Adapter
    from trainbench.frameworks.pytorch.data_parallel import DataParallelTrainer

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["model=mlp", "data=synthetic", "device=cpu", "task=benchmark"]))
    cell = cell.task.prepared(cell)
    adapter = Adapter(cell)
    adapter.bind(cell.device)
    data = datasets.load(cell.data, cell.seed)
    model = adapter.build(cell.model, data).network
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        step = DataParallelTrainer(adapter, model, data, cell).resident_step()
        step()
        step()
        gradients = [p.grad for p in model.parameters()]
        storages = {g.untyped_storage().data_ptr() for g in gradients}
        assert len(storages) < len(gradients)  # parameters share a bucket's storage; unshared, one storage each
    finally:
        torch.distributed.destroy_process_group()


def test_global_batches_split_evenly_by_rank_and_cover_every_sample() -> None:
    from trainbench.frameworks.pytorch.data_parallel import shard

    for size, ranks in ((64, 2), (29, 2), (5, 4), (8, 8)):
        parts = [shard(size, rank, ranks) for rank in range(ranks)]
        assert [offset for offset, _ in parts] == [sum(length for _, length in parts[:r]) for r in range(ranks)]
        assert sum(length for _, length in parts) == size
        assert max(length for _, length in parts) - min(length for _, length in parts) <= 1


@pytest.mark.parametrize(
    ("sample", "gpus", "expected"),
    [
        ("dgx_h100_nvidia_smi_topo.txt", [0, 1, 2, 3, 4, 5, 6, 7], ("NVLink", "NV18")),
        ("h200x2_nvidia_smi_topo.txt", [0, 1], ("NVLink", "NV18")),  # a real capture, ANSI escapes and all
        ("pcie_2gpu_nvidia_smi_topo.txt", [0, 1], ("PCIe", "PHB")),
        ("a100_pcie_bridged_nvidia_smi_topo.txt", [0, 1], ("NVLink", "NV12")),
        ("a100_pcie_bridged_nvidia_smi_topo.txt", [1, 2], ("PCIe", "SYS")),
        ("a100_pcie_bridged_nvidia_smi_topo.txt", [0, 1, 2, 3], ("NVLink+PCIe", "NV12,SYS")),
    ],
)
def test_the_interconnect_is_read_from_nvidia_smi_topo(sample: str, gpus: list[int], expected: tuple[str, str]) -> None:
    links = parse_topology_matrix((SAMPLES / sample).read_text())
    assert interconnect(links, gpus) == {"hw.gpu_interconnect": expected[0], "hw.gpu_links": expected[1]}


def test_the_cells_gpus_are_mapped_to_the_machines_numbering() -> None:
    uuids = {"GPU-aaaa": 6, "GPU-bbbb": 7}
    assert physical_indices([0, 1], "2,3", uuids) == [2, 3]
    assert physical_indices([0, 1], "GPU-bbbb,GPU-aaaa", uuids) == [7, 6]
    assert physical_indices([0, 1], None, uuids) == [0, 1]
    assert physical_indices([0, 1], "4", uuids) == []  # fewer listed than used: no tag rather than a wrong one


def entry(run_id: str, devices: int, samples_per_s: float, gpu: str = "NVIDIA H100 80GB HBM3") -> Entry:
    overrides = ["model=resnet50", "data=synthetic_imagenet", "task=benchmark", "precision=mixed_bf16"]
    machine = {"hw.gpu": gpu, "trainbench.backend": "cuda", "trainbench.num_devices": str(devices)}
    return make_entry(
        run_id, [*overrides, "batch_size=256", f"device.count={devices}"], machine, {"samples_per_s": samples_per_s}
    )


def test_the_scaling_chart_has_samples_per_s_and_efficiency_against_devices() -> None:
    runs = [
        entry("a", 1, 3000.0),
        entry("b", 2, 5700.0),
        entry("c", 4, 10800.0),
        entry("d", 2, 4000.0, gpu="NVIDIA A100-PCIE-40GB"),
    ]  # no 1-device run: no efficiency line
    throughput, efficiency = scaling_panels(runs)
    ((title, series),) = throughput.items()
    assert "devices" not in title and "bs256" in title
    h100 = "NVIDIA H100 80GB HBM3: pytorch 2.14 (cuda)"
    assert series[h100] == [[1, 3000.0], [2, 5700.0], [4, 10800.0]]
    assert efficiency[title] == {h100: [[1, 1.0], [2, 0.95], [4, 0.9]]}


@pytest.mark.slow
def test_jaxs_per_device_step_trains_an_mlp_as_keras_global_batch_step_does(trainbench) -> None:
    # Without BatchNorm, averaging the devices' gradients is the gradient of the global batch: the per-device step
    # (shard_map) and Keras' DataParallel step must train the same weights and count the same metrics.
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    steps = "framework.data_parallel_step=per_device,keras"
    result = trainbench("-m", *DIGITS, "framework=jax", "task.epochs=2", "device.count=2", steps, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {
        r.data.params["framework.data_parallel_step"]: r
        for r in result.runs()
        if r.data.tags["trainbench.kind"] == "cell"
    }
    assert runs["keras"].data.tags["trainbench.data_parallel"].startswith("keras.distribution.DataParallel (2 cpu")
    for key in ("train_loss", "train_accuracy", "val_loss", "val_accuracy"):
        assert runs["per_device"].data.metrics[key] == pytest.approx(runs["keras"].data.metrics[key], rel=1e-4), key


BUCKETS_ON_TWO_DEVICES = """
import json
import jax
import numpy as np
from trainbench.frameworks.jax import data_parallel
mesh = jax.sharding.Mesh(np.array(jax.devices()), (data_parallel.AXIS,))
split = jax.sharding.PartitionSpec(data_parallel.AXIS)
shapes, dtypes = [(3, 4), (), (5,), (2, 2, 2), (7,)], [np.float32, np.float32, np.float16, np.float32, np.float32]
rng = np.random.default_rng(0)
values = [rng.standard_normal((2, *shape)).astype(dtype) for shape, dtype in zip(shapes, dtypes)]
def on_each_device(*local):
    return data_parallel.averaged(jax, [value[0] for value in local], 64)
step = jax.jit(jax.shard_map(on_each_device, mesh=mesh, in_specs=split, out_specs=jax.sharding.PartitionSpec()))
averages = step(*values)
print(json.dumps({
    "all_reduces": step.lower(*values).as_text().count("stablehlo.all_reduce"),
    "dtypes": [str(a.dtype) for a in averages],
    "errors": [float(np.max(np.abs(np.asarray(a, np.float64) - v.astype(np.float64).mean(0)))) for a, v in zip(averages, values)],
    "shapes": [list(a.shape) for a in averages],
}))
"""


def test_the_per_device_steps_buckets_give_every_tensor_its_own_average_in_fewer_all_reduces() -> None:
    # Buckets of 64 bytes, filled from the last tensor back: (7,)+(2,2,2) float32, then (5,) float16 (its own
    # dtype), then ()+(3,4) float32: three all-reduces for five tensors, each tensor its own mean, shape and dtype.
    import json
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", BUCKETS_ON_TWO_DEVICES], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["all_reduces"] == 3
    assert result["shapes"] == [[3, 4], [], [5], [2, 2, 2], [7]]
    assert result["dtypes"] == ["float32", "float32", "float16", "float32", "float32"]
    assert max(result["errors"][i] for i in (0, 1, 3, 4)) < 1e-6
    assert result["errors"][2] < 1e-3


@pytest.mark.slow
def test_a_benchmark_cell_on_two_ranks_finds_its_one_device_run_in_the_same_sweep(trainbench) -> None:
    # task=benchmark prepares its cell (synthetic data: one batch, not a dataset): the hash recorded and the hash
    # looked up must be the prepared cell's, or no data-parallel benchmark ever gets a scaling efficiency.
    cell = ("model=mlp", "data=synthetic", "device=cpu", "batch_size=16", "tracking.system_metrics_interval_s=0")
    sizes = ("task.steps=2", "task.repeats=2", "task.warmup_steps=1")
    result = trainbench("-m", *cell, "task=benchmark", *sizes, "device.count=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    single, double = cells(result)["1"], cells(result)["2"]
    assert "trainbench.scaling_reason" not in double.data.tags, double.data.tags.get("trainbench.scaling_reason")
    assert double.data.tags["trainbench.scaling_baseline_run_id"] == single.info.run_id
    assert double.data.metrics["scaling_efficiency"] > 0
