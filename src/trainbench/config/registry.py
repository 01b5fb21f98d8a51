"""Which dataclass types each config group's choices are: the schema registry.

Every choice in conf/<group>/ names its schema in its defaults list (`- /schema/model/vision@_here_`), so
Hydra merges the YAML into that dataclass while composing: an unknown key or a wrong type is refused then,
naming the key. The dataclasses register themselves here (`@schema("model", "vision")`) and in Hydra's
ConfigStore, from light modules only: the parent process never imports a deep-learning framework.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, TypeVar

from hydra.core.config_store import ConfigStore

T = TypeVar("T")

# group -> kind -> dataclass
SCHEMAS: dict[str, dict[str, type]] = {}
_loaded = False


def schema(group: str, kind: str) -> Callable[[type[T]], type[T]]:
    """Register a dataclass as the schema `schema/<group>/<kind>` that YAML choices extend."""

    def register(cls: type[T]) -> type[T]:
        SCHEMAS.setdefault(group, {})[kind] = cls
        cls.schema_kind = kind  # type: ignore[attr-defined]
        ConfigStore.instance().store(group=f"schema/{group}", name=kind, node=cls, provider="trainbench")
        return cls

    return register


def kind_of(node: Any) -> str:
    return type(node).schema_kind


def schema_class(group: str, kind: str) -> type:
    load_all()
    return SCHEMAS[group][kind]


def load_all() -> None:
    """Import every module that registers schemas: the generic groups, each framework's light config
    package and each task module. Adding a framework or a task registers it without touching this list."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module("trainbench.config.schema")
    for package in ("trainbench.frameworks", "trainbench.tasks"):
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            if not info.name.startswith("_") and info.name != "base":
                importlib.import_module(f"{package}.{info.name}")
