"""A task declares how the report shows it (TaskConfig.uses_model, setting_tags, headline): a task of one's own
that uses no model gets its own table, headed by its own settings and its declared figure, with no report or
reference module edited. The runs are MLflow's own Run objects, as the report reads them from a store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from trainbench.config.schema import TaskConfig


@dataclass
class ProbeTask(TaskConfig):
    """A task that probes a device with no model: its figure is the time the probe took."""

    uses_model: ClassVar[bool] = False
    setting_tags: ClassVar[dict[str, str]] = {"trainbench.probe_size": "probe size"}
    headline: ClassVar[str | None] = "total_time_s"
    size: int = 64


@pytest.fixture
def probe_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainbench.config.plugins import SCHEMAS

    monkeypatch.setitem(SCHEMAS["task"], "probe", ProbeTask)


def probe_run(run_id: str, machine: dict[str, str], size: int, seconds: float) -> Any:
    metrics = {"total_time_s": seconds, "samples_per_s": 1000.0 / seconds}
    return task_run(run_id, machine, "probe", {"size": str(size)}, {"trainbench.probe_size": str(size)}, metrics)


def task_run(
    run_id: str, machine: dict[str, str], task: str, settings: dict[str, str], own: dict[str, str], metrics: Any
) -> Any:
    """A finished cell of `task` with its `settings` (task.*) and its own setting tags, as a store returns it."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    params = {"task.name": task, **{f"task.{k}": v for k, v in settings.items()}}
    params |= {"precision.name": "fp32", "framework.name": "pytorch"}
    params |= {"model.name": "mlp", "data.name": "synthetic", "batch_size": "64"}  # composed, unused by the task
    tags = {
        "trainbench.kind": "cell",
        "trainbench.outcome": "finished",
        "trainbench.task": task,
        **own,
        "trainbench.precision": "fp32",
        "trainbench.timed_region": "steps",
        "trainbench.framework": "pytorch",
        "trainbench.framework_version": "2.14.1",
        **machine,
    }
    return Run(
        RunInfo(run_id, "0", run_id, "FINISHED", 0, 1, "active", run_name=run_id),
        RunData(
            [Metric(k, v, 0, 0) for k, v in metrics.items()],
            [Param(k, v) for k, v in params.items()],
            [RunTag(k, v) for k, v in tags.items()],
        ),
    )


XEON = {"hw.cpu": "Intel(R) Xeon(R) Processor", "hw.cpu_cores": "2", "trainbench.backend": "cpu"}
H100 = {"hw.gpu": "NVIDIA H100 80GB HBM3", "hw.gpu_memory_gb": "79.6", "trainbench.backend": "cuda"}


def test_a_task_with_no_model_shows_its_own_settings_and_figure(probe_registered: None) -> None:
    from trainbench.report import render
    from trainbench.report.comparison import build_tables
    from trainbench.report.selection import entry
    from trainbench.store.runs import setting_name
    from trainbench.store.sources import Found

    runs = [probe_run("cpu", XEON, 64, 8.0), probe_run("gpu", H100, 64, 2.0), probe_run("cpu-big", XEON, 256, 30.0)]
    entries = [entry(Found(run, None), histories=False) for run in runs]
    tables = build_tables(entries, None, [])

    # one table per probe size (its settings name what it ran), in its declared figure: total time, not the
    # samples/s it also logged
    assert {(t.task, t.model, t.metric.name) for t in tables} == {
        ("probe", "probe_64", "total_time_s"),
        ("probe", "probe_256", "total_time_s"),
    }
    for table in tables:
        assert render.head(table) == ["probe size", "precision", "settings"]  # no model, data or batch size
        (row,) = table.rows
        assert render.row_name(table, row) == f"{table.model.removeprefix('probe_')}, fp32"
    (small,) = [t for t in tables if t.model == "probe_64"]
    assert sorted(cell.value for cell in small.rows[0].cells.values()) == [2.0, 8.0]  # the two machines, one row
    assert setting_name(runs[0].data.tags, runs[0].data.params) == "probe 64, fp32, timed: steps"


def test_matmul_keeps_its_table_of_shapes_and_its_peak() -> None:
    """The shipped task with no model, shown from its declaration: a table per shape, in peak TFLOPS (its total
    time is the whole sweep of sizes'), no model, data or batch size."""
    from trainbench.report import render
    from trainbench.report.comparison import build_tables
    from trainbench.report.selection import entry
    from trainbench.store.sources import Found

    metrics = {"peak_tflops": 1.5, "total_time_s": 40.0}
    run = task_run("mm", XEON, "matmul", {"shape": "square"}, {"trainbench.matmul_shape": "square"}, metrics)
    (table,) = build_tables([entry(Found(run, None), histories=False)], None, [])
    assert (table.model, table.metric.name) == ("matmul_square", "peak_tflops")
    assert render.head(table) == ["shape", "precision", "settings"]
    assert render.row_name(table, table.rows[0]) == "square, fp32"


def test_the_sweeps_summary_heads_its_figures_by_what_they_are_and_quotes_a_peak_as_every_screen() -> None:
    """A sweep with a GEMM cell: its figure column is not headed samples/s above TFLOPS, and the peak reads as the
    first screen and the run's note read it (0.103, not 0.10)."""
    from trainbench.sweep.cell_run import CellResult
    from trainbench.sweep.summary import summary_table

    gemm = CellResult(1, "pytorch-matmul_square-cpu", "finished", None, None, "a" * 32, peak_tflops=0.1034)
    mlp = CellResult(2, "pytorch-mlp-cpu-bs64", "finished", 1403.2, None, "b" * 32)
    header, _, *rows = summary_table([gemm, mlp]).splitlines()
    assert header.split()[:3] == ["cell", "outcome", "figure"], header
    assert rows[0].split("finished")[1].strip() == "0.103 TFLOPS peak", rows
    assert summary_table([mlp]).splitlines()[0].split()[2] == "samples/s"
