"""Framework adapters: one package per framework (pytorch, tensorflow, jax, mlx, and keras for what the two
Keras frameworks share). Each package's __init__ is light: the framework's config dataclass and what it can
build, registered as `schema/framework/<name>`. Its `adapter` module is the only code importing the
framework, loaded only inside a cell's own process. Adding a framework = one package, its line in
frameworks/shipped.py (which registers it) and one YAML."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework


# A prestarted cell's process (trainbench.cell.worker --preload) loads its cell's adapter before it knows its run:
# (the cell, the adapter), taken by the first load of an equal cell.
_preloaded: tuple[CellConfig, Framework] | None = None


def load(cell: CellConfig) -> Framework:
    """Import the adapter of cell.framework (only ever inside a cell's own process); the one `preload` made for this
    cell, if any."""
    global _preloaded
    preloaded, _preloaded = _preloaded, None
    if preloaded is not None and preloaded[0] == cell:
        return preloaded[1]
    module = importlib.import_module(cell.framework.adapter)
    adapter: Framework = module.Adapter(cell)
    return adapter


def preload(cell: CellConfig) -> None:
    """Make the adapter `load` will return for this same cell (its framework imported, nothing computed)."""
    global _preloaded
    _preloaded = None
    adapter = load(cell)
    ahead = getattr(adapter, "import_ahead", None)  # optional: what its cell would import later anyway
    if ahead is not None:
        ahead()
    _preloaded = (cell, adapter)


def not_installed(cells: Iterable[CellConfig]) -> str | None:
    """One line naming the first framework the cells need that this Python cannot import, and the command that
    installs its extra; None when every one can be. Asked by the parent before a sweep starts: find_spec looks
    for a module without importing it."""
    for cell in cells:
        framework = cell.framework
        if not framework.installs_here():
            continue
        missing = [module for module in framework.imports(cell.model) if not _importable(module)]
        if missing:
            return (
                f"framework={framework.name} needs {', '.join(missing)}, which this Python ({sys.executable}) cannot "
                f"import: install trainbench's [{framework.package}] extra: {install_command(framework.package)}"
            )
    return None


def always_nhwc() -> str:
    """Why framework.channels_last=false is refused by a framework whose convolutions are always NHWC: the
    frameworks that can switch it, as they declare it (FrameworkConfig.switches)."""
    from trainbench.config.registry import SCHEMAS
    from trainbench.config.schema import FrameworkConfig

    able = [
        name
        for name, config in SCHEMAS.get("framework", {}).items()
        if issubclass(config, FrameworkConfig) and "channels_last" in config.switches
    ]
    return "this framework always runs convolutions NHWC (channels_last); " + (
        f"only framework={' or framework='.join(sorted(able))} can switch it" if able else "none can switch it"
    )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module whose import was blocked (sys.modules None)
        return False


def install_command(extra: str) -> str:
    """The pip command that installs trainbench's `extra` at this platform's locked versions, from the checkout
    (messages show paths relative to it). Never `pip install "trainbench[...]"`: a different project is
    published under that name."""
    from trainbench.locations import PROJECT_ROOT

    command = f'pip install -e ".[{extra}]" -c locks/constraints.txt'
    here = (PROJECT_ROOT / "pyproject.toml").is_file() and Path.cwd().resolve() == PROJECT_ROOT
    return command if here else f"{command}, run in trainbench's checkout"
