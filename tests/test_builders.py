"""Builders belong to frameworks: a model YAML describes the network once, and each framework package keys its
own builders by the model's architecture (its name, or its family) in a light registry (`BUILDERS` in
trainbench/frameworks/<name>/__init__.py) that the parent process reads without importing any framework.

These tests hold each light registry to the builders its heavy module really has (PyTorch and MLX here, Keras in
a child process: TensorFlow and PyTorch abort in one process), check that no model YAML names a framework's
builder any more, and that the results table and `trainbench doctor` take what they say about a framework (its
version tags; its title, install line and devices) from the framework's own declaration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, child_env, with_schema
from trainbench.config.plugins import SCHEMAS
from trainbench.locations import choices


def test_no_model_yaml_names_a_framework_or_its_builder() -> None:
    """Adding a framework touches no model YAML: none has a key naming a framework or a builder library."""
    frameworks = set(choices("framework"))
    for name in choices("model"):
        keys = set(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text()))
        assert not keys & (frameworks | {"torchvision", "keras", "keras_hub", "mlx", "torch_compile_mode"}), name


def test_pytorchs_registry_names_torchvision_constructors_and_its_own_builders() -> None:
    import torchvision

    from trainbench.frameworks.pytorch import BUILDERS, models

    for architecture, builder in BUILDERS.items():
        own = builder in ("mlp", "bert", "distilbert") or callable(getattr(models, builder, None))
        assert own or callable(getattr(torchvision.models, builder, None)), architecture


def test_mlxs_registry_names_builders_its_models_module_has() -> None:
    pytest.importorskip("mlx.core")
    from trainbench.frameworks.mlx import BUILDERS, models

    for architecture, builder in BUILDERS.items():
        known = {"mlp", *models.IMAGE_BUILDERS, *models.SIZED_IMAGE_BUILDERS, *models.TEXT_BUILDERS}
        assert builder in known, architecture


KERAS_CHECK = """
import json
import keras
import keras_hub
import trainbench.config  # the config package first, as a cell's process loads it before its adapter
from trainbench.frameworks.keras import BUILDERS, models
print(json.dumps({
    architecture: builder == "mlp"
    or hasattr(keras_hub.models, builder)
    or builder in models.OWN_BUILDERS
    or hasattr(keras.applications, builder)
    for architecture, builder in BUILDERS.items()
}))
"""


@pytest.mark.slow  # 20-35 s importing TensorFlow; tests/test_keras_parity.py (slow too) builds every entry anyway
def test_keras_registry_names_builders_keras_has() -> None:
    pytest.importorskip("keras")
    found = subprocess.run(
        [sys.executable, "-c", KERAS_CHECK],
        env=child_env({"PYTHONPATH": str(ROOT / "src"), "KERAS_BACKEND": "tensorflow"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    resolved = json.loads(found.stdout.strip().splitlines()[-1])
    assert resolved and all(resolved.values()), resolved


def test_each_framework_declares_the_version_tags_the_tables_show(tmp_path, capsys) -> None:
    """`trainbench results` names each run's framework versions from what each framework's config declares
    (a new framework adds its own `sw.*` tag there, not in the table's code)."""
    from trainbench import results_command
    from trainbench.store import tracking

    declared = {tag for config in SCHEMAS["framework"].values() for tag in config.version_tags}
    assert {"sw.torch", "sw.keras", "sw.tensorflow", "sw.jax", "sw.mlx"} <= declared
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = tracking.client(uri)
    experiment_id = client.create_experiment("trainbench")
    tags = {"trainbench.kind": "cell", "trainbench.framework": "mlx", "sw.mlx": "0.32.4", "sw.python": "3.11.9"}
    run_id = client.create_run(experiment_id, run_name="mlx-mlp-cpu-bs64", tags=tags).info.run_id
    client.set_terminated(run_id)
    assert results_command.main(["--uri", uri]) == 0
    table = capsys.readouterr().out
    assert "| versions |" in table and "mlx 0.32.4" in table and "python" not in table.split("| versions |")[-1]


def test_a_new_framework_is_checked_by_the_doctor_from_its_own_declaration(monkeypatch) -> None:
    """`trainbench doctor` names, installs and places a framework from what its package declares (DoctorFacts):
    a framework registered beside the others is planned with no line of trainbench.doctor naming it."""
    from dataclasses import dataclass
    from typing import ClassVar

    from trainbench.config.schema import DoctorFacts, FrameworkConfig
    from trainbench.doctor import checks, declared, plan

    @dataclass
    class TinyConfig(FrameworkConfig):
        doctor: ClassVar[DoctorFacts | None] = DoctorFacts(
            title="Tiny", module="json", install="pip install tiny", gpu_install={"nvidia": "pip install tiny[cuda]"}
        )

    monkeypatch.setitem(SCHEMAS["framework"], "tiny", TinyConfig)
    assert list(declared.frameworks())[:1] == ["pytorch"] and "tiny" in declared.default_frameworks()
    assert declared.installed_frameworks(["tiny"]) == {"tiny"}  # its module (here: json) is importable
    sweeps, notes = plan.plan(["tiny", "mlx"], {"tiny"}, {"hw.gpu_vendor": "nvidia"})
    assert [(s.device, s.frameworks) for s in sweeps] == [("gpu", ["tiny"])]
    (missing,) = notes
    assert missing.subject == "MLX" and 'pip install -e ".[mlx]"' in missing.text  # its own declaration
    unavailable = checks.Cell("tiny", "gpu", "unavailable", "no CUDA device")
    (line,) = checks.check_cell(unavailable, gpu_vendor="nvidia")
    assert line.subject == "Tiny GPU" and line.text.endswith("pip install tiny[cuda]")
