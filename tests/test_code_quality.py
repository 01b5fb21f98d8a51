"""The checks the README's test command runs besides behaviour: the adapter contract type-checks (mypy, with
the settings in pyproject.toml), and the code is ruff-clean and ruff-formatted."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CHECKED = ["src", "tests", "benchmarks", "tools"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def type_checked() -> subprocess.CompletedProcess[str]:
    """`python -m mypy` in the checkout, once: it leaves its cache in .mypy_cache, as a contributor's run does."""
    return run(sys.executable, "-m", "mypy")


def test_the_sources_type_check(type_checked: subprocess.CompletedProcess[str]) -> None:
    """Framework, Trainer, RunLog and the tasks are typed Protocols: mypy holds adapters and tasks to them."""
    assert type_checked.returncode == 0, type_checked.stdout[-3000:]


def test_an_adapter_that_breaks_the_contract_fails_the_type_check(
    tmp_path: Path, type_checked: subprocess.CompletedProcess[str]
) -> None:
    """Adapters are imported by name at run time, so only their own modules tie them to Framework and Device: an
    adapter whose device's `synchronize` is renamed must fail mypy, naming the adapter and the missing member
    (twice: the device class, and the adapter whose `bind` returns it). The same for the Keras backends' own
    hooks (keras.adapter.KerasBackend: a JAX adapter without `jit_compile`) and a trainer's optional fit
    (base.FittingTrainer: Keras' FitTrainer without `host_prep_time_s`)."""
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    # The checkout's cache: mypy checks again only what changed and what depends on it (a cold check of the copy
    # costs ~10 s of CPU); a module whose source differs from its cached hash is never taken from the cache.
    shutil.copytree(ROOT / ".mypy_cache", tmp_path / "mypy_cache")
    adapter = tmp_path / "src" / "trainbench" / "frameworks" / "mlx" / "adapter.py"
    source = adapter.read_text()
    assert "    def synchronize(self) -> None:" in source
    adapter.write_text(source.replace("    def synchronize(self) -> None:", "    def synchronise(self) -> None:"))
    frameworks = tmp_path / "src" / "trainbench" / "frameworks"
    for path, old, new in (
        ("jax/adapter.py", "    def jit_compile(self) -> bool:", "    def jit_compiles(self) -> bool:"),
        ("keras/adapter.py", "        self.host_prep_time_s = ", "        self.host_prep_s = "),
    ):
        source = (frameworks / path).read_text()
        assert old in source, path
        (frameworks / path).write_text(source.replace(old, new, 1))

    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy_cache")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 1, checked.stdout[-3000:]
    assert "frameworks/mlx/adapter.py" in checked.stdout and "synchronize" in checked.stdout, checked.stdout
    assert '"MlxDevice" is missing following "Device" protocol member' in checked.stdout, checked.stdout
    assert 'Cannot instantiate abstract class "Adapter" with abstract attribute "jit_compile"' in checked.stdout
    assert '"FitTrainer" is missing following "FittingTrainer" protocol member' in checked.stdout, checked.stdout
    assert "errors in 3 files" in checked.stdout, checked.stdout  # the rest of the copy still checks


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv" / "bin" / "ruff").exists(),
    reason="ruff is installed by requirements.txt",
)
@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_code_is_ruff_clean(check: list[str]) -> None:
    checked = run(sys.executable, "-m", "ruff", *check, *CHECKED)
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]


MAX_MODULE_LINES = 600  # a module a newcomer reads whole; a longer one is split by concern (docs/development.md)


def test_no_module_under_src_is_longer_than_600_lines() -> None:
    """Small modules, named after what they hold: the longest module under src/ is at most MAX_MODULE_LINES."""
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "src").rglob("*.py")}
    too_long = {path: lines for path, lines in lengths.items() if lines > MAX_MODULE_LINES}
    assert not too_long, f"split these by concern (at most {MAX_MODULE_LINES} lines each): {too_long}"


def test_the_cells_side_imports_nothing_of_the_sweeps_side() -> None:
    """The process line in the layout: trainbench/cell/ (what runs in a cell's own process, and what crosses to it)
    and trainbench/frameworks/ (the adapters the cell's process drives) import nothing from trainbench/sweep/ (the
    parent's side), at module level or inside functions."""
    crossing = []
    cell_side = [ROOT / "src" / "trainbench" / side for side in ("cell", "frameworks")]
    for path in sorted(path for side in cell_side for path in side.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            where = path.relative_to(ROOT / "src" / "trainbench")
            crossing += [f"{where}:{node.lineno} {name}" for name in names if name.startswith("trainbench.sweep")]
    assert not crossing, crossing


# Shared modules that hold framework names as data, not as a branch: `trainbench --version`'s list of packages,
# and the one-line hints for settings that moved into a framework's own config (old command lines still say where).
NAMES_AS_DATA = {"version.py", "config/errors.py"}


def test_no_shared_module_branches_on_a_frameworks_name() -> None:
    """Outside trainbench/frameworks/, code reads what a framework declares (its config) instead of comparing or
    looking up its name: a new framework needs no edit there. A string that is exactly a shipped framework's name
    (conf/framework/<name>.yaml) is what such a branch or lookup holds."""
    names = {path.stem for path in (ROOT / "src" / "trainbench" / "conf" / "framework").glob("*.yaml")}
    shared = ROOT / "src" / "trainbench"
    found = []
    for path in sorted(shared.rglob("*.py")):
        where = str(path.relative_to(shared))
        if where.startswith("frameworks/") or where in NAMES_AS_DATA:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert not found, found
