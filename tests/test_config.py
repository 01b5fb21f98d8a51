"""Compose-time behaviour: every config composes, and bad input stops before any work with one line."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from trainbench import plan
from trainbench.config import CONF_DIR, ConfigError, choices, validate


@pytest.mark.parametrize("device", choices("device"))
@pytest.mark.parametrize("model", choices("model"))
def test_every_model_composes_on_every_device(model: str, device: str) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        text = "input: text" in (CONF_DIR / "model" / f"{model}.yaml").read_text()
        # Models that pool small inputs away need larger images than CIFAR's 32 px.
        data = ["data=synthetic_text"] if text else ["data.image_size=224"]
        cfg = validate(compose("config", overrides=[f"model={model}", f"device={device}", *data]))
    assert cfg["model"]["name"] == model
    assert cfg["device"]["name"] == device
    if text:
        assert cfg["data"]["seq_len"] == cfg["model"]["seq_len"] == 128  # the data follows the model


def test_sweep_expands_like_hydra_in_order() -> None:
    cells = plan.plan(["-m", "model=mlp,resnet18", "device=cpu,gpu", "batch_size=8"]).cells
    assert [(c["model"]["name"], c["device"]["name"]) for c in cells] == [
        ("mlp", "cpu"), ("mlp", "gpu"), ("resnet18", "cpu"), ("resnet18", "gpu"),
    ]
    assert {c["batch_size"] for c in cells} == {8}


def test_mlp_deep_depth_is_a_config_not_code() -> None:
    cells = plan.plan(["-m", "model=mlp_deep", "model.depth=5,20"]).cells
    assert [(c["model"]["depth"], c["model"]["width"]) for c in cells] == [(5, 1024), (20, 1024)]


def test_a_bad_value_late_in_a_sweep_is_found_before_the_first_cell() -> None:
    with pytest.raises(ConfigError) as error:
        plan.plan(["-m", "batch_size=32,0"])
    assert error.value.key == "batch_size"


@pytest.mark.parametrize(
    ("args", "key", "hint"),
    [
        (["model=nonexistent"], "`model`", "resnet50"),
        (["batch_size=0"], "`batch_size`", ">= 1"),
        (["batch_size=many"], "`batch_size`", "or max"),
        (["epochs=-1"], "`epochs`", ">= 0"),
        (["device=tpu"], "`device`", "auto, cpu, gpu"),
        (["framework=caffe"], "`framework`", "pytorch"),
        (["model=alexnet"], "`data.image_size`", "at least 63 px"),
        (["-m", "model=mlp,nonexistent"], "`model`", "resnet50"),
        (["optim.name=lbfgs"], "`optim.name`", "sgd"),
        (["model=distilbert"], "`data`", "data=sst2 or data=synthetic_text"),
        (["model=resnet18", "data=sst2"], "`data`", "data=cifar10"),
        (["task=matmul", "task.shape=cube"], "`task.shape`", "square, vector"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_key(trainbench, args, key, hint) -> None:
    result = trainbench(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert key in lines[0] and hint in lines[0]
    assert "Traceback" not in result.stderr
    assert result.runs() == []  # nothing started, nothing recorded


def test_unreachable_tracking_server_is_one_line_and_exit_2(trainbench) -> None:
    result = trainbench("epochs=1", env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the MLflow tracking store http://127.0.0.1:9" in lines[0]


def test_help_still_reaches_hydra(trainbench) -> None:
    result = trainbench("--help")
    assert result.returncode == 0
    assert "model: alexnet, bert_base" in result.stdout and "task: benchmark, matmul, train" in result.stdout


def test_presets_say_only_what_differs_and_expand_their_sweeps() -> None:
    cells = plan.plan(["-m", "+experiment=pytorch_mps_study"]).cells
    assert len(cells) == 5 * 2 * 2
    assert {c["model"]["name"] for c in cells} == {"vgg16", "alexnet", "resnet18", "mobilenet_v2", "efficientnet_b0"}
    assert {(c["data"]["name"], c["data"]["image_size"], c["data"]["num_samples"]) for c in cells} == {("mnist", 224, 1000)}
    assert {(c["optim"]["name"], c["optim"]["lr"], c["epochs"]) for c in cells} == {("adam", 0.001, 1)}
    # a command-line value narrows the preset's sweep
    narrowed = plan.plan(["-m", "+experiment=mlp_depth_study", "device=cpu"]).cells
    assert [(c["model"]["depth"], c["device"]["name"]) for c in narrowed] == [(5, "cpu"), (10, "cpu"), (15, "cpu"), (20, "cpu")]


def test_unknown_preset_lists_the_presets(trainbench) -> None:
    result = trainbench("+experiment=nope")
    assert result.returncode == 2
    assert "`experiment`='nope'" in result.stderr and "mlp_depth_study" in result.stderr


def test_the_tf_metal_study_keeps_each_models_own_batch_size() -> None:
    cells = plan.plan(["-m", "+experiment=tf_metal_study"]).cells
    models = {(c["model"]["name"], c["batch_size"]) for c in cells if c["task"]["name"] == "benchmark"}
    assert models == {("resnet50", 64), ("mobilenet_v2", 128), ("distilbert", 64), ("bert_large", 32)}
    assert [c["task"]["shape"] for c in cells if c["task"]["name"] == "matmul"] == ["square"]
    assert {(c["framework"]["name"], c["device"]["name"]) for c in cells} == {("tensorflow", "gpu")}
    text = [c for c in cells if c["model"]["name"] == "distilbert"][0]
    assert (text["data"]["name"], text["data"]["seq_len"]) == ("synthetic_text", 128)


def test_the_m1_blog_preset_is_the_blogs_setup() -> None:
    cells = plan.plan(["-m", "+experiment=m1_tensorflow_blog"]).cells
    assert [c["device"]["name"] for c in cells] == ["cpu", "gpu"]
    for cell in cells:
        assert cell["model"]["hidden_sizes"] == [3000, 1000] and cell["model"]["output_activation"] == "sigmoid"
        assert (cell["data"]["name"], cell["batch_size"], cell["epochs"]) == ("cifar10", 32, 5)
        assert (cell["optim"]["name"], cell["optim"]["momentum"]) == ("sgd", 0.0)
