"""The checks the README's test command runs besides behaviour: the adapter contract type-checks (mypy, with
the settings in pyproject.toml), and the code is ruff-clean and ruff-formatted."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

CHECKED = ["src", "tests", "benchmarks"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_sources_type_check() -> None:
    """Framework, Trainer, RunLog and the tasks are typed Protocols: mypy holds adapters and tasks to them."""
    checked = run(sys.executable, "-m", "mypy")
    assert checked.returncode == 0, checked.stdout[-3000:]


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv" / "bin" / "ruff").exists(),
    reason="ruff is installed by requirements.txt",
)
@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_code_is_ruff_clean(check: list[str]) -> None:
    checked = run(sys.executable, "-m", "ruff", *check, *CHECKED)
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]
