"""The frameworks the doctor checks, each from what its light package declares (DoctorFacts): a new framework needs
no line of the doctor.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainbench.config.schema import DoctorFacts, FrameworkConfig


BACKENDS = {"cpu": "CPU", "mps": "MPS", "metal": "Metal", "cuda": "CUDA", "rocm": "ROCm", "gpu": "GPU"}


def frameworks() -> dict[str, FrameworkConfig]:
    """Each framework the doctor checks, in its order: {name: its default config}, each declaring what the doctor
    needs (`doctor`: DoctorFacts) in its light package, so a new framework needs no line here."""
    from trainbench.config.plugins import SCHEMAS

    found = {name: cls() for name, cls in SCHEMAS["framework"].items() if getattr(cls, "doctor", None)}
    return dict(sorted(found.items(), key=lambda item: (facts(item[1]).rank, item[0])))


def facts(config: FrameworkConfig) -> DoctorFacts:
    assert config.doctor is not None  # frameworks() holds only those that declare it
    return config.doctor


def default_frameworks() -> list[str]:
    return [name for name, config in frameworks().items() if facts(config).by_default]


def title(name: str) -> str:
    """A framework as people write it (PyTorch), or its name as given when it is none the doctor knows."""
    config = frameworks().get(name)
    return facts(config).title if config else name


def installed_frameworks(names: Sequence[str]) -> set[str]:
    """Which frameworks this Python can import, found without importing any."""
    known = frameworks()
    return {name for name in names if importlib.util.find_spec(facts(known[name]).module) is not None}
