"""The conventions users bring from other command-line tools, Hydra and MLflow: `--version` names every version
that matters, Hydra's own flags (tab completion, --cfg, --info, -cn/-cp) work as Hydra documents them, and the
subcommands take the main command's key=value settings. Real processes; tab completion in a real bash."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, RUN_PY, child_env

TRAINBENCH = Path(sys.executable).parent / "trainbench"
ENTRY_POINTS = {"run.py": [sys.executable, str(RUN_PY)], "trainbench": [str(TRAINBENCH)]}


def command(entry: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY_POINTS[entry], *args],
        cwd=cwd,
        env=child_env(
            {"PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}", **(env or {})}
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_version_names_trainbench_then_each_framework_mlflow_and_hydra_one_line_each(entry, tmp_path) -> None:
    done = command(entry, "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    project = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert project is not None
    assert lines[0] == f"trainbench {project.group(1)}"
    for name, package in [
        ("PyTorch", "torch"),
        ("TensorFlow", "tensorflow"),
        ("JAX", "jax"),
        ("Keras", "keras"),
        ("MLX", "mlx"),
        ("MLflow", "mlflow"),
        ("Hydra", "hydra-core"),
    ]:
        version = installed(package) or "not installed"
        assert f"{name} {version}" in lines, (name, lines)
    assert done.stderr == ""
