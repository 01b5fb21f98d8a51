"""The one way to name runs, to describe a run's setting in words, and to open the comparison in the UI (which runs
measured the same quantity: tests/test_setting.py)."""

from __future__ import annotations

import json

from conftest import with_schema
from trainbench import tracking
from trainbench.run_naming import run_name
from trainbench.runs import (
    EXPERIMENT_KIND_TAG,
    SETTING_TAGS,
    SHARED_VIEW_TAG,
    comparison_settings,
    model_variant,
    search_all,
    ui_url,
)

# A finished train cell as trainbench records it (tags), with the resolved config's params.
CELL_TAGS = {
    "trainbench.task": "train",
    "trainbench.model": "mobilenet_v2",
    "trainbench.data": "synthetic_imagenet",
    "trainbench.precision": "fp32",
    "trainbench.batch_size": "128",
    "trainbench.compile": "false",
    "trainbench.channels_last": "false",
    "trainbench.image_size": "224",
    "trainbench.samples_per_epoch": "2048",
    "trainbench.epochs": "3",
}


def test_run_names_keep_their_formats() -> None:
    assert run_name(framework="pytorch", model="resnet50", backend="cuda", batch_size=64, task="train") == (
        "pytorch-resnet50-cuda-bs64"
    )
    assert (
        run_name(
            framework="tensorflow",
            backend="metal",
            task="matmul",
            matmul_shape="square",
            precision="fp32",
            model="mlp",
            batch_size=64,
        )
        == "tensorflow-matmul_square-metal-fp32"
    )


def test_a_run_older_than_the_new_tags_reads_as_the_defaults() -> None:
    recorded = {
        **CELL_TAGS,
        "trainbench.optimize": "none",
        "trainbench.pipeline": "device",
        "trainbench.num_devices": "1",
        "trainbench.timed_region": "epoch",
    }
    assert comparison_settings(CELL_TAGS) == comparison_settings(recorded)
    # ... and what it recorded only as params (today's `epochs=`, data.image_size) still reads the same
    old = {
        k: v
        for k, v in CELL_TAGS.items()
        if k not in ("trainbench.image_size", "trainbench.epochs", "trainbench.samples_per_epoch")
    }
    params = {"data.image_size": "224", "epochs": "3", "data.num_samples": "2048", "data.input": "image"}
    assert comparison_settings(old, params) == comparison_settings(CELL_TAGS)
    assert comparison_settings(old, {**params, "data.image_size": "64"})["trainbench.image_size"] == "64"


def test_settings_a_task_does_not_use_read_blank() -> None:
    benchmark = {**CELL_TAGS, "trainbench.task": "benchmark"}
    settings = comparison_settings(benchmark)
    assert settings["trainbench.samples_per_epoch"] == "" and settings["trainbench.timed_region"] == "steps"
    assert set(settings) == set(SETTING_TAGS)


def test_the_model_shape_reads_from_its_params() -> None:
    assert model_variant({"model.depth": "5", "model.width": "1024"}) == "depth 5 x 1024"
    assert model_variant({"model.hidden_sizes": "[3000, 1000]"}) == "hidden [3000, 1000]"
    assert model_variant({"model.name": "resnet50"}) == ""


def test_ui_url_saves_a_view_of_the_comparison(tmp_path) -> None:
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = tracking.client(uri)
    experiment_id = client.create_experiment("trainbench")
    url = ui_url(uri, experiment_id)
    assert url.startswith(f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs?viewStateShareKey=trainbench-")
    key = url.split("viewStateShareKey=")[1]
    tags = client.get_experiment(experiment_id).tags
    view = json.loads(tags[SHARED_VIEW_TAG + key])
    assert view["selectedColumns"][:2] == ["metrics.`samples_per_s`", "tags.`hw.label`"]
    assert view["orderByKey"] == "metrics.`samples_per_s`" and view["orderByAsc"] is False
    assert search_all(client, [experiment_id], view["searchFilter"]) == []  # a filter MLflow accepts
    assert tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    sweep = ui_url(uri, experiment_id, sweep_run_id="abc", ui_base="http://team:5000/")
    assert sweep.startswith(f"http://team:5000/#/experiments/{experiment_id}/runs?viewStateShareKey=") and sweep != url


def test_a_setting_reads_as_words_that_the_runs_table_can_group_by() -> None:
    """trainbench.setting_name: what a person reads in the runs table, the same for runs of one setting."""
    from trainbench.runs import setting_name

    tags = {
        "trainbench.task": "train",
        "trainbench.model": "mlp",
        "trainbench.data": "synthetic",
        "trainbench.image_size": "32",
        "trainbench.samples_per_epoch": "8192",
        "trainbench.epochs": "3",
        "trainbench.batch_size": "64",
        "trainbench.precision": "fp32",
    }
    params = {"model.hidden_sizes": "[3000, 1000]", "task.name": "train"}
    assert setting_name(tags, params) == (
        "mlp train, hidden [3000, 1000], synthetic 32 px, 8192 x 3 epochs, bs64, fp32, timed: epoch"
    )
    # an older run that recorded the epochs only as a param reads the same; another batch size does not
    assert setting_name(
        {k: v for k, v in tags.items() if k != "trainbench.epochs"}, {**params, "task.epochs": "3"}
    ) == (setting_name(tags, params))
    assert setting_name({**tags, "trainbench.batch_size": "256"}, params) != setting_name(tags, params)
    matmul = {"trainbench.task": "matmul", "trainbench.matmul_shape": "square", "trainbench.precision": "bf16"}
    assert setting_name(matmul, {}) == "matmul square, bf16, timed: steps"
