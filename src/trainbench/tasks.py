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
    if cfg["task"]["name"] == "matmul":
        summary = matmul(framework, cfg, log, backend)
    else:
        data = datasets.load(_data_config(cfg), cfg["seed"])
        model = framework.build_model(cfg["model"], data)
        log.metrics({"num_parameters": framework.num_parameters(model)})
        if cfg["task"]["name"] == "train":
            summary = train(framework, model, data, cfg, log)
        else:
            summary = benchmark(framework, model, data, cfg)
        if data.kind == "text" and summary.get("samples_per_s"):
            # Every sequence is seq_len tokens long as the model sees it (padding included).
            summary["tokens_per_s"] = summary["samples_per_s"] * data.seq_len
    summary["peak_device_memory_mb"] = framework.peak_device_memory_mb()
    summary["peak_host_memory_mb"] = peak_host_memory_mb()
    log.metrics(summary)
    return {"backend": backend, "samples_per_s": summary.get("samples_per_s"), "peak_tflops": summary.get("peak_tflops")}


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


# Square products up to 16384 (the published GEMM sweeps); on a CPU 4096 already takes seconds per product.
# The vector product 1 x n @ n x 1 goes from 10^2 to 10^8 elements, as in the published CPU-vs-GPU chart.
DEFAULT_SIZES = {"square": [2**k for k in range(7, 15)], "vector": [10**k for k in range(2, 9)]}
CPU_SQUARE_LIMIT = 4096


def matmul(framework: Framework, cfg: dict[str, Any], log: RunLogger, backend: str) -> dict[str, Any]:
    """Achievable TFLOPS per size: median of synchronized repeats, logged with step = n."""
    task = cfg["task"]
    shape = task["shape"]
    sizes = task["sizes"] or [n for n in DEFAULT_SIZES[shape]
                              if shape == "vector" or backend != "cpu" or n <= CPU_SQUARE_LIMIT]
    element_bytes = framework.matmul_element_bytes()
    points: list[tuple[int, float]] = []
    with Timer(framework.synchronize) as total:
        for n in sizes:
            multiply = framework.matmul_step(n, shape)
            _, stats = time_steps(multiply, framework.synchronize, task["warmup_steps"], task["steps"])
            seconds = stats.p50_ms / 1000.0
            flops = 2.0 * n**3 if shape == "square" else 2.0 * n
            metrics = {"tflops": flops / seconds / 1e12, "matmul_time_ms": stats.p50_ms}
            if shape == "vector":  # memory-bound: what matters is how fast both operands stream in
                metrics["gbytes_per_s"] = (2 * n + 1) * element_bytes / seconds / 1e9
            log.metrics(metrics, step=n)
            points.append((n, metrics["tflops"]))
            rate = f"{metrics['gbytes_per_s']:.2f} GB/s" if shape == "vector" else f"{metrics['tflops']:.3f} TFLOPS"
            progress.line(f"matmul {shape} n={n}: {stats.p50_ms:.3f} ms, {rate}")
    log.figure(_matmul_figure(points, cfg, backend), "matmul.png")
    return {"peak_tflops": max(t for _, t in points), "total_time_s": total.seconds}


def _matmul_figure(points: list[tuple[int, float]], cfg: dict[str, Any], backend: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot([n for n, _ in points], [t for _, t in points], marker="o")
    axes.set_xscale("log")
    axes.set_xlabel("n" + (" (n x n @ n x n)" if cfg["task"]["shape"] == "square" else " (1 x n @ n x 1)"))
    axes.set_ylabel("TFLOPS (median of repeats)")
    axes.set_title(f"{cfg['framework']['name']} {cfg['precision']['name']} matmul on {backend}")
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    return figure


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
