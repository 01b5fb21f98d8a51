"""Validating references, one row at a time: every value checked against what it may be, before anything
is written. A problem is one line naming the column, the value and what is allowed."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainbench.references.reading import CsvRow

REQUIRED = (
    "source",
    "reference",
    "system",
    "device_kind",
    "accelerator",
    "framework",
    "model",
    "dataset",
    "precision",
    "metric",
    "value",
)
SAMPLE_UNITS = ("samples/s", "sample/s", "img/s", "images/s", "seq/s", "sequences/s")
PRECISIONS = {
    "fp32": "fp32",
    "tf32": "tf32",
    "amp_fp16": "mixed_fp16",
    "mixed_fp16": "mixed_fp16",
    "mixed_float16": "mixed_fp16",
    "amp_bf16": "mixed_bf16",
    "mixed_bf16": "mixed_bf16",
    "mixed_bfloat16": "mixed_bf16",
}
XLA_SUFFIX = "+xla"  # fp32+xla, mixed_float16+xla: compiled with XLA
TIMED_REGIONS = ("steps", "epoch", "fit", "build_fit")
PIPELINES = ("device", "loader")
POWER_SCOPES = ("gpu", "package", "board")
POWER_METRICS = ("power_w", "avg_power_w")
NVIDIA = re.compile(r"nvidia|tesla|geforce|quadro|\brtx\b|\b[AHLTV]\d{2,3}\b", re.IGNORECASE)


@dataclass(frozen=True)
class MetricRule:
    """How one CSV metric becomes a schema metric."""

    target: str
    per_epoch: bool = False  # logged with step = epoch (a blank epoch is the first and only one)
    units: tuple[str, ...] = ()  # accepted `unit` values besides blank
    convert: Callable[[float], float] | None = None
    derivation: str = ""  # how convert derives the schema metric, in words (reference.derived)
    positive: bool = False  # must be > 0 (times, throughputs: a zero would be a typo or a division)


def _rule(target: str, units: tuple[str, ...] = (), **kwargs: Any) -> MetricRule:
    return MetricRule(target, units=units, **kwargs)


METRICS: dict[str, MetricRule] = {
    # the published CSV's own names
    "throughput": _rule("samples_per_s", SAMPLE_UNITS, positive=True),
    # without an epoch: the run's samples_per_s; with one: that epoch's time (trainbench.references.mapping)
    "time_per_sample_us": _rule(
        "samples_per_s", ("us", "µs"), convert=lambda us: 1e6 / us, derivation="1e6 / time_per_sample_us", positive=True
    ),
    "power_w": _rule("avg_power_w", ("W",), positive=True),
    # a study's memory figure in GB (as macOS and nvidia-smi print memory: 2^30 bytes) -> MB
    "memory_gb": _rule(
        "peak_device_memory_mb", ("GB",), convert=lambda gb: gb * 1024, derivation="memory_gb x 1024", positive=True
    ),
    # train_time_{N}_epochs_s is matched by pattern below -> total_time_s with N epochs
    # schema names, for rows from a trainbench run on a colleague's machine
    "epoch_time_s": _rule("epoch_time_s", ("s",), per_epoch=True, positive=True),
    "epoch_samples_per_s": _rule("epoch_samples_per_s", SAMPLE_UNITS, per_epoch=True, positive=True),
    **{name: _rule(name, per_epoch=True) for name in ("train_loss", "train_accuracy", "val_loss", "val_accuracy")},
    "samples_per_s": _rule("samples_per_s", SAMPLE_UNITS, positive=True),
    **{name: _rule(name, ("s",), positive=True) for name in ("total_time_s", "first_epoch_time_s", "warmup_time_s")},
    **{
        name: _rule(name, ("ms",), positive=True)
        for name in ("step_time_ms_mean", "step_time_ms_p50", "step_time_ms_p90", "step_time_ms_p99")
    },
    "step_time_cv_pct": _rule("step_time_cv_pct", ("%",)),
    **{name: _rule(name, ("MB",)) for name in ("peak_device_memory_mb", "peak_host_memory_mb")},
    "energy_j": _rule("energy_j", ("J",), positive=True),
    "avg_power_w": _rule("avg_power_w", ("W",), positive=True),
    "samples_per_j": _rule("samples_per_j"),
    "flops_per_sample": _rule("flops_per_sample"),
    "achieved_tflops": _rule("achieved_tflops", ("TFLOPS",)),
    "peak_tflops": _rule("peak_tflops", ("TFLOPS",), positive=True),
    "mfu": _rule("mfu"),
    "num_parameters": _rule("num_parameters"),
}
TRAIN_TIME = re.compile(r"^train_time_(\d+)_epochs_s$")


def metric_rule(name: str) -> MetricRule | None:
    if name in METRICS:
        return METRICS[name]
    if TRAIN_TIME.match(name):
        return _rule("total_time_s", ("s",), positive=True)
    return None


def precision_of(text: str) -> str:
    """The CSV's precision (amp_fp16, mixed_float16+xla, ...) as trainbench names it (mixed_fp16)."""
    return PRECISIONS[text.lower().removesuffix(XLA_SUFFIX)]


def row_problem(row: CsvRow) -> str | None:
    """What is wrong with one row, or None."""
    for check in (
        _required,
        _device,
        _framework,
        _batch_size,
        _epoch,
        _precision,
        _metric_and_value,
        _unit,
        _settings,
        _power_scope,
        _accelerator,
    ):
        problem = check(row)
        if problem:
            return problem
    return None


def bad(key: str, value: str, expected: str) -> str:
    return f"`{key}`={value!r} is not valid: {expected}"


def _required(row: CsvRow) -> str | None:
    missing = next((key for key in REQUIRED if not row[key]), None)
    return f"`{missing}` is empty; it is required" if missing else None


def _device(row: CsvRow) -> str | None:
    return (
        None
        if row["device_kind"] in ("cpu", "gpu")
        else bad("device_kind", row["device_kind"], "choose one of cpu, gpu")
    )


def _framework(row: CsvRow) -> str | None:
    if re.fullmatch(r"[a-z][a-z0-9_]*", row["framework"].lower()):
        return None
    from trainbench.locations import choices

    return bad("framework", row["framework"], f"a framework name such as {' or '.join(choices('framework')[:2])}")


def _batch_size(row: CsvRow) -> str | None:
    batch = row["batch_size"]
    if not batch and row["model"] == "matmul":
        return None
    if batch.isdigit() and int(batch) >= 1:
        return None
    return bad("batch_size", batch, "must be a whole number >= 1 (blank only for model matmul)")


def _epoch(row: CsvRow) -> str | None:
    epoch = row["epoch"]
    if not epoch or (epoch.isdigit() and int(epoch) >= 1):
        return None
    return bad("epoch", epoch, "must be blank or a whole number >= 1")


def _precision(row: CsvRow) -> str | None:
    if row["precision"].lower().removesuffix(XLA_SUFFIX) in PRECISIONS:
        return None
    return bad("precision", row["precision"], f"choose one of {', '.join(PRECISIONS)} (optionally {XLA_SUFFIX})")


def _metric_and_value(row: CsvRow) -> str | None:
    rule = metric_rule(row["metric"])
    if rule is None:
        return bad("metric", row["metric"], f"choose one of {', '.join([*METRICS, 'train_time_<N>_epochs_s'])}")
    try:
        value = float(row["value"])
    except ValueError:
        return bad("value", row["value"], "must be a number")
    if not math.isfinite(value) or (rule.positive and value <= 0):
        return bad("value", row["value"], "must be a finite number" + (" > 0" if rule.positive else ""))
    return None


def _unit(row: CsvRow) -> str | None:
    rule = metric_rule(row["metric"])
    assert rule is not None  # _metric_and_value ran first
    if not row["unit"] or row["unit"].lower() in {u.lower() for u in rule.units}:
        return None
    return bad("unit", row["unit"], f"metric {row['metric']} takes {', '.join(rule.units) or 'none (leave it blank)'}")


def _settings(row: CsvRow) -> str | None:
    allowed = {"timed_region": TIMED_REGIONS, "pipeline": PIPELINES, "channels_last": ("true", "false")}
    for column, choices in allowed.items():
        if row[column] and row[column] not in choices:
            return bad(column, row[column], f"leave it blank or choose one of {', '.join(choices)}")
    return None


def _power_scope(row: CsvRow) -> str | None:
    scope = row["power_scope"]
    if scope and scope not in POWER_SCOPES:
        return bad("power_scope", scope, f"choose one of {', '.join(POWER_SCOPES)}")
    if not scope and row["metric"] in POWER_METRICS:
        return (
            f"`power_scope` is empty on a {row['metric']} row; say what the figure covers: "
            f"{', '.join(POWER_SCOPES)} (a GPU-only figure is not a board's or a package's)"
        )
    return None


def _accelerator(row: CsvRow) -> str | None:
    if row["device_kind"] == "gpu" and backend_of(row) is None:
        return bad(
            "accelerator",
            row["accelerator"],
            "a gpu row must name an NVIDIA or Apple GPU (cuda, mps and metal are the backends)",
        )
    return None


def backend_of(row: CsvRow) -> str | None:
    """What ran, as a local run's trainbench.backend would say; None for a GPU nobody can name."""
    if row["device_kind"] == "cpu":
        return "cpu"
    accelerator = row["accelerator"]
    if "(mps)" in accelerator.lower():
        return "mps"
    if "metal" in accelerator.lower():
        return "metal"
    if accelerator.startswith("Apple"):
        from trainbench.setting import framework_config

        config = framework_config(row["framework"].lower())
        return config.apple_gpu_backend if config is not None else "metal"
    return "cuda" if NVIDIA.search(accelerator) else None
