"""What every choice's schema stands on: `Choice`, the bounds no machine can exceed, and the checks of a count."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from trainbench.config.errors import need

# Bounds no machine can exceed: the largest device memory sold (141 GB on an H200) sets them.
MAX_BATCH_SIZE = 2**24
MAX_IMAGE_SIZE = 4096
MAX_SAMPLES = 10**9
MAX_SEQ_LEN = 65536
MAX_LAYER_UNITS = 2**20


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def need_count(value: Any, key: str, low: int, high: int, example: str) -> None:
    need(whole(value) and low <= value <= high, key, value, f"must be a whole number from {low} to {high:,}, {example}")


def need_optional_count(value: Any, key: str, low: int, high: int) -> None:
    need(
        value is None or (whole(value) and low <= value <= high),
        key,
        value,
        f"must be null or a whole number from {low} to {high:,}",
    )


@dataclass
class Choice:
    """A config group's choice. `name` is the YAML file's name."""

    name: str = MISSING

    def check(self, at: str) -> None:
        """Raise ConfigError for values of the right type that cannot work; `at` is the group's key."""
