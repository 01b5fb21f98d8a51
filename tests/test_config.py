"""Compose-time behaviour, in process: every choice composes into its own typed config, configs round-trip,
and a cell records only what it is."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import pytest
from hydra import compose, initialize_config_dir

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from trainbench import cli
from trainbench.config import CONF_DIR, choices, config_hash, from_spec, params, to_spec, validate
from trainbench.config.schema import (
    ImageFiles,
    MlpModel,
    SgdConfig,
    SyntheticImages,
    TransformerModel,
    VisionModel,
)


def cell(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=list(overrides)))


def dry_run(*argv: str) -> tuple[int, str, str]:
    """The real entry point, in this process, with sweep.dry_run=true: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(cli.hydra_entry(), [*argv, "sweep.dry_run=true"])
    return code, out.getvalue(), err.getvalue()


def planned_cells(*argv: str) -> list[str]:
    code, out, err = dry_run(*argv)
    assert code == 0, err
    lines = out.splitlines()
    return lines[2 : lines.index(next(line for line in lines if line.endswith("(sweep.dry_run=true)")))]


@pytest.mark.parametrize("device", choices("device"))
@pytest.mark.parametrize("model", choices("model"))
def test_every_model_composes_on_every_device_into_its_own_kind(model: str, device: str) -> None:
    composed = cell(
        f"model={model}",
        f"device={device}",
        *(["data=synthetic_text"] if model.startswith(("bert", "distil")) else ["data.image_size=224"]),
    )
    assert composed.model.name == model and composed.device.name == device
    assert isinstance(composed.model, (MlpModel, VisionModel, TransformerModel))
    if isinstance(composed.model, TransformerModel):
        assert composed.data.seq_len == composed.model.seq_len == 128  # the text data follows the model


def test_each_kind_has_only_its_own_settings() -> None:
    vision = cell("model=resnet50")
    assert not hasattr(vision.model, "num_heads") and not hasattr(vision.model, "hidden_sizes")
    matmul = cell("task=matmul")
    assert {"shape", "sizes"} <= {f.name for f in dataclasses.fields(matmul.task)}
    assert not hasattr(cell("task=benchmark").task, "shape")
    assert isinstance(cell("data=cifar10").data, ImageFiles) and isinstance(cell().data, SyntheticImages)
    assert isinstance(cell().optim, SgdConfig) and not hasattr(cell("optim=adam").optim, "momentum")


def test_params_are_the_chosen_fields_with_the_values_that_run() -> None:
    recorded = params(cell("model=resnet18", "task=benchmark", "batch_size=8"))
    assert recorded["model.name"] == "resnet18" and recorded["batch_size"] == 8
    # a model names no builder (each framework keys its own); PyTorch's knobs are the framework's
    assert not any(key.startswith(("model.torchvision", "model.keras", "model.mlx")) for key in recorded)
    assert recorded["framework.channels_last"] == "auto" and "optimize.channels_last" not in recorded
    assert not any(key.startswith(("model.num_heads", "data.seq_len", "task.shape")) for key in recorded)
    assert not any(key.startswith(("tracking.", "launch.", "sweep.")) for key in recorded)
    matmul = params(cell("task=matmul"))
    assert not any(key.startswith(("model.", "data.", "optim.")) for key in matmul)
    benchmark = cell("model=resnet18", "task=benchmark", "batch_size=8")
    assert benchmark.task.prepared(benchmark).data.num_samples == 8  # one batch generated, and recorded so


def test_a_cell_round_trips_through_its_spec_keeping_its_types() -> None:
    original = cell("model=distilbert", "data=synthetic_text", "optim=adamw", "optimize=fast", "task=benchmark")
    copied = from_spec(json.loads(json.dumps(to_spec(original))))
    assert copied == original and type(copied.model) is type(original.model)
    assert params(copied) == params(original) and config_hash(copied) == config_hash(original)


def test_a_cell_keeps_the_hash_its_runs_were_recorded_under() -> None:
    """sweep.resume and the scaling study find earlier runs by config_hash: the default MLP cell's hash is the one
    its runs recorded before framework.adapter stopped being a setting (2026-11-29; the change had moved every
    hash, so resume would have run every finished cell again)."""
    assert config_hash(cell("model=mlp")) == "523e429c1090"


def test_identical_cells_share_a_hash_and_different_ones_do_not() -> None:
    base = cell("model=mlp", "batch_size=32")
    assert config_hash(base) == config_hash(
        cell("model=mlp", "batch_size=32", "tracking.experiment=other", "cell.timeout_s=60")
    )
    assert config_hash(base) != config_hash(cell("model=mlp", "batch_size=64"))
    assert config_hash(base) != config_hash(cell("model=mlp", "batch_size=32", "precision=mixed_bf16"))


def test_fast_mode_composes_for_every_framework_and_keeps_an_explicit_precision() -> None:
    for framework in choices("framework"):
        fast = cell(f"framework={framework}", "optimize=fast")
        assert fast.optimize.name == "fast" and fast.optimize.compile and fast.precision.name == "mixed_bf16"
    assert cell("optimize=fast", "precision=fp32").precision.name == "fp32"  # the command line wins


def test_a_sweep_expands_in_hydra_order_with_distinct_names() -> None:
    names = planned_cells("-m", "model=mlp,resnet18", "device=cpu,gpu", "batch_size=8")
    assert [n.split()[0] for n in names] == [
        "pytorch-mlp-cpu-bs8",
        "pytorch-mlp-gpu-bs8",
        "pytorch-resnet18-cpu-bs8",
        "pytorch-resnet18-gpu-bs8",
    ]
    precisions = planned_cells("-m", "precision=fp32,mixed_bf16", "device=cpu")
    assert [n.split()[:2] for n in precisions] == [
        ["pytorch-mlp-cpu-bs64", "precision=fp32"],
        ["pytorch-mlp-cpu-bs64", "precision=mixed_bf16"],
    ]


def test_glob_range_and_choice_sweeps_expand() -> None:
    assert len(planned_cells("model=glob(mlp*)")) == 2
    assert [n.split()[0] for n in planned_cells("batch_size=range(8,33,8)", "device=gpu")] == [
        f"pytorch-mlp-gpu-bs{b}" for b in (8, 16, 24, 32)
    ]
    assert len(planned_cells("batch_size=choice(8,16)")) == 2


def test_presets_expand_and_a_command_line_value_narrows_them() -> None:
    # A two-axis preset: each cell planned costs a Hydra composition (test_inference_cells.py plans a 32-cell one).
    assert len(planned_cells("+experiment=mlp_depth_study")) == 4 * 2
    depth = planned_cells("+experiment=mlp_depth_study", "device=cpu")
    assert [n.split()[1] for n in depth] == ["depth=5", "depth=10", "depth=15", "depth=20"]
    assert len(set(depth)) == 4  # four cells, four names


def test_help_is_trainbenchs_page_and_cfg_still_reaches_hydra(capsys) -> None:
    assert cli.main(cli.hydra_entry(), ["--help"]) == 0
    assert "alexnet, bert_base" in capsys.readouterr().out
    assert cli.main(cli.hydra_entry(), ["--cfg", "job", "model=resnet18"]) == 0
    assert "name: resnet18" in capsys.readouterr().out


def test_fast_mode_picks_each_models_measured_compile_mode_on_cuda_gpus_only() -> None:
    distilbert = cell("model=distilbert", "data=synthetic_text", "optimize=fast")
    assert distilbert.framework.compile_mode == "auto"
    assert distilbert.framework.torch_compile_mode(distilbert.model, cuda=True) == "reduce-overhead"
    assert distilbert.framework.torch_compile_mode(distilbert.model, cuda=False) == "default"
    bert_large = cell("model=bert_large", "data=synthetic_text", "optimize=fast")  # keyed by family: bert
    assert bert_large.framework.torch_compile_mode(bert_large.model, cuda=True) == "reduce-overhead"
    resnet50 = cell("model=resnet50", "optimize=fast")
    assert resnet50.framework.torch_compile_mode(resnet50.model, cuda=True) == "reduce-overhead"
    assert resnet50.framework.torch_compile_mode(resnet50.model, cuda=False) == "default"
    resnet18 = cell("model=resnet18", "optimize=fast")  # not measured: torch.compile's default mode
    assert resnet18.framework.torch_compile_mode(resnet18.model, cuda=True) == "default"
    chosen = cell("model=distilbert", "data=synthetic_text", "optimize=fast", "framework.compile_mode=max-autotune")
    assert chosen.framework.torch_compile_mode(chosen.model, cuda=True) == "max-autotune"  # the user's wins


@pytest.mark.parametrize(
    ("overrides", "on"),
    [
        ([], False),
        (["optimize=fast"], True),
        (["framework.channels_last=true"], True),  # by hand, without fast
        (["optimize=fast", "framework.channels_last=false"], False),  # by hand, against fast
    ],
)
def test_pytorchs_knobs_follow_optimize_fast_unless_set(overrides: list[str], on: bool) -> None:
    chosen = cell("model=resnet18", *overrides)
    assert chosen.framework.wants("channels_last", chosen.optimize) is on
    fast = "optimize=fast" in overrides
    assert chosen.framework.wants("fused_optimizer", chosen.optimize) is fast
    assert chosen.framework.wants("capture", chosen.optimize) is fast
    assert chosen.framework.coordinate_descent_tuning is False  # minutes of compiling: never by itself


def test_the_dry_run_names_a_device_this_machine_cannot_have(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainbench.measure.device_probe import absent

    if absent("gpu") is None:
        pytest.skip("this machine has a GPU driver")
    code, out, err = dry_run("device=cpu,gpu", "model=mlp")
    assert code == 0 and "pytorch-mlp-gpu-bs64" in out
    (line,) = err.splitlines()
    assert line.startswith("trainbench: device=gpu: no CUDA device on this machine: no GPU driver")
    assert "its cell would be recorded `unavailable` without starting, the other cell runs" in line
    assert dry_run("device=cpu", "model=mlp")[2] == ""
    monkeypatch.setenv("TRAINBENCH_DEVICE_PROBE", "off")  # the cell's framework looks, as in a cell process
    assert dry_run("device=cpu,gpu", "model=mlp")[2] == ""
