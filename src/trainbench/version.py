"""`trainbench --version`: trainbench's version, then each framework's, MLflow's and Hydra's, one line each.

Read from the installed packages' metadata, never by importing them: importing TensorFlow or PyTorch takes
seconds and prints its own lines, and both in one process abort it.
"""

from __future__ import annotations

import importlib.metadata
import tomllib

from trainbench.locations import PROJECT_ROOT

# (what users call it, the distribution that carries its version), in the order `--version` prints them.
PACKAGES = (
    ("PyTorch", "torch"),
    ("TensorFlow", "tensorflow"),
    ("JAX", "jax"),
    ("Keras", "keras"),
    ("MLX", "mlx"),
    ("MLflow", "mlflow"),
    ("Hydra", "hydra-core"),
)


def trainbench_version() -> str:
    """The checkout's pyproject.toml when run from one (an editable install's metadata is as old as its last
    `pip install`), else the installed package's metadata."""
    pyproject = PROJECT_ROOT / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "trainbench" and "version" in project:
            return str(project["version"])
    try:
        return importlib.metadata.version("trainbench")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (neither installed nor run from a checkout)"


def installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def version_lines() -> list[str]:
    return [f"trainbench {trainbench_version()}"] + [f"{name} {installed_version(d)}" for name, d in PACKAGES]
