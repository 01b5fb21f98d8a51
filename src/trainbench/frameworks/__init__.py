"""Framework adapters. Which module implements a framework is named by its YAML (conf/framework/),
so adding a framework is one module and one YAML, and nothing here imports torch or tensorflow."""

from __future__ import annotations

import importlib
from typing import Any

from trainbench.frameworks.base import DeviceUnavailable, EpochStats, Framework

__all__ = ["DeviceUnavailable", "EpochStats", "Framework", "load"]


def load(cfg: dict[str, Any]) -> Framework:
    """Import the adapter of cfg["framework"] (only ever inside a cell's own process)."""
    module = importlib.import_module(cfg["framework"]["adapter"])
    return module.Adapter(cfg)
