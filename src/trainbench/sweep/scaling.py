"""scaling_efficiency of a data-parallel cell: its samples/s against N times the same cell's on one device.

    scaling_efficiency = samples_per_s(N devices) / (N x samples_per_s(1 device))

A cell over several hosts (device.nodes=N) is measured against N times the same cell on one node
(device.nodes=1, the same device.count per node): what crossing the hosts' interconnect costs.

The 1-device figure comes from the store: the newest finished cell with the config hash this cell has at
device.count=1, on a machine with the same label (trainbench.measure.hardware.label of each run's tags: GPU model and
memory, CPU and its cores), with the same framework version (as sweep.resume matches cells,
trainbench.sweep.resume). In a sweep over device.count=1,2,4,8 the 1-device cell runs
first and the others find it. Without one, trainbench.scaling_reason says what was looked for.

An efficiency is a ratio of two measurements, so it carries both their errors: scaling_efficiency_ci95 is
the 95% half-width from the two runs' samples_per_s_ci95 (relative errors added in quadrature), and where either
run was tagged trainbench.noisy the efficiency is tagged trainbench.scaling_noisy with the runs that were. A
host-bound step on a busy host can measure above 1 that way; the tags say not to quote it.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from trainbench.cell.in_cell import ProcessResult
from trainbench.config import CellConfig, config_hash, replace


def record(client: Any, run_id: str, cell: CellConfig, result: ProcessResult) -> None:
    """Log scaling_efficiency (and the baseline it used) into the cell's run, or the reason there is none.
    Run by the cell's launcher once the cell has finished (it holds the store). A derived figure: a store
    that cannot answer leaves it out, never fails the cell that measured."""
    devices, rate = result.get("num_devices") or 1, result.get("samples_per_s")
    if devices <= 1 or not rate:
        return
    try:
        _record(client, run_id, cell, result, devices, rate)
    except Exception as error:
        from trainbench.store.tracking import private_line

        sys.stderr.write(f"trainbench: no scaling_efficiency: {type(error).__name__}: {private_line(error)}\n")


def _record(client: Any, run_id: str, cell: CellConfig, result: ProcessResult, devices: int, rate: float) -> None:
    from trainbench.store import tracking

    # Across nodes the unit is one node: N nodes against N x the same cell on one node (device.nodes=1).
    nodes = cell.device.nodes
    single_unit = replace(cell, device={"nodes": 1}) if nodes > 1 else replace(cell, device={"count": 1})
    unit, first = ("1-node", "device.nodes=1") if nodes > 1 else ("1-device", "device.count=1")
    devices = nodes if nodes > 1 else devices
    digest = config_hash(single_unit)
    baseline = find_baseline(client, run_id, digest, result["hw_label"], result["framework_version"])
    if baseline is None:
        looked_for = (
            f"trainbench.config_hash={digest}, hw.label={result['hw_label']}, "
            f"framework version {result['framework_version']}"
        )
        reason = f"no finished {unit} run of this cell in the experiment ({looked_for}): run {first} first"
        tracking.set_tags(client, run_id, {"trainbench.scaling_reason": reason})
        return
    single = baseline.data.metrics["samples_per_s"]
    this = client.get_run(run_id)
    value = efficiency(rate, devices, single)
    metrics = {"scaling_efficiency": value, "scaling_baseline_samples_per_s": single}
    half_widths = (this.data.metrics.get("samples_per_s_ci95"), baseline.data.metrics.get("samples_per_s_ci95"))
    if None not in half_widths:
        metrics["scaling_efficiency_ci95"] = efficiency_ci95(value, (rate, single), half_widths)
    tracking.log_metrics(client, run_id, metrics)
    tags = {"trainbench.scaling_baseline_run_id": baseline.info.run_id}
    noisy = [
        f"{which} ({run.data.tags.get('trainbench.noisy_reason', 'noisy')})"
        for which, run in (("this cell", this), (f"the {unit} run", baseline))
        if run.data.tags.get("trainbench.noisy") == "true"
    ]
    if noisy:
        tags["trainbench.scaling_noisy"] = "true"
        tags["trainbench.scaling_noisy_reason"] = "noisy: " + "; ".join(noisy)
    tracking.set_tags(client, run_id, tags)


def efficiency(samples_per_s: float, devices: int, single_device_samples_per_s: float) -> float:
    return samples_per_s / (devices * single_device_samples_per_s)


def efficiency_ci95(value: float, rates: tuple[float, float], half_widths: tuple[Any, Any]) -> float:
    """The 95% half-width of a ratio of two independent measurements: relative errors in quadrature."""
    return value * math.hypot(*(width / rate for width, rate in zip(half_widths, rates, strict=True)))


def find_baseline(client: Any, run_id: str, digest: str, hw_label: str, framework_version: str) -> Any:
    """The newest finished 1-device run of the cell, in this run's experiment, or None."""
    from trainbench.measure.hardware import run_label

    experiment_id = client.get_run(run_id).info.experiment_id
    query = (
        f"tags.`trainbench.config_hash` = '{digest}' and tags.`trainbench.kind` = 'cell' and "
        f"tags.`trainbench.outcome` = 'finished' and "
        f"tags.`trainbench.framework_version` = '{_quoted(framework_version)}'"
    )
    runs = client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"], max_results=200)
    return next((r for r in runs if "samples_per_s" in r.data.metrics and run_label(r.data.tags) == hw_label), None)


def _quoted(value: str) -> str:
    return value.replace("'", "\\'")
