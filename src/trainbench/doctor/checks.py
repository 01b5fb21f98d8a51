"""The doctor's checks: pure functions of one recorded cell's metrics and tags, each giving one line (a Finding), so
tests feed them the figures of hardware that is not here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainbench.doctor.declared import BACKENDS, facts, frameworks, title

# Per-step figures of one compute-bound cell that must agree: a busy two-core CI machine moves even the fastest
# rounds apart by a good part of this factor (results/2026-11-26-doctor-fastest-rounds), while a synchronize that
# returns before the device is done makes a short block several times faster than the device's real pace (only
# queueing is timed).
TIMING_FACTOR = 1.5
# No figure may imply more than this times the device's published (or, for a CPU, estimated) dense peak.
PEAK_FACTOR = 1.5
# Highest plausible average power per device, by energy counter: above it, the counter is not this device's.
POWER_LIMIT_W = {"apple": 250.0, "nvml": 1500.0, "amdsmi": 1500.0, "rapl": 1500.0}


@dataclass(frozen=True)
class Finding:
    status: str  # ok | warn | FAIL
    subject: str  # "PyTorch MPS", "TensorFlow", "GPU"
    check: str  # run, timing, memory, energy, hardware, fallback, install, device
    text: str  # the figure, and what to do when it is not ok


@dataclass(frozen=True)
class Cell:
    """One recorded cell, as the checks read it."""

    framework: str
    device: str  # asked for: cpu | gpu
    outcome: str
    reason: str
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def backend(self) -> str:
        return self.tags.get("trainbench.backend", self.device)

    @property
    def subject(self) -> str:
        return f"{title(self.framework)} {BACKENDS.get(self.backend, self.backend)}"

    @classmethod
    def of(cls, run: Any) -> Cell:
        tags = dict(run.data.tags)
        return cls(
            framework=tags.get("trainbench.framework", "?"),
            device=tags.get("trainbench.device", "?"),
            outcome=tags.get("trainbench.outcome", "?"),
            reason=tags.get("trainbench.reason", ""),
            metrics=dict(run.data.metrics),
            tags=tags,
        )


def check_run(cell: Cell, log: str = "", gpu_vendor: str | None = None) -> Finding:
    """Whether the cell finished; a missing device is a warning with what to install."""
    if cell.outcome == "finished":
        rate = cell.metrics.get("samples_per_s")
        version = cell.tags.get("trainbench.framework_version", "")
        return Finding(
            "ok",
            cell.subject,
            "run",
            f"finished on {cell.tags.get('hw.label', '?')}"
            + (f": {rate:,.0f} samples/s" if rate else "")
            + (f" ({cell.framework} {version})" if version else ""),
        )
    if cell.outcome == "unavailable":
        config = frameworks().get(cell.framework)
        hint = (facts(config).gpu_install.get(gpu_vendor or "") if config else None) or (
            f"install a build of {cell.framework} for this GPU"
        )
        return Finding("warn", cell.subject, "run", f"no {cell.device.upper()} for it here ({cell.reason}): {hint}")
    where = f"; its output: {log}" if log else ""
    return Finding("FAIL", cell.subject, "run", f"{cell.outcome}: {cell.reason or 'no reason recorded'}{where}")


def check_timing(metrics: Mapping[str, float], tags: Mapping[str, str]) -> Finding:
    """Whether a compute-bound cell's per-step figures (task.check_sync) agree, each the fastest of its
    interleaved rounds: other work on the machine only ever slows a round, and on a busy two-core machine the
    medians of a few short rounds drift apart by more than TIMING_FACTOR.

    Two-sided: a block of 2N steps and N steps synchronized one by one take, per step, what a block of N does,
    within TIMING_FACTOR. One-sided, on the block of N (a synchronize that does not wait makes it the queueing
    alone): no faster than the device's own events say a step takes (divided by TIMING_FACTOR), nor than
    PEAK_FACTOR x the device's peak."""
    subject = _subject(tags)
    fastest = metrics.get("sync_check_fastest_block_step_ms")
    if not fastest or fastest <= 0:
        return Finding("FAIL", subject, "timing", "no sync_check figures recorded: the cell did not run the check")
    paired = {
        "2N": metrics.get("sync_check_fastest_double_block_step_ms"),
        "synced": metrics.get("sync_check_fastest_synchronized_step_ms"),
    }
    ratios = {name: value / fastest for name, value in paired.items() if value}
    problems = [f"{name} x{r:.2f}" for name, r in ratios.items() if not 1 / TIMING_FACTOR <= r <= TIMING_FACTOR]
    text = (
        f"fastest rounds: N-block {fastest:.3g} ms/step; "
        + ", ".join(f"{name} x{r:.2f}" for name, r in ratios.items())
        + f" (allowed x{1 / TIMING_FACTOR:.2f}-{TIMING_FACTOR:g})"
    )
    bounds = []
    events = metrics.get("step_time_ms_mean")
    if events and "events between steps" in tags.get("trainbench.step_time_source", ""):  # the device's own clock
        bounds.append(f"events x{events / fastest:.2f} of it (max x{TIMING_FACTOR:g})")
        if events / fastest > TIMING_FACTOR:
            problems.append("faster than the device's events")
    mfu, timed = metrics.get("mfu"), metrics.get("sync_check_timed_block_step_ms")
    if mfu and timed:  # the fastest block's FLOP rate as a fraction of the device's peak
        implied = mfu * timed / fastest
        bounds.append(f"{implied:.0%} of peak (max {PEAK_FACTOR:.0%})")
        if implied > PEAK_FACTOR:
            problems.append("faster than the device's peak")
    if bounds:
        text += "; N-block: " + ", ".join(bounds)
    if any(problem.startswith("faster") for problem in problems):
        return Finding(
            "FAIL",
            subject,
            "timing",
            f"{text}: {' and '.join(p for p in problems if p.startswith('faster'))}, so the clock stops before the "
            "device is done (its synchronize does not wait): do not trust these figures; report it with the export",
        )
    if problems:
        return Finding(
            "FAIL",
            subject,
            "timing",
            f"{text}: {', '.join(problems)} out of bounds: a synchronize that does not wait (a block times the "
            "queueing, not the work), or a busy machine: run it again with nothing else running",
        )
    return Finding("ok", subject, "timing", text)


def check_memory(metrics: Mapping[str, float], tags: Mapping[str, str]) -> Finding:
    """Peak memory recorded, at least the fp32 weights, at most what the machine has."""
    subject = _subject(tags)
    host, device = metrics.get("peak_host_memory_mb"), metrics.get("peak_device_memory_mb")
    weights = metrics.get("num_parameters", 0.0) * 4 / 2**20
    on_gpu = tags.get("trainbench.backend", "cpu") != "cpu"
    source = tags.get("memory.source")
    text = (
        f"host peak {_mb(host)}"
        + (f", device peak {_mb(device)}" if on_gpu else "")
        + (f" ({source})" if source else "")
        + f"; weights {_mb(weights)}"
    )
    machine_mb = _number(tags.get("hw.memory_gb")) * 1024
    if not host or host <= 0:
        return Finding("FAIL", subject, "memory", f"{text}: no peak host memory recorded; report it with the export")
    if machine_mb and host > machine_mb:
        return Finding("FAIL", subject, "memory", f"{text}: more than the machine's {_mb(machine_mb)}: a wrong unit")
    if not on_gpu and host < weights:
        return Finding("FAIL", subject, "memory", f"{text}: less than the weights it holds: not this process's")
    if on_gpu:
        if device is None:
            return Finding("warn", subject, "memory", f"{text}: this framework reports no device memory here")
        limit = _number(tags.get("hw.gpu_memory_gb")) * 1024 or machine_mb  # Apple: unified memory
        if device < weights:
            return Finding("FAIL", subject, "memory", f"{text}: device peak below the weights: not this cell's")
        if limit and device > limit:
            return Finding("FAIL", subject, "memory", f"{text}: more than the device's {_mb(limit)}: a wrong unit")
    return Finding("ok", subject, "memory", text)


def check_energy(metrics: Mapping[str, float], tags: Mapping[str, str]) -> Finding:
    """A real counter with a plausible power, or none and why (a pass on a CPU outside a Mac)."""
    subject = _subject(tags)
    source, reason = tags.get("energy.source", "none"), tags.get("energy.reason", "")
    backend = tags.get("trainbench.backend", "cpu")
    apple = tags.get("hw.gpu_vendor") == "apple" or bool(tags.get("hw.chip"))
    if source == "none":
        if backend == "cpu" and not apple:
            return Finding("ok", subject, "energy", f"not measured: {reason or 'no counter'}")
        advice = "; pip install 'zeus[apple]'" if apple and "zeus" not in reason else ""
        return Finding("warn", subject, "energy", f"not measured: {reason or 'no counter'}{advice}")
    power, joules = metrics.get("avg_power_w"), metrics.get("energy_j")
    if power is None or joules is None:
        return Finding("warn", subject, "energy", f"{source} counter, no figure: {reason or 'none recorded'}")
    devices = max(1.0, metrics.get("num_devices", 1.0))
    limit = POWER_LIMIT_W.get(source, 1500.0) * devices
    text = f"{source}: {power:.1f} W average, {joules:.1f} J over the timed blocks"
    if source == "apple":
        part = "gpu_power" if backend in ("mps", "metal", "gpu") else "cpu_power"
        text += f" (the scope of `sudo powermetrics --samplers {part}`: compare while a cell runs)"
    if not 0 < power <= limit:
        return Finding("FAIL", subject, "energy", f"{text}: outside 0-{limit:g} W, not this device's counter")
    return Finding("ok", subject, "energy", text)


def check_hardware(tags: Mapping[str, str]) -> Finding:
    """hw.label names the machine with nothing unknown; a GPU backend's vendor is the GPU's."""
    subject = _subject(tags)
    label, backend, vendor = tags.get("hw.label", ""), tags.get("trainbench.backend", "cpu"), tags.get("hw.gpu_vendor")
    on_gpu = backend != "cpu"
    text = f"hw.label {label!r}" + (f", hw.gpu_vendor {vendor}" if vendor and on_gpu else "") + f", backend {backend}"
    expected = {"mps": ("apple",), "metal": ("apple",), "cuda": ("nvidia", "amd"), "rocm": ("amd",), "gpu": ()}
    if not label or "unknown" in label:
        return Finding(
            "FAIL", subject, "hardware", f"{text}: the machine is not fully named; report it with the export"
        )
    if tags.get("hw.rosetta") == "true":
        return Finding("FAIL", subject, "hardware", f"{text}: Python runs under Rosetta (x86_64): use an arm64 Python")
    if backend in expected and expected[backend] and vendor not in expected[backend]:
        return Finding("FAIL", subject, "hardware", f"{text}: a {backend} backend on a {vendor or 'unnamed'} GPU")
    if backend == "cpu" and "GPU" in label:
        return Finding("FAIL", subject, "hardware", f"{text}: a CPU cell labelled as a GPU")
    if tags.get("hw.power_source") == "battery":
        return Finding("warn", subject, "hardware", f"{text}; on battery: plug in, the chip may be slowed")
    if tags.get("hw.low_power_mode") == "true":
        return Finding("warn", subject, "hardware", f"{text}; Low Power Mode is on: turn it off to measure")
    return Finding("ok", subject, "hardware", text)


def check_fallback(tags: Mapping[str, str]) -> Finding | None:
    """The ops MPS ran on the CPU instead (tag trainbench.mps_fallback_ops), when the cell recorded them."""
    recorded = tags.get("trainbench.mps_fallback_ops")
    if recorded is None:
        return None
    ops = _op_list(recorded)
    if not ops:
        return Finding("ok", _subject(tags), "fallback", "no op fell back to the CPU")
    return Finding(
        "warn",
        _subject(tags),
        "fallback",
        f"{len(ops)} op(s) ran on the CPU, not MPS: {', '.join(ops)}; each costs a round trip, so figures "
        "of models using them are PyTorch's MPS coverage as much as the chip",
    )


def check_cell(cell: Cell, log: str = "", gpu_vendor: str | None = None) -> list[Finding]:
    """Every check that applies to one recorded cell, in the order the verdict prints them."""
    findings = [check_run(cell, log, gpu_vendor)]
    if cell.outcome == "unavailable":
        return findings
    if "sync_check_block_step_ms" in cell.metrics:  # logged early: a cell stopped later still has them
        timing = check_timing(cell.metrics, cell.tags)
        if cell.outcome != "finished" and timing.status == "ok":  # no timed blocks, events or peak to compare
            timing = Finding("warn", timing.subject, timing.check, f"{timing.text}; the rest unchecked (not finished)")
        findings.append(timing)
    if cell.outcome != "finished":
        return findings
    findings += [
        check_memory(cell.metrics, cell.tags),
        check_energy(cell.metrics, cell.tags),
        check_hardware(cell.tags),
    ]
    fallback = check_fallback(cell.tags)
    return findings + ([fallback] if fallback else [])


def _subject(tags: Mapping[str, str]) -> str:
    framework, backend = tags.get("trainbench.framework", "?"), tags.get("trainbench.backend", "?")
    return f"{title(framework)} {BACKENDS.get(backend, backend)}"


def _op_list(recorded: str) -> list[str]:
    try:
        value = json.loads(recorded)
    except ValueError:
        value = re.split(r"[,\s]+", recorded)
    if isinstance(value, dict):
        value = list(value)
    return [str(op).strip() for op in (value if isinstance(value, list) else [value]) if str(op).strip()]


def _mb(value: float | None) -> str:
    if value is None:
        return "not recorded"
    return f"{value / 1024:.1f} GB" if value >= 10240 else f"{value:.0f} MB" if value >= 10 else f"{value:.1f} MB"


def _number(text: str | None) -> float:
    try:
        value = float(text or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0
