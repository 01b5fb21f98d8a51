"""The tasks a cell runs, written once for every framework against the adapter interface."""

from __future__ import annotations

import resource
import sys
from typing import Any

from trainbench import data as datasets
from trainbench import hardware, progress
from trainbench.frameworks.base import EpochStats, Framework
from trainbench.timing import Timer, time_steps
from trainbench.tracking import RunLogger, run_name


def run(framework: Framework, cfg: dict[str, Any], log: RunLogger) -> dict[str, Any]:
    """Bind the device, load data, build the model, run the task; log everything; return the summary."""
    backend = framework.select_device(cfg["device"]["name"])
    host = hardware.host_tags()
    log.tags({
        "mlflow.runName": run_name(cfg, backend),
        "trainbench.backend": backend,
        "hw.label": hardware.label(backend, host),
        "trainbench.framework_version": _framework_version(framework),
        **framework.versions(),
        **framework.flags(),
    })
    data = datasets.load(_data_config(cfg), cfg["seed"])
    model = framework.build_model(cfg["model"], data)
    log.metrics({"num_parameters": framework.num_parameters(model)})
    if cfg["task"]["name"] == "train":
        summary = train(framework, model, data, cfg, log)
    else:
        summary = benchmark(framework, model, data, cfg)
    summary["peak_device_memory_mb"] = framework.peak_device_memory_mb()
    summary["peak_host_memory_mb"] = peak_host_memory_mb()
    log.metrics(summary)
    return {"backend": backend, "samples_per_s": summary.get("samples_per_s")}


def train(framework: Framework, model: Any, data: datasets.Dataset, cfg: dict[str, Any], log: RunLogger) -> dict[str, Any]:
    epochs: list[EpochStats] = []

    def on_epoch_end(stats: EpochStats) -> None:
        epochs.append(stats)
        log.metrics(stats.metrics(), step=stats.epoch)
        val = "" if stats.val_accuracy is None else f", val_accuracy {stats.val_accuracy:.3f}"
        progress.line(f"epoch {stats.epoch}/{cfg['epochs']}: {stats.seconds:.2f} s, "
                      f"{stats.samples / stats.seconds:,.0f} samples/s, train_loss {stats.train_loss:.4f}{val}")

    with Timer(framework.synchronize) as total:
        framework.fit(model, data, cfg, on_epoch_end)
    summary: dict[str, Any] = {"total_time_s": total.seconds}
    if epochs:
        # The first epoch pays for allocation, autotuning and compilation: report it on its own and
        # keep it out of the steady-state throughput whenever a later epoch exists.
        steady = epochs[1:] or epochs
        summary["first_epoch_time_s"] = epochs[0].seconds
        summary["samples_per_s"] = sum(e.samples for e in steady) / sum(e.seconds for e in steady)
    return summary


def benchmark(framework: Framework, model: Any, data: datasets.Dataset, cfg: dict[str, Any]) -> dict[str, Any]:
    task = cfg["task"]
    step = framework.resident_train_step(model, data, cfg)
    progress.line(f"benchmark: {task['warmup_steps']} warm-up steps, then {task['steps']} timed steps")
    warmup_s, stats = time_steps(step, framework.synchronize, task["warmup_steps"], task["steps"])
    batch = min(cfg["batch_size"], len(data.train))
    progress.line(f"benchmark: {stats.mean_ms:.2f} ms/step (p90 {stats.p90_ms:.2f}), "
                  f"{batch * stats.steps / stats.total_s:,.0f} samples/s")
    return {
        "warmup_time_s": warmup_s,
        "total_time_s": warmup_s + stats.total_s,
        "samples_per_s": batch * stats.steps / stats.total_s,
        **stats.metrics(),
    }


def peak_host_memory_mb() -> float:
    """Peak resident memory of this cell's process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _data_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The benchmark needs one batch: generate no more synthetic data than that."""
    data = dict(cfg["data"])
    if cfg["task"]["name"] == "benchmark" and data["name"].startswith("synthetic"):
        data["num_samples"], data["num_val_samples"] = cfg["batch_size"], 1
    return data


def _framework_version(framework: Framework) -> str:
    versions = framework.versions()
    return next(iter(versions.values()), "")
