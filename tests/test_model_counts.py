"""A model counts itself: its config gives its FLOPs per sample (ModelConfig.flops_per_sample), and every
framework records that figure, whatever kind of model it is; no adapter knows the kind.

The new kind is added as a user adds one: its dataclass registered with `@schema` by a module of the user's
own (a sitecustomize on PYTHONPATH, so the sweep's process and each cell's process both load it) and a model
YAML in conf/model/ of a copy of the checkout; no file of trainbench's is edited.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Invocation, child_env, with_schema

# Figures no counter would give a 3-layer MLP on these images: only the model's own count can produce them.
TRAINING_FLOPS, INFERENCE_FLOPS = 1234.0, 567.0

MODEL_YAML = """defaults:
  - /schema/model/counted_mlp@_here_
name: counted_mlp
hidden_sizes: [8]
"""
REGISTRATION = f"""
from dataclasses import dataclass

from trainbench.config.registry import schema
from trainbench.config.schema import MlpModel


@schema("model", "counted_mlp")
@dataclass
class CountedMlp(MlpModel):
    def flops_per_sample(self, sample, training):
        return {TRAINING_FLOPS} if training else {INFERENCE_FLOPS}

"""

# The frameworks installed here (CI installs PyTorch, TensorFlow and JAX; MLX has Linux CPU wheels too: `mlx[cpu]`).
FRAMEWORKS = [
    name
    for name, module in {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax", "mlx": "mlx.core"}.items()
    if importlib.util.find_spec(module.split(".")[0]) is not None
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Invocation:
    """One tiny training cell of the new kind per installed framework."""
    folder = tmp_path_factory.mktemp("counted")
    checkout = folder / "checkout"
    for part in ("src", "conf"):  # src/trainbench/conf links to ../../conf
        shutil.copytree(ROOT / part, checkout / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "conf" / "model" / "counted_mlp.yaml").write_text(MODEL_YAML)
    plugin = folder / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(REGISTRATION)
    path = os.pathsep.join(p for p in (str(plugin), str(checkout / "src"), os.environ.get("PYTHONPATH")) if p)
    uri = with_schema(f"sqlite:///{folder / 'mlflow.db'}")
    arguments = [
        "-m",
        f"framework={','.join(FRAMEWORKS)}",
        "task=train",
        "task.epochs=1",
        "model=counted_mlp",
        "data=synthetic",
        "data.image_size=8",
        "data.num_samples=16",
        "data.num_val_samples=4",
        "batch_size=8",
        "device=cpu",
        "tracking.system_metrics_interval_s=0",
    ]
    completed = subprocess.run(
        [sys.executable, str(checkout / "src" / "run.py"), *arguments],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri, "PYTHONPATH": path}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return Invocation(completed.returncode, completed.stdout, completed.stderr, uri)


@pytest.mark.slow
def test_a_model_kind_of_its_own_counts_its_flops_in_every_framework(sweep: Invocation) -> None:
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    cells = [r for r in sweep.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    found = {(r.data.params["framework.name"], r.data.params["task.name"]): r.data.metrics for r in cells}
    assert set(found) == {(f, "train") for f in FRAMEWORKS}
    for (framework, _), metrics in found.items():
        assert metrics["flops_per_sample"] == TRAINING_FLOPS, f"{framework}: {metrics['flops_per_sample']}"
        assert metrics["num_parameters"] == 3 * 8 * 8 * 8 + 8 + 8 * 10 + 10  # counted by the framework
