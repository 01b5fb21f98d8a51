"""The dependency set resolves for every platform we promise, without that platform at hand.

pip's own `--platform` dry run evaluates environment markers for the machine it runs on, so it cannot
show what a Mac would get; `uv pip compile --python-platform` evaluates them for the target. The targets are
the oldest systems MLX ships wheels for (macOS 14, glibc 2.35): on older ones MLX does not install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # resolves the whole dependency set against the package index, twice


def resolve(platform: str, python: str, tmp_path: Path, macos: str | None = None) -> dict[str, str]:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    lock = tmp_path / f"{platform}.txt"
    completed = subprocess.run(
        [
            uv,
            "pip",
            "compile",
            "--quiet",
            "--python-platform",
            platform,
            "--python-version",
            python,
            str(ROOT / "requirements-core.txt"),
            "-o",
            str(lock),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MACOSX_DEPLOYMENT_TARGET": macos} if macos else None,  # uv's Mac target: 13 unless set
    )
    if completed.returncode != 0 and "network" in completed.stderr.lower():
        pytest.skip(f"package registry unreachable: {completed.stderr.strip()[:200]}")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", lock.read_text(), flags=re.MULTILINE))


def test_apple_silicon_gets_tensorflow_metal_with_a_tensorflow_it_can_load_and_mlx_on_metal(tmp_path: Path) -> None:
    pins = resolve("aarch64-apple-darwin", "3.12", tmp_path, macos="14.0")
    assert pins["tensorflow"] == "2.19.1"  # 2.20+ cannot import once tensorflow-metal is installed
    assert pins["tensorflow-metal"] == "1.2.0"
    assert "tensorflow-macos" not in pins  # obsolete since TF 2.16
    assert "torch" in pins and "keras" in pins and "keras-hub" in pins
    assert "mlx" in pins and pins["mlx-metal"] == pins["mlx"]  # framework=mlx on the Apple GPU
    assert "mlx-cpu" not in pins


def test_linux_gets_tensorflow_2_21_mlx_on_the_cpu_and_no_metal(tmp_path: Path) -> None:
    pins = resolve("x86_64-manylinux_2_35", "3.11", tmp_path)
    assert pins["tensorflow"].startswith("2.21.")
    assert "tensorflow-metal" not in pins
    assert pins["mlflow"] == "3.17.2" and pins["hydra-core"] == "1.3.8"
    assert "mlx" in pins and pins["mlx-cpu"] == pins["mlx"]  # framework=mlx on the CPU (tests)
    assert "mlx-metal" not in pins and not any(name.startswith("mlx-cuda") for name in pins)  # CUDA: opt-in
