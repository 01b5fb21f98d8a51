"""A whole cell: one choice of each group (GROUPS) and the run settings that are not choices (SETTINGS: tracking,
cell limits, the sweep, debug).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from trainbench import untrusted
from trainbench.config.errors import need
from trainbench.config.schema.base import MAX_BATCH_SIZE, finite, need_count, need_optional_count
from trainbench.config.schema.data import DataConfig
from trainbench.config.schema.framework import DeviceConfig, FrameworkConfig
from trainbench.config.schema.model import ModelConfig
from trainbench.config.schema.training import OptimConfig, OptimizeConfig, PrecisionConfig, TaskConfig


@dataclass
class TrackingConfig:
    uri: str | None = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///<project root>/mlflow.db
    experiment: str = "trainbench"  # MLflow experiment name (ignored under `mlflow run`)
    system_metrics_interval_s: float = 10.0  # MLflow system metrics every N seconds; 0 turns them off
    # a tracking server that stops answering mid-sweep is waited for this long (what it is sent meanwhile is
    # kept and sent once it answers) before the sweep gives up on it: a restart, a deploy, a host reboot
    outage_s: float = 300.0

    def check(self, at: str) -> None:
        need(
            finite(self.outage_s) and 0 <= self.outage_s <= 86400,
            f"{at}.outage_s",
            self.outage_s,
            "must be seconds from 0 to 86400, e.g. tracking.outage_s=300",
        )
        need(
            bool(self.experiment.strip()) and len(self.experiment) <= 200 and self.experiment.isprintable(),
            f"{at}.experiment",
            self.experiment,
            "must be a printable name of 1 to 200 characters",
        )
        escape = untrusted.path_problem(self.experiment)
        need(
            escape is None,
            f"{at}.experiment",
            self.experiment,
            f"must be a name, not a path: it holds {escape} (a SQLite store keeps the runs' files in a folder of "
            "this name beside it), e.g. tracking.experiment=my_sweeps",
        )
        need(
            self.uri is None or (bool(self.uri.strip()) and len(self.uri) <= 2000),
            f"{at}.uri",
            self.uri,
            "null or a tracking URI, e.g. http://host:5000 or sqlite:///path/mlflow.db",
        )
        need(
            finite(self.system_metrics_interval_s) and 0 <= self.system_metrics_interval_s <= 3600,
            f"{at}.system_metrics_interval_s",
            self.system_metrics_interval_s,
            "must be 0 (off) or seconds up to 3600",
        )


# A cell's process needs about a second to start Python and its framework: a shorter limit could only fail every
# cell. A year is longer than any benchmark; beyond it a number is a typo (or 1e300), not a limit.
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 365 * 24 * 3600.0


@dataclass
class CellLimits:
    timeout_s: float | None = None  # stop a cell that runs longer (recorded failed)
    memory_limit_mb: int | None = None  # cap the cell's host memory (Linux); a cell over it is tagged oom
    max_batch_size: int = 65536  # batch_size=max searches up to this (trainbench.cell.batch_search)
    cpus: int | None = None  # pin the cell to this many cores (cells running side by side get different ones)
    # stop a cell that shows no sign of progress for this long (no event, no output line, no CPU time: a stopped
    # or deadlocked process), recorded `hung`; null: never. A compile or a long epoch keeps a core busy.
    hung_after_s: float | None = 600.0

    def check(self, at: str) -> None:
        need(
            self.timeout_s is None or (finite(self.timeout_s) and MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S),
            f"{at}.timeout_s",
            self.timeout_s,
            f"must be null (no limit) or seconds from {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} (a year), "
            "e.g. cell.timeout_s=3600",
        )
        need(
            self.hung_after_s is None or (finite(self.hung_after_s) and 2 <= self.hung_after_s <= 10**7),
            f"{at}.hung_after_s",
            self.hung_after_s,
            "must be null (never) or seconds >= 2, e.g. cell.hung_after_s=600",
        )
        need_optional_count(self.memory_limit_mb, f"{at}.memory_limit_mb", 1, 2**24)
        need_count(self.max_batch_size, f"{at}.max_batch_size", 1, MAX_BATCH_SIZE, "")
        need_optional_count(self.cpus, f"{at}.cpus", 1, 4096)


@dataclass
class SweepSettings:
    resume: Any = False  # true: skip cells already finished here; failed: re-run only failed/killed/lost cells
    dry_run: bool = False  # print the sweep's cells and exit without running or recording anything
    heartbeat_s: float = 15.0  # a running cell's run is marked alive this often
    lost_after_s: float = 300.0  # a RUNNING run without a heartbeat for this long is closed as `lost`

    def check(self, at: str) -> None:
        # `is`, not `in`: 0 == False in Python, so `0 in (False, True, "failed")` holds, and sweep.resume, which
        # tests `mode is False`, would then resume
        need(
            self.resume is True or self.resume is False or self.resume == "failed",
            f"{at}.resume",
            self.resume,
            "must be false, true or failed, e.g. sweep.resume=true",
        )
        need(
            finite(self.heartbeat_s) and 0.5 <= self.heartbeat_s <= 3600,
            f"{at}.heartbeat_s",
            self.heartbeat_s,
            "must be seconds from 0.5 to 3600",
        )
        need(
            finite(self.lost_after_s) and self.lost_after_s >= 2 * self.heartbeat_s,
            f"{at}.lost_after_s",
            self.lost_after_s,
            "must be at least twice sweep.heartbeat_s",
        )


@dataclass
class CellConfig:
    """One cell: framework x device x model x data x task x precision x batch size (and how it runs)."""

    framework: FrameworkConfig = MISSING
    device: DeviceConfig = MISSING
    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    task: TaskConfig = MISSING
    precision: PrecisionConfig = MISSING
    optim: OptimConfig = MISSING
    optimize: OptimizeConfig = MISSING
    batch_size: Any = 64  # a whole number >= 1, or "max" (the largest that fits)
    seed: int = 0
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cell: CellLimits = field(default_factory=CellLimits)
    sweep: SweepSettings = field(default_factory=SweepSettings)


GROUPS = ("framework", "device", "model", "data", "task", "precision", "optim", "optimize")

ConfigStore.instance().store(group="schema", name="cell", node=CellConfig, provider="trainbench")
SETTINGS = ("tracking", "cell", "sweep")


def replace(cell: CellConfig, **changes: Any) -> CellConfig:
    """A copy of `cell` with top-level fields or `group={field: value}` changes applied."""
    updated: dict[str, Any] = {}
    for key, value in changes.items():
        current = getattr(cell, key)
        updated[key] = dataclasses.replace(current, **value) if isinstance(value, dict) else value
    return dataclasses.replace(cell, **updated)
