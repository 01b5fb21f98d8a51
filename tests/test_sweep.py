"""Sweeps through the real entry point: parent runs, outcomes, crashes, Ctrl-C, `mlflow run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, RUN_PY, TINY, child_env, metric_history, runs_in

EPOCH_METRICS = {"epoch_time_s", "epoch_samples_per_s", "train_loss", "train_accuracy", "val_loss", "val_accuracy"}


@pytest.fixture(scope="module")
def cpu_gpu_sweep(tmp_path_factory):
    """The issue's sweep, run once: two models x cpu/gpu on this GPU-less machine."""
    folder = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    completed = subprocess.run(
        [sys.executable, str(RUN_PY), "-m", "model=mlp,resnet18", "device=cpu,gpu", "batch_size=8", *TINY],
        cwd=folder, env=child_env({"MLFLOW_TRACKING_URI": uri}), capture_output=True, text=True, timeout=900,
    )
    return completed, uri


def test_sweep_is_one_parent_with_four_children(cpu_gpu_sweep) -> None:
    _, uri = cpu_gpu_sweep
    runs = runs_in(uri)
    parents = [r for r in runs if r.data.tags["trainbench.kind"] == "sweep"]
    cells = [r for r in runs if r.data.tags["trainbench.kind"] == "cell"]
    assert len(parents) == 1 and len(cells) == 4
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parents[0].info.run_id}
    assert parents[0].data.tags["trainbench.outcome"] == "failed"  # two cells could not run here
    assert parents[0].data.metrics["cells_finished"] == 2


def test_cpu_cells_finish_with_per_epoch_metrics(cpu_gpu_sweep) -> None:
    _, uri = cpu_gpu_sweep
    cpu_cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.device") == "cpu"]
    assert {r.data.tags["trainbench.model"] for r in cpu_cells} == {"mlp", "resnet18"}
    for run in cpu_cells:
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["trainbench.outcome"] == "finished" and run.info.status == "FINISHED"
        assert tags["trainbench.backend"] == "cpu"
        assert run.info.run_name == f"pytorch-{tags['trainbench.model']}-cpu-bs8"
        assert set(metrics) >= EPOCH_METRICS
        assert [m.step for m in metric_history(uri, run.info.run_id, "epoch_time_s")] == [1, 2]
        assert metrics["samples_per_s"] > 0 and metrics["num_parameters"] > 0
        assert run.data.params["batch_size"] == "8" and run.data.params["model.name"] == tags["trainbench.model"]
        for tag in ("hw.cpu", "hw.cpu_cores", "hw.memory_gb", "hw.label", "sw.torch", "sw.python", "git.commit",
                    "trainbench.config_hash"):
            assert tags.get(tag), tag


def test_gpu_cells_are_unavailable_with_the_reason(cpu_gpu_sweep) -> None:
    _, uri = cpu_gpu_sweep
    gpu_cells = [r for r in runs_in(uri) if r.data.tags.get("trainbench.device") == "gpu"]
    assert len(gpu_cells) == 2
    for run in gpu_cells:
        assert run.data.tags["trainbench.outcome"] == "unavailable"
        assert "no CUDA device" in run.data.tags["trainbench.reason"]
        assert "MPS not available" in run.data.tags["trainbench.reason"]


def test_sweep_prints_a_summary_and_exits_non_zero(cpu_gpu_sweep) -> None:
    completed, _ = cpu_gpu_sweep
    assert completed.returncode == 1
    table = completed.stdout[completed.stdout.index("cell "):]
    for name, outcome in [("pytorch-mlp-cpu-bs8", "finished"), ("pytorch-resnet18-gpu-bs8", "unavailable")]:
        row = next(line for line in table.splitlines() if line.startswith(name))
        assert outcome in row


def test_identical_cells_share_a_config_hash(cpu_gpu_sweep) -> None:
    _, uri = cpu_gpu_sweep
    hashes = {r.data.tags["trainbench.config_hash"] for r in runs_in(uri)
              if r.data.tags["trainbench.kind"] == "cell"}
    assert len(hashes) == 4  # four different cells


def test_a_crashing_cell_is_failed_and_the_next_cell_runs(trainbench) -> None:
    result = trainbench("-m", "debug.inject_fault=abort,null", "device=cpu", *TINY)
    assert result.returncode == 1
    crashed, healthy = [r for r in result.runs() if r.data.tags["trainbench.kind"] == "cell"]
    assert crashed.data.tags["trainbench.outcome"] == "failed" and crashed.info.status == "FAILED"
    assert "SIGABRT" in crashed.data.tags["trainbench.reason"]
    from mlflow.tracking import MlflowClient

    artifacts = {a.path for a in MlflowClient(result.uri).list_artifacts(crashed.info.run_id)}
    assert {"stderr_tail.txt", "config.yaml", "overrides.txt", "requirements-freeze.txt"} <= artifacts
    tail = MlflowClient(result.uri).download_artifacts(crashed.info.run_id, "stderr_tail.txt")
    with open(tail) as text:
        assert "os.abort()" in text.read()
    assert healthy.data.tags["trainbench.outcome"] == "finished"


def test_an_exception_in_a_cell_names_its_class_and_message(trainbench) -> None:
    result = trainbench("debug.inject_fault=raise", "device=cpu", *TINY)
    assert result.returncode == 1
    (cell,) = result.runs()
    assert cell.data.tags["trainbench.reason"] == "RuntimeError: debug.inject_fault=raise: a deliberate failure"


def test_a_cell_over_its_time_limit_is_stopped_and_failed(trainbench) -> None:
    result = trainbench("debug.inject_fault=sleep", "cell.timeout_s=3", *TINY)
    (cell,) = result.runs()
    assert cell.data.tags["trainbench.outcome"] == "failed"
    assert "timed out after 3 s" in cell.data.tags["trainbench.reason"]


def test_ctrl_c_records_the_cell_killed_and_stops_the_sweep(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = subprocess.Popen(
        [sys.executable, str(RUN_PY), "-m", "debug.inject_fault=sleep,null,null", *TINY],
        cwd=tmp_path, env=child_env({"MLFLOW_TRACKING_URI": uri}), stdout=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the sleeping cell's run exists
        if any(r.data.tags.get("trainbench.kind") == "cell" for r in runs_in(uri)):
            break
        time.sleep(0.5)
    time.sleep(3)  # let the cell's process start
    sweep.send_signal(signal.SIGINT)
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 130
    runs = runs_in(uri)
    cells = [r for r in runs if r.data.tags["trainbench.kind"] == "cell"]
    (parent,) = [r for r in runs if r.data.tags["trainbench.kind"] == "sweep"]
    assert len(cells) == 1, "the sweep must stop at the interrupted cell"
    assert cells[0].data.tags["trainbench.outcome"] == "killed" and cells[0].info.status == "KILLED"
    assert parent.data.tags["trainbench.outcome"] == "killed"
    assert "killed" in out


def test_mlflow_run_nests_cells_under_the_project_run(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    completed = subprocess.run(
        ["mlflow", "run", str(ROOT), "--env-manager", "local", "--experiment-name", "trainbench",
         "-P", f"overrides=model=mlp device=cpu,gpu {' '.join(TINY)}"],
        cwd=tmp_path, env=child_env({"MLFLOW_TRACKING_URI": uri}), capture_output=True, text=True, timeout=900,
    )
    runs = runs_in(uri)
    cells = [r for r in runs if r.data.tags.get("trainbench.kind") == "cell"]
    projects = [r for r in runs if r.data.tags.get("mlflow.source.type") == "PROJECT"]
    assert len(projects) == 1, completed.stderr[-2000:]
    project = projects[0]
    assert project.data.tags["trainbench.kind"] == "sweep"
    assert len(cells) == 2
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {project.info.run_id}
    assert {c.data.tags["trainbench.outcome"] for c in cells} == {"finished", "unavailable"}


def test_the_parent_process_never_imports_a_framework(tmp_path) -> None:
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('FRAMEWORKS_IN_PARENT', sorted(m for m in ('torch', 'tensorflow', 'jax',"
        " 'keras') if m in sys.modules)))\n"
        f"sys.argv = [{str(RUN_PY)!r}, 'device=cpu', *{TINY!r}]\n"
        f"runpy.run_path({str(RUN_PY)!r}, run_name='__main__')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
                       "PYTHONPATH": str(ROOT / "src")}),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "FRAMEWORKS_IN_PARENT []" in completed.stdout
    assert os.path.exists(tmp_path / "mlflow.db")
