"""The published-study presets and the options they select: the input-pipeline mode (data.pipeline=loader),
the train task's timed regions (epoch, fit, build_fit), the benchmark's fit region, and Keras' text models
masking only padded data.

Compose-time tests run in process (milliseconds per cell); the ones that train run the real entry point on a
CPU, with small files in the datasets' real formats (tests/test_data.py writes them)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import ROOT, metric_history
from test_data import write_mnist
from trainbench.config import ConfigError, params
from trainbench.config.compose import cells_for
from trainbench.references.loading import load
from trainbench.references.reading import DEFAULT_CSV
from trainbench.store.setting import setting

STUDIES = {  # preset -> its source in references/published-results.csv
    "m1_tensorflow_blog": "blog-m1-tensorflow-2022",
    "mlp_depth_study": "m1-tensorflow-benchmark",
    "tf_metal_study": "tf-metal-experiments",
    "pytorch_mps_study": "pytorch-mps-m1max-2022",
    "gpu_resnet50_reference": "lambda-deeplearning-benchmark",
}


def cells(*overrides: str) -> list:
    """Every cell of a sweep, as trainbench's sweeper expands a preset's hydra.sweeper.params (a key given on
    the command line narrows the preset's axis to that value), each as it will run (prepared)."""
    return [cell.task.prepared(cell) for cell in cells_for(list(overrides))]


def cell_setting(cell) -> dict[str, str]:
    return setting({key: str(value) for key, value in params(cell).items()}, {})


@pytest.fixture(scope="module")
def published_settings() -> dict[str, list[dict[str, str]]]:
    """source -> the comparison setting of each of its reference runs (each composed from its command)."""
    found: dict[str, list[dict[str, str]]] = {}
    for run in load(DEFAULT_CSV):
        run_params = {key: str(value) for key, value in run.params.items()}
        found.setdefault(run.tags["reference.source"], []).append(setting(run_params, run.tags))
    return found


@pytest.mark.slow  # the module's fixture composes every published row's command (~12 s)
@pytest.mark.parametrize(
    ("preset", "extra", "count"),
    [
        ("m1_tensorflow_blog", [], 2),
        ("m1_tensorflow_blog", ["device=gpu", "precision=tf32"], 1),  # the blog's A100 row (TF32)
        ("mlp_depth_study", [], 8),
        ("tf_metal_study", [], 5),
        ("tf_metal_study", ["optimize=fast", "precision=mixed_fp16"], 5),  # the RTX 3090 rows (mixed float16 + XLA)
        ("pytorch_mps_study", [], 20),
        ("gpu_resnet50_reference", ["batch_size=640", "precision=tf32"], 1),  # Lambda's A100 TF32 row
        ("gpu_resnet50_reference", ["batch_size=2560", "precision=mixed_fp16"], 1),  # Lambda's H200 row
    ],
)
def test_each_preset_cell_has_a_published_row_of_exactly_its_setting(
    preset: str, extra: list[str], count: int, published_settings
) -> None:
    planned = cells(f"+experiment={preset}", *extra)
    assert len(planned) == count
    for cell in planned:
        if preset == "tf_metal_study" and extra and cell.task.name == "matmul":
            continue  # the study published its GEMM sweep for the M1 Max only
        assert cell_setting(cell) in published_settings[STUDIES[preset]], f"{preset} {extra}: {cell.model.name}"


def test_the_study_presets_select_the_timed_region_and_pipeline_their_studies_timed() -> None:
    blog = cells("+experiment=m1_tensorflow_blog", "device=cpu")[0]
    assert (blog.task.timed_region, blog.task.sync_every_step, blog.model.init, blog.data.scale_only) == (
        "fit",
        True,
        "glorot",
        True,
    )
    depth = cells("+experiment=mlp_depth_study", "device=cpu", "model.depth=5")[0]
    assert (depth.task.timed_region, depth.data.num_val_samples, depth.task.epochs) == ("build_fit", 0, 3)
    mps = cells("+experiment=pytorch_mps_study", "model=vgg16", "batch_size=4", "device=cpu")[0]
    assert (mps.data.pipeline, mps.data.loader_workers, mps.data.num_val_samples, mps.data.scale_only) == (
        "loader",
        4,
        0,
        True,
    )
    by_model = {c.model.name: c for c in cells("+experiment=tf_metal_study") if c.task.name == "benchmark"}
    assert {
        m: (c.optim.name, c.optim.lr, c.task.warmup_steps, c.task.steps, c.task.repeats) for m, c in by_model.items()
    } == {
        "resnet50": ("sgd", 0.001, 30, 30, 2),
        "mobilenet_v2": ("sgd", 0.001, 30, 30, 2),
        "distilbert": ("adam", 0.001, 30, 30, 2),
        "bert_large": ("adam", 0.001, 10, 10, 2),
    }
    assert by_model["resnet50"].data.num_classes == 8 and by_model["bert_large"].data.num_classes == 8
    assert by_model["resnet50"].data.num_samples == 64 * 30  # fit goes through batch x steps samples


def test_the_inference_study_runs_each_model_on_its_own_data_at_batch_1_and_64_in_every_framework() -> None:
    """(A value on the command line narrows a preset's axis: tests/test_config.py.)"""
    study = cells("+experiment=inference_study")
    planned = {(c.framework.name, c.model.name, c.batch_size): (c.task.name, c.data.name, c.device.name) for c in study}
    assert len(planned) == len(study)  # no cell twice
    frameworks = ("pytorch", "tensorflow", "jax", "mlx")
    models = {
        "resnet50": "synthetic_imagenet",
        "mobilenet_v2": "synthetic_imagenet",
        "distilbert": "synthetic_text",
        "bert_large": "synthetic_text",
    }
    assert planned == {
        (framework, model, batch): ("inference", data, "gpu")
        for framework in frameworks
        for model, data in models.items()
        for batch in (1, 64)
    }


def test_the_tf_metal_gemm_cell_sweeps_the_studys_sizes() -> None:
    (gemm,) = [c for c in cells("+experiment=tf_metal_study") if c.task.name == "matmul"]
    assert gemm.task.sizes == [2, 8, 16, 32, 64, 128, 256, 1024, 2048, 4096, 6144, 8192]
    # Products timed one by one, as the study's GEMM script did (not a Keras fit like its model rows).
    assert gemm.task.tags(gemm)["trainbench.timed_region"] == "steps"


def test_the_vector_matmul_study_times_the_blogs_quantity_and_the_tflops_view_is_a_preset_of_its_own() -> None:
    """The Hackintosh blog timed `timeit(number=10)` of "create two random operands, multiply" in TensorFlow, on
    the CPU and the GPU, and charted those totals; trainbench's TFLOPS view of the same sweep (operands drawn
    before timing) is another quantity, under another name, and never shares a report row with it."""
    blog = cells("+experiment=matmul_vector_study")
    assert [(c.framework.name, c.device.name) for c in blog] == [("tensorflow", "cpu"), ("tensorflow", "gpu")]
    assert {(c.task.shape, c.task.operands, c.task.steps, c.precision.name) for c in blog} == {
        ("vector", "per_product", 10, "fp32")
    }
    assert [c.task.run_name(c, c.device.name) for c in blog] == [
        "tensorflow-matmul_vector_per_product-cpu-fp32",
        "tensorflow-matmul_vector_per_product-gpu-fp32",
    ]
    view = cells("+experiment=matmul_vector_tflops", "framework=tensorflow")
    assert [(c.task.shape, c.task.operands, c.device.name) for c in view] == [
        ("vector", "resident", "cpu"),
        ("vector", "resident", "gpu"),
    ]
    assert view[0].task.run_name(view[0], "cpu") == "tensorflow-matmul_vector-cpu-fp32"
    assert cell_setting(blog[0]) != cell_setting(view[0])
    assert "Hackintosh" in (ROOT / "conf/experiment/matmul_vector_study.yaml").read_text().split("\n")[1]


@pytest.mark.slow  # the module's fixture composes every published row's command (~12 s)
def test_no_published_row_claims_the_blogs_vector_products(published_settings) -> None:
    """The blog's figures are not on record: no reference run may stand in for them."""
    published = [s for settings in published_settings.values() for s in settings]
    assert not any(s.get("task.shape") == "vector" or s.get("task.operands") == "per_product" for s in published)


@pytest.mark.slow
def test_the_vector_matmul_study_records_each_sizes_total_seconds_with_the_draws_inside(trainbench) -> None:
    """~20 s: the preset's CPU cell in TensorFlow, two sizes: each size's block_time_s is the total of its ten
    products, operands drawn inside, and no FLOPs or bandwidth rate is claimed for it."""
    done = trainbench(
        "-m",
        "+experiment=matmul_vector_study",
        "device=cpu",
        "task.sizes=[100,10000]",
        "tracking.system_metrics_interval_s=0",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = [r for r in done.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    assert run.info.run_name == "tensorflow-matmul_vector_per_product-cpu-fp32"
    assert run.data.params["task.operands"] == "per_product"
    totals = metric_history(done.uri, run.info.run_id, "block_time_s")
    per_product = {m.step: m.value for m in metric_history(done.uri, run.info.run_id, "matmul_time_ms")}
    assert [m.step for m in totals] == [100, 10000]
    for total in totals:
        assert total.value > 0 and per_product[total.step] == pytest.approx(total.value * 1000 / 10)
    assert not {"tflops", "gbytes_per_s", "peak_tflops", "mfu"} & set(run.data.metrics)


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["task=benchmark", "data.pipeline=loader"], "`data.pipeline`='loader'"),
        (["task=inference", "data.pipeline=loader"], "`data.pipeline`='loader'"),
        (["framework=mlx", "data.pipeline=loader"], "framework=mlx has no loader"),
        (["data.pipeline=loader", "task.timed_region=fit"], "is timed per epoch"),
        (["data.pipeline=loader", "device.count=2"], "`device.count`=2"),
        (["task.timed_region=build_fit", "framework=mlx"], "framework=mlx has no fit"),
        (["task=benchmark", "task.timed_region=fit"], "framework=pytorch does not have"),
        (["task.sync_every_step=true"], "`task.sync_every_step`=True"),
        (["task.timed_region=wall"], "choose one of epoch, fit, build_fit"),
    ],
)
def test_what_a_timed_region_or_pipeline_cannot_do_is_refused_at_compose_time(overrides, refused) -> None:
    with pytest.raises(ConfigError, match=refused.replace("(", r"\(")):
        cells(*overrides)


# -- end to end, on a CPU ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_loader_pipeline_trains_and_says_when_it_starved_the_steps(trainbench, tmp_path: Path) -> None:
    """~60 s on two cores: one cell per framework; 128 px resizes on the host in the training loop
    (loader_workers=0) feeding a 16-unit MLP, so every framework's steps wait on their input."""
    write_mnist(tmp_path / "data", train=48, test=8)
    done = trainbench(
        "-m",
        "framework=pytorch,tensorflow,jax",
        "device=cpu",
        "model=mlp",
        "model.hidden_sizes=[16]",
        "data=mnist",
        "data.root=data",
        "data.download=false",
        "data.image_size=128",
        "data.grayscale_to_rgb=true",
        "data.pipeline=loader",
        "data.loader_workers=0",
        "data.num_val_samples=8",
        "batch_size=16",
        "task.epochs=2",
        "tracking.system_metrics_interval_s=0",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [r for r in done.runs() if r.data.tags.get("trainbench.kind") == "cell"]  # not the sweep's parent
    assert [r.data.tags["trainbench.framework"] for r in runs] == ["pytorch", "tensorflow", "jax"]
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        assert (tags["trainbench.pipeline"], tags["trainbench.input_bound"]) == ("loader", "true")
        assert tags["trainbench.loader"].endswith(", 0 workers") and tags["trainbench.samples_per_epoch"] == "48"
        waits = metric_history(done.uri, run.info.run_id, "input_wait_s")
        epochs = metric_history(done.uri, run.info.run_id, "epoch_time_s")
        assert [w.step for w in waits] == [1, 2] and all(
            0 < w.value <= e.value for w, e in zip(waits, epochs, strict=True)
        )
        assert metrics["input_wait_share"] >= 0.1 and math.isfinite(metrics["train_loss"])


@pytest.mark.slow
def test_fit_and_build_fit_time_the_whole_training_call(trainbench) -> None:
    """~40 s: TensorFlow on a CPU, Keras' model.fit timed with and without the model's build."""
    done = trainbench(
        "-m",
        "framework=tensorflow",
        "device=cpu",
        "model=mlp",
        "data.num_samples=96",
        "data.num_val_samples=16",
        "batch_size=32",
        "task.epochs=2",
        "task.timed_region=fit,build_fit",
        "task.sync_every_step=true",
        "tracking.system_metrics_interval_s=0",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fit, build_fit = [r for r in done.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    for run, region in ((fit, "fit"), (build_fit, "build_fit")):
        assert run.data.tags["trainbench.timed_region"] == region
        epochs = metric_history(done.uri, run.info.run_id, "epoch_time_s")
        assert [e.step for e in epochs] == [1, 2]
        # the block holds both epochs (and fit's own set-up); validation ran once, after it
        assert run.data.metrics["total_time_s"] > sum(e.value for e in epochs)
        assert [v.step for v in metric_history(done.uri, run.info.run_id, "val_loss")] == [2]
        assert run.data.metrics["num_parameters"] > 0
    # the same fit on the same data and seed, plus the build and compile
    assert build_fit.data.metrics["train_loss"] == pytest.approx(fit.data.metrics["train_loss"], rel=1e-4)
    # build_fit's block starts on a device already up, as a study's did after its first model; the device's
    # start and the host arrays' preparation (inside the block) are recorded on their own
    timed = build_fit.data.metrics
    assert timed["device_init_time_s"] > 0 and 0 < timed["host_prep_time_s"] < timed["total_time_s"]
    assert timed["total_time_with_device_init_s"] == pytest.approx(timed["device_init_time_s"] + timed["total_time_s"])
    assert not {"device_init_time_s", "host_prep_time_s"} & set(fit.data.metrics)  # its model was built untimed


@pytest.mark.slow
def test_the_benchmark_fit_region_times_a_warm_fit_of_repeats_epochs(trainbench) -> None:
    """~25 s: the tf-metal study's quantity on a CPU: samples trained / the timed fit's wall clock."""
    done = trainbench(
        "framework=tensorflow",
        "device=cpu",
        "task=benchmark",
        "task.timed_region=fit",
        "task.warmup_steps=2",
        "task.steps=3",
        "task.repeats=2",
        "model=mlp",
        "batch_size=16",
        "tracking.system_metrics_interval_s=0",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = done.runs()
    metrics = run.data.metrics
    assert run.data.tags["trainbench.timed_region"] == "fit" and metrics["warmup_steps_run"] == 2
    timed_s = metrics["total_time_s"] - metrics["warmup_time_s"]
    assert metrics["samples_per_s"] == pytest.approx(16 * 3 * 2 / timed_s, rel=1e-6)
    assert metrics["step_time_ms_mean"] == pytest.approx(timed_s * 1000 / 6, rel=1e-6)
