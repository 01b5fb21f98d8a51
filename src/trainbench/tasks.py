"""The tasks a cell runs, written once for every framework against the adapter interface."""

from __future__ import annotations

import resource
import sys
from typing import Any

from trainbench import data as datasets
from trainbench import hardware, peaks, progress
from trainbench.energy import EnergyMeter
from trainbench.frameworks.base import EpochStats, Framework
from trainbench.timing import StepStats, Timer, drift_pct, mean_ci95, time_steps, timed_steps, warm_up
from trainbench.tracking import RunLogger, run_name


def run(framework: Framework, cfg: dict[str, Any], log: RunLogger) -> dict[str, Any]:
    """Bind the device, load data, build the model, run the task; log everything; return the summary."""
    backend = framework.select_device(cfg["device"]["name"])
    host = hardware.host_tags()  # probed again here: the parent's may be a sweep old (power source)
    label = hardware.label(backend, host)
    log.tags({
        **host,
        "mlflow.runName": run_name(cfg, backend),
        "trainbench.backend": backend,
        "hw.label": label,
        "trainbench.framework_version": _framework_version(framework),
        **framework.versions(),
        **framework.flags(),
    })
    meter = EnergyMeter(backend, synchronize=framework.synchronize)
    if cfg["task"]["name"] == "matmul":
        summary = matmul(framework, cfg, log, backend)
        if cfg["task"]["shape"] == "square":  # the vector product is memory-bound: no FLOPs peak applies
            summary.update(utilisation(summary["peak_tflops"], label, cfg, host, log))
            summary.pop("achieved_tflops", None)  # that is peak_tflops here
    else:
        data = datasets.load(_data_config(cfg), cfg["seed"])
        model = framework.build_model(cfg["model"], data)
        flops_per_sample = framework.flops_per_sample(model, data, cfg)
        log.metrics({"num_parameters": framework.num_parameters(model), "flops_per_sample": flops_per_sample})
        if cfg["task"]["name"] == "train":
            summary = train(framework, model, data, cfg, log, meter)
        else:
            summary = benchmark(framework, model, data, cfg, log, meter)
        if data.kind == "text" and summary.get("samples_per_s"):
            # Every sequence is seq_len tokens long as the model sees it (padding included).
            summary["tokens_per_s"] = summary["samples_per_s"] * data.seq_len
        if flops_per_sample and summary.get("samples_per_s"):
            summary.update(utilisation(flops_per_sample * summary["samples_per_s"] / 1e12, label, cfg, host, log))
    log.tags(meter.tags())
    summary["peak_device_memory_mb"] = framework.peak_device_memory_mb()
    summary["peak_host_memory_mb"] = peak_host_memory_mb()
    log.metrics(summary)
    return {"backend": backend, "samples_per_s": summary.get("samples_per_s"), "peak_tflops": summary.get("peak_tflops")}


def utilisation(achieved_tflops: float, label: str, cfg: dict[str, Any], host: dict[str, str],
                log: RunLogger) -> dict[str, float]:
    """achieved_tflops, and mfu against the device's published dense peak for the cell's precision."""
    dtype = cfg["precision"]["name"]
    if label.endswith(" CPU"):
        peak, source = peaks.cpu_peak_tflops(host, dtype)
    else:
        cores = host.get("hw.gpu_cores")
        peak = peaks.peak_tflops(label, dtype, int(cores) if cores and cores.isdigit() else None)
        source = "published dense peak" if peak else None
    if not peak:
        log.tags({"mfu.reason": peaks.why_no_peak(label, dtype) or f"no peak known for {label} at {dtype}"})
        return {"achieved_tflops": achieved_tflops}
    log.tags({"mfu.peak_source": source})
    return {"achieved_tflops": achieved_tflops, "device_peak_tflops": peak, "mfu": achieved_tflops / peak}


def train(framework: Framework, model: Any, data: datasets.Dataset, cfg: dict[str, Any], log: RunLogger,
          meter: EnergyMeter) -> dict[str, Any]:
    epochs: list[EpochStats] = []

    def on_epoch_end(stats: EpochStats) -> None:
        epochs.append(stats)
        log.metrics(stats.metrics(), step=stats.epoch)
        val = "" if stats.val_accuracy is None else f", val_accuracy {stats.val_accuracy:.3f}"
        progress.line(f"epoch {stats.epoch}/{cfg['epochs']}: {stats.seconds:.2f} s, "
                      f"{stats.samples / stats.seconds:,.0f} samples/s, train_loss {stats.train_loss:.4f}{val}")

    # Energy covers all epochs, validation included: the counters cannot be paused per batch.
    with meter, Timer(framework.synchronize) as total:
        framework.fit(model, data, cfg, on_epoch_end)
    summary: dict[str, Any] = {"total_time_s": total.seconds}
    if epochs:
        # The first epoch pays for allocation, autotuning and compilation: report it on its own and
        # keep it out of the steady-state throughput whenever a later epoch exists.
        steady = epochs[1:] or epochs
        summary["first_epoch_time_s"] = epochs[0].seconds
        summary["samples_per_s"] = sum(e.samples for e in steady) / sum(e.seconds for e in steady)
        summary.update(meter.metrics(sum(e.samples for e in epochs)))
    return summary


def benchmark(framework: Framework, model: Any, data: datasets.Dataset, cfg: dict[str, Any], log: RunLogger,
              meter: EnergyMeter) -> dict[str, Any]:
    """Warm up (a fixed count, or until step times settle), then `repeats` blocks of timed steps."""
    task = cfg["task"]
    sync = framework.synchronize
    step = framework.resident_train_step(model, data, cfg)
    batch = min(cfg["batch_size"], len(data.train))
    warmup_s, warmup_count = warm_up(step, sync, task["warmup_steps"], task["settle_cv_pct"], task["max_warmup_steps"])
    progress.line(f"benchmark: {warmup_count} warm-up steps ({warmup_s:.2f} s), then "
                  f"{task['repeats']} x {task['steps']} timed steps")
    durations: list[float] = []
    rates: list[float] = []
    with meter:  # only the timed steps: warm-up stays out of the energy figure
        for _ in range(task["repeats"]):
            block = timed_steps(step, sync, task["steps"])
            durations += block
            rates.append(batch * len(block) / sum(block))
    stats = StepStats.of(durations)
    samples_per_s, ci95 = mean_ci95(rates)
    drift = drift_pct(durations)
    if drift is not None:
        log.tags({"trainbench.drift": str(drift > task["drift_threshold_pct"]).lower()})
    progress.line(f"benchmark: {stats.mean_ms:.2f} ms/step (p90 {stats.p90_ms:.2f}), {samples_per_s:,.0f} samples/s"
                  + (f" +/- {ci95:,.0f} (95% CI)" if ci95 is not None else ""))
    return {
        "warmup_time_s": warmup_s,
        "warmup_steps_run": warmup_count,
        "total_time_s": warmup_s + stats.total_s,
        "samples_per_s": samples_per_s,
        "samples_per_s_ci95": ci95,
        "drift_pct": drift,
        **stats.metrics(),
        **meter.metrics(batch * len(durations)),
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
    # peak_tflops: the best this device reached here (device_peak_tflops is the datasheet's figure).
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
