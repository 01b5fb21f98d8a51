"""`trainbench doctor`: does trainbench measure this machine right? A self-check in a minute or so.

It runs tiny benchmark cells of every installed framework through the real entry point (`python src/run.py -m`,
one process per cell), on the GPU where the machine has one (Apple: MPS, Metal, MLX's GPU; NVIDIA: CUDA) and
PyTorch on the CPU as well, into a store of its own (outputs/doctor/<time>/mlflow.db: the user's runs stay
as they were). Then it reads back what the cells recorded and prints one line per check:

  run       the cell finished (a framework not installed or a device missing is a line, not a failure)
  timing    the device's synchronize waits for the work, not only for its queueing (task.check_sync): per
            step and in the fastest of interleaved rounds, a block of 2N steps and N steps synchronized one by
            one take what a block of N does, within TIMING_FACTOR; and no block of N is faster than the
            device's own events say (PyTorch on CUDA and MPS) or than PEAK_FACTOR x the device's peak
  memory    peak host (and device) memory recorded, at least the model's weights, at most the machine's memory
  energy    a real counter read a plausible power, or no counter with the reason (a CPU on Linux: a note)
  hardware  hw.label names the machine with nothing unknown, and the GPU's vendor is the backend's
  fallback  (PyTorch on MPS) the ops that fell back to the CPU, when the cell recorded them

and writes the runs as a `trainbench export` file to share (results/contributed/README.md). Exit status: 0
when nothing FAILs, 1 otherwise, 2 for bad arguments. The checks are pure functions of a run's metrics and
tags, so tests feed them the figures of hardware that is not here.

Light on purpose: this process imports no deep-learning framework (the cells do), and MLflow only to read the
cells back and export them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from trainbench.config.schema import DoctorFacts, FrameworkConfig

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CTRL_C = 0, 1, 2, 130

# Per-step figures of one compute-bound cell that must agree: a busy two-core CI machine moves the fastest rounds
# by up to ~30% (their medians by 40% and more), while a synchronize that returns before the device is done makes
# a short block several times faster than the device's real pace (only queueing is timed).
TIMING_FACTOR = 1.5
# No figure may imply more than this times the device's published (or, for a CPU, estimated) dense peak.
PEAK_FACTOR = 1.5
# Highest plausible average power per device, by energy counter: above it, the counter is not this device's.
POWER_LIMIT_W = {"apple": 250.0, "nvml": 1500.0, "amdsmi": 1500.0, "rapl": 1500.0}

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


# Every cell: timed training steps (task=benchmark) of a small MLP on one resident batch, with the timing
# check's extra figures; blocks paced to last 1.2 s together (an energy counter needs 1 s). Nine rounds of the
# check (16 steps each): the more rounds, the likelier each figure gets one that no other work slowed.
COMMON = [
    "task=benchmark",
    "model=mlp",
    "data=synthetic",
    "precision=fp32",
    "task.warmup_steps=10",
    "task.steps=4",
    "task.repeats=9",
    "task.min_time_s=1.2",
    "task.check_sync=true",
    "tracking.system_metrics_interval_s=0",
    "cell.timeout_s=150",
]
# The cell per device. It must be compute-bound: a block that times only the queueing must come out clearly
# faster than the device's events or its peak. On a GPU, the seed MLP with a batch that keeps the GPU busy well
# beyond the ~1 ms PyTorch takes to launch a step: at batch 512 an H100 needed 1.1 ms, and a synchronize that
# waited for nothing still read within x1.35 of its events; 4096 keeps it busy ~8 ms. Apple GPUs are slower
# (an M1's 2.6 TFLOPS: some 30 ms for the 37 GFLOP of a step at 512; an M2 Ultra's 27: some 3 ms).
# On a CPU a narrow MLP at batch 16: a few ms a step in PyTorch, ~50 ms in MLX's CPU build on Linux. On Linux
# the CPU cells keep to one core: two threads on two busy cores wait on each other at every op, and their step
# times then swing 5-40x (a CI machine running other work), which says nothing about the timing's soundness.
GPU_BATCH = {"apple": 512}  # other vendors: 4096
CPU_CELL = ["model.hidden_sizes=[256]", "batch_size=16", *(["cell.cpus=1"] if sys.platform == "linux" else [])]


@dataclass(frozen=True)
class Finding:
    status: str  # ok | warn | FAIL
    subject: str  # "PyTorch MPS", "TensorFlow", "GPU"
    check: str  # run, timing, memory, energy, hardware, fallback, install, device
    text: str  # the figure, and what to do when it is not ok


@dataclass(frozen=True)
class Sweep:
    device: str  # cpu | gpu
    frameworks: list[str]
    gpu_vendor: str = ""  # apple | nvidia | amd: what the GPU cell's batch is sized for

    def overrides(self) -> list[str]:
        cell = CPU_CELL if self.device == "cpu" else [f"batch_size={GPU_BATCH.get(self.gpu_vendor, 4096)}"]
        return [*COMMON, *cell, f"framework={','.join(self.frameworks)}", f"device={self.device}"]


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


# ------------------------------------------------------------------------------------------------ checks


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


# -------------------------------------------------------------------------------------------------- plan


def plan(selected: Sequence[str], installed: set[str], host: Mapping[str, str]) -> tuple[list[Sweep], list[Finding]]:
    """The sweeps to run and the lines for what is not run: frameworks not installed, no GPU. On a machine
    with a GPU, every framework runs there and PyTorch on the CPU too (on a Mac, JAX, which trainbench runs on
    CUDA GPUs only, and TensorFlow without tensorflow-metal: on the CPU only); without one, all on the CPU."""
    known = frameworks()
    notes = [
        Finding("warn", title(name), "install", f"not installed, not checked: {facts(known[name]).install}")
        for name in selected
        if name not in installed
    ]
    runnable = [name for name in selected if name in installed]
    vendor = host.get("hw.gpu_vendor")
    if not vendor:
        notes.append(Finding("ok", "GPU", "device", "none on this machine (no NVIDIA, AMD or Apple GPU): CPU cells"))
        return ([Sweep("cpu", runnable)] if runnable else []), notes
    cpu_only = set()
    for name in runnable:
        why = known[name].cpu_only_on(vendor)
        if why:
            cpu_only.add(name)
            notes.append(Finding(why[0], title(name), "device", why[1]))
    gpu = [name for name in runnable if name not in cpu_only]
    cpu = [name for name in runnable if facts(known[name]).also_on_cpu or name in cpu_only]
    return [s for s in (Sweep("gpu", gpu, vendor), Sweep("cpu", cpu)) if s.frameworks], notes


def installed_frameworks(names: Sequence[str]) -> set[str]:
    """Which frameworks this Python can import, found without importing any."""
    known = frameworks()
    return {name for name in names if importlib.util.find_spec(facts(known[name]).module) is not None}


# --------------------------------------------------------------------------------------------- command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        print(f"trainbench doctor: {message} (see trainbench doctor --help)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_INPUT)


def main(argv: Sequence[str]) -> int:
    """`trainbench doctor [--frameworks pytorch,tensorflow,mlx] [--out FOLDER]`."""
    parser = _Parser(
        prog="trainbench doctor",
        description="Run tiny cells of every installed framework and check that timing, memory, energy and "
        "the machine's name read sensibly; write the runs to a file to share.",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(default_frameworks()),
        help=f"comma-separated, from {', '.join(frameworks())} (default: {','.join(default_frameworks())})",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="a new folder for the store, logs and export file (default: outputs/doctor/<date-time>)",
    )
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    selected = [name.strip() for name in args.frameworks.split(",") if name.strip()]
    unknown = [name for name in selected if name not in frameworks()]
    if unknown or not selected:
        return _bad(
            f"--frameworks {args.frameworks!r}: choose from {', '.join(frameworks())}, e.g. --frameworks pytorch,mlx"
        )
    out = Path(args.out) if args.out else Path("outputs") / "doctor" / datetime.now().strftime("%Y-%m-%d-%H%M%S")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return _bad(f"--out {args.out}: already holds files; name a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return _bad(f"--out {out}: cannot create it ({error.strerror or error})")
    try:
        return _doctor(list(dict.fromkeys(selected)), out.resolve())
    except KeyboardInterrupt:
        print("trainbench doctor: stopped", file=sys.stderr, flush=True)
        return EXIT_CTRL_C


def _doctor(selected: list[str], out: Path) -> int:
    from trainbench import hardware

    began = time.perf_counter()
    host = hardware.host_tags()
    sweeps, notes = plan(selected, installed_frameworks(selected), host)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    print(f"trainbench doctor: checking {_machine(host)}; results in {_shown(out)}/", flush=True)
    logs: dict[str, str] = {}
    for sweep in sweeps:
        log = out / f"{sweep.device}-cells.log"
        logs[sweep.device] = _shown(log)
        names = ", ".join(title(name) for name in sweep.frameworks)
        print(f"  running {sweep.device.upper()} cells: {names} ...", end="", flush=True)
        started = time.perf_counter()
        status = _run_sweep(sweep, out, uri, log)
        print(f" {time.perf_counter() - started:.0f} s", flush=True)
        if status == EXIT_CTRL_C:
            raise KeyboardInterrupt
    cells = _recorded_cells(uri) if sweeps else []
    findings = list(notes)
    for cell in sorted(cells, key=_order):
        findings += check_cell(cell, logs.get(cell.device, ""), host.get("hw.gpu_vendor"))
    ran = {(c.framework, c.device) for c in cells}
    for sweep in sweeps:  # a sweep that stopped before recording a cell: the last line of its log says why
        why = _last_line(out / f"{sweep.device}-cells.log")
        for name in sweep.frameworks:
            if (name, sweep.device) not in ran:
                subject = f"{title(name)} {sweep.device.upper()}"
                findings.append(Finding("FAIL", subject, "run", f"no run recorded ({why}); see {logs[sweep.device]}"))
    if not sweeps:
        findings.append(
            Finding(
                "FAIL",
                "trainbench",
                "run",
                f"no framework installed to check: {facts(frameworks()['pytorch']).install}",
            )
        )
    exported = _export(uri, out, host) if cells else None
    _print_verdict(findings, exported, time.perf_counter() - began)
    return EXIT_FAILED if any(f.status == "FAIL" for f in findings) else EXIT_OK


def _run_sweep(sweep: Sweep, out: Path, uri: str, log: Path) -> int:
    """The cells through the Python API (the command line's own process), its output into `log`; its exit status.
    Its comparison page and Hydra's multirun/ land beside its store."""
    from trainbench import api

    with log.open("w") as output:
        try:
            return api.run(sweep.overrides(), tracking_uri=uri, output=output, cwd=out).exit_status
        except api.BadInput:  # its line is in the log, whose last line the verdict quotes
            return EXIT_BAD_INPUT
        except api.SweepError:
            return EXIT_FAILED
        except KeyboardInterrupt:  # the sweep got the Ctrl-C too, stopped its cells and closed their runs
            return EXIT_CTRL_C


def _recorded_cells(uri: str) -> list[Cell]:
    from trainbench import tracking
    from trainbench.runs import search_all

    client = tracking.open_store(uri)
    experiment = client.get_experiment_by_name("trainbench")
    if experiment is None:
        return []
    runs = search_all(client, [experiment.experiment_id], "tags.`trainbench.kind` = 'cell'")
    return [Cell.of(run) for run in runs]


def _export(uri: str, out: Path, host: Mapping[str, str]) -> tuple[Path, int] | None:
    """The store's runs as a `trainbench export` file, read back to check it: (path, runs)."""
    from trainbench import sharing, tracking

    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # else a progress bar per run's artifact
    client = tracking.open_store(uri)
    experiment = client.get_experiment_by_name("trainbench")
    runs, _ = sharing.export_runs(client, experiment.experiment_id)
    path = out / f"{datetime.now():%Y-%m-%d}-doctor-{_slug(_primary_label(host))}.json"
    sharing.write_export(path, "trainbench", runs)
    return path, len(sharing.load(path).runs)


def _print_verdict(findings: list[Finding], exported: tuple[Path, int] | None, seconds: float) -> None:
    width = max((len(f.subject) for f in findings), default=10)
    print()
    for finding in findings:
        print(f"{finding.status:5} {finding.subject:{width}}  {finding.check:8}  {finding.text}")
    print()
    print(
        f"Tolerances: per-step timing figures agree within x{TIMING_FACTOR:g}; none faster than "
        f"{PEAK_FACTOR:g} x the device's peak; power within 0-{POWER_LIMIT_W['apple']:g} W per Apple chip, "
        f"0-{POWER_LIMIT_W['nvml']:g} W per GPU or CPU package."
    )
    if exported:
        path, runs = exported
        print(
            f"Share: {_shown(path)} ({runs} runs; no user, host or absolute path in it). To contribute it, copy "
            "it into results/contributed/ and open a pull request with a line for it in results/contributed/README.md."
        )
    fails, warns = (sum(f.status == s for f in findings) for s in ("FAIL", "warn"))
    verdict = "FAIL" if fails else "ok"
    print(f"Verdict: {verdict} ({fails} FAIL, {warns} warn) in {seconds:.0f} s")


def _order(cell: Cell) -> tuple[int, int]:
    order = list(frameworks())
    framework = order.index(cell.framework) if cell.framework in order else len(order)
    return framework, 0 if cell.device == "gpu" else 1


def _machine(host: Mapping[str, str]) -> str:
    from trainbench import hardware

    cpu = hardware.label("cpu", dict(host))
    return cpu if not host.get("hw.gpu_vendor") else f"{_primary_label(host)} and {cpu}"


def _primary_label(host: Mapping[str, str]) -> str:
    """The GPU's hw.label where there is one, else the CPU's."""
    from trainbench import hardware

    vendor = host.get("hw.gpu_vendor")
    return hardware.label("cpu" if not vendor else "mps" if vendor == "apple" else "cuda", dict(host))


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "it printed nothing"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


def _shown(path: Path) -> str:
    """A path as the user finds it: relative to the working folder when inside it."""
    from trainbench.tracking import private

    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return private(str(path))


def _bad(message: str) -> int:
    print(f"trainbench doctor: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT
