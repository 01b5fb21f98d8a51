"""Framework adapters: one package per framework (pytorch, tensorflow, jax, mlx, and keras for what the two
Keras frameworks share). Each package's __init__ is light: the framework's config dataclass and what it can
build, registered as `schema/framework/<name>`. Its `adapter` module is the only code importing the
framework, loaded only inside a cell's own process. Adding a framework = one package + one YAML."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Framework


def load(cell: CellConfig) -> Framework:
    """Import the adapter of cell.framework (only ever inside a cell's own process)."""
    module = importlib.import_module(cell.framework.adapter)
    adapter: Framework = module.Adapter(cell)
    return adapter
