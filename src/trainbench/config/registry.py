"""Which dataclass types each config group's choices are: the schema registry.

Every choice in conf/<group>/ names its schema in its defaults list (`- /schema/model/vision@_here_`), so
Hydra merges the YAML into that dataclass while composing: an unknown key or a wrong type is refused then,
naming the key. The dataclasses register themselves here (`@schema("model", "vision")`) and in Hydra's
ConfigStore, from light modules only: the parent process never imports a deep-learning framework.
Importing trainbench.config.plugins registers every shipped one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hydra.core.config_store import ConfigStore

T = TypeVar("T")

# group -> kind -> dataclass
SCHEMAS: dict[str, dict[str, type]] = {}


def schema(group: str, kind: str) -> Callable[[type[T]], type[T]]:
    """Register a dataclass as the schema `schema/<group>/<kind>` that YAML choices extend."""

    def register(cls: type[T]) -> type[T]:
        import dataclasses

        if group == "framework" and any(f.name == "adapter" for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
            raise TypeError(
                f"{cls.__name__}.adapter must be a ClassVar[str]: as a field, a command line or a file could choose "
                "the module a cell imports"
            )
        SCHEMAS.setdefault(group, {})[kind] = cls
        cls.schema_kind = kind  # type: ignore[attr-defined]
        ConfigStore.instance().store(group=f"schema/{group}", name=kind, node=cls, provider="trainbench")
        return cls

    return register


def kind_of(node: Any) -> str:
    return type(node).schema_kind
