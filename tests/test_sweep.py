"""Sweeps through the real entry point, real stores and real signals: parent runs, outcomes, crashes,
Ctrl-C, SIGTERM, SIGKILL, resume, launchers, `mlflow run`. Nothing is ever left RUNNING or orphaned."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT, RUN_PY, TINY, child_env, metric_history, runs_in, start_multirun, with_schema
from trainbench import api
from trainbench.cell.in_cell import INJECT_FAULT_ENV

pytestmark = pytest.mark.slow
EPOCH_METRICS = {"epoch_time_s", "epoch_samples_per_s", "train_loss", "train_accuracy", "val_loss", "val_accuracy"}


def cells_of(uri: str) -> list:
    return [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]


def sweeps_of(uri: str) -> list:
    return [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "sweep"]


def workers(folder: Path) -> list[psutil.Process]:
    """Cell processes still alive of the sweep started in `folder` (their working directory; tests running beside
    this one have their own)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if "trainbench.cell.worker" in " ".join(process.info["cmdline"] or []):
            with contextlib.suppress(psutil.Error):
                if Path(process.cwd()) == folder:
                    found.append(process)
    return found


def start_sweep(folder: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return start_multirun(uri, folder, *args), uri


def wait_for(condition, timeout: float = 180, what: str = "") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def running_cell(uri: str) -> bool:
    return any(r.data.tags.get("trainbench.outcome") == "running" for r in cells_of(uri))


# A cell that runs long enough to be stopped in the middle, logging an epoch every few seconds.
LONG_CELL = [
    "device=cpu",
    "data.num_samples=4096",
    "data.num_val_samples=64",
    "task.epochs=30",
    "batch_size=256",
    "tracking.system_metrics_interval_s=0",
]


@pytest.fixture(scope="module")
def cpu_gpu_sweep(tmp_path_factory):
    """The issue's kind of sweep, run once: two models x cpu/gpu on this GPU-less machine."""
    folder = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    completed = subprocess.run(
        [sys.executable, str(RUN_PY), "-m", "model=mlp,resnet18", "device=cpu,gpu", "batch_size=8", *TINY],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return completed, uri


def test_a_sweep_is_one_parent_with_its_cells_as_children(cpu_gpu_sweep) -> None:
    completed, uri = cpu_gpu_sweep
    (parent,) = sweeps_of(uri)
    cells = cells_of(uri)
    assert len(cells) == 4, completed.stderr[-2000:]
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parent.info.run_id}
    assert parent.data.tags["trainbench.outcome"] == "failed"  # two cells could not run here
    assert parent.data.metrics["cells_finished"] == 2
    assert len({c.data.tags["trainbench.config_hash"] for c in cells}) == 4  # four different cells


def test_cpu_cells_finish_with_per_epoch_metrics_and_only_their_own_params(cpu_gpu_sweep) -> None:
    _, uri = cpu_gpu_sweep
    for run in [r for r in cells_of(uri) if r.data.tags["trainbench.device"] == "cpu"]:
        tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
        assert tags["trainbench.outcome"] == "finished" and run.info.status == "FINISHED"
        assert run.info.run_name == f"pytorch-{tags['trainbench.model']}-cpu-bs8"
        assert set(metrics) >= EPOCH_METRICS | {"samples_per_s", "compile_time_s", "num_parameters"}
        assert [m.step for m in metric_history(uri, run.info.run_id, "epoch_time_s")] == [1, 2]
        assert params["batch_size"] == "8" and params["model.name"] == tags["trainbench.model"]
        assert params["data.num_samples"] == "64"
        assert not any(k.startswith(("launch.", "tracking.", "sweep.")) for k in params)
        if tags["trainbench.model"] == "resnet18":
            assert "model.hidden_sizes" not in params and params["framework.channels_last"] == "auto"
        for tag in (
            "hw.cpu",
            "hw.label",
            "sw.torch",
            "git.commit",
            "trainbench.step_time_source" if False else "trainbench.samples_per_epoch",
            "trainbench.image_size",
            "trainbench.timed_region",
        ):
            assert tags.get(tag), tag


def test_each_cells_run_page_leads_with_its_figures_in_its_description(cpu_gpu_sweep) -> None:
    """The run's description (mlflow.note.content: the top of its page in the MLflow UI) quotes the figure as the
    sweep's table did, with the outcome, the setting in words and what ran it; a cell that did not run says why."""
    from trainbench.figures import number

    completed, uri = cpu_gpu_sweep
    for run in cells_of(uri):
        tags, metrics = run.data.tags, run.data.metrics
        headline, setting, ran = tags["mlflow.note.content"].split("  \n")
        assert setting == tags["trainbench.setting_name"]
        if tags["trainbench.device"] == "cpu":
            figure = number(metrics["samples_per_s"])
            assert headline == f"**{figure} samples/s** (1 repeat) · finished"  # task.epochs=2: one steady epoch
            row = next(line for line in completed.stdout.splitlines() if line.startswith(run.info.run_name + " "))
            assert f"{figure} (1 repeat)" in row  # the sweep's table said the same
            assert ran.startswith(f"pytorch {tags['trainbench.framework_version']} on {tags['hw.label']} · ")
            assert f"compile {number(metrics['compile_time_s'])} s" in ran
        else:
            assert headline == f"**unavailable**: {tags['trainbench.reason']}"


def test_gpu_cells_are_unavailable_with_what_was_checked(cpu_gpu_sweep) -> None:
    completed, uri = cpu_gpu_sweep
    for run in [r for r in cells_of(uri) if r.data.tags["trainbench.device"] == "gpu"]:
        assert run.data.tags["trainbench.outcome"] == "unavailable"
        assert "no CUDA device" in run.data.tags["trainbench.reason"]
    assert completed.returncode == 1
    table = completed.stdout[completed.stdout.index("cell ") :]
    assert any(line.startswith("pytorch-resnet18-gpu-bs8") and "unavailable" in line for line in table.splitlines())
    # each said so in one line as it ended, with no traceback
    said = [line for line in completed.stderr.splitlines() if " unavailable: " in line]
    assert [line.split(" unavailable:")[0] for line in said] == [
        "trainbench: pytorch-mlp-gpu-bs8",
        "trainbench: pytorch-resnet18-gpu-bs8",
    ]
    assert all("no CUDA device" in line for line in said)


def test_a_gpu_this_machine_cannot_have_is_named_before_the_first_cell_and_starts_no_process(cpu_gpu_sweep) -> None:
    from trainbench.measure.device_probe import absent

    if absent("gpu") is None:
        pytest.skip("this machine has a GPU driver: the GPU cells' frameworks look for themselves")
    completed, uri = cpu_gpu_sweep
    said = completed.stderr.splitlines()
    named = [line for line in said if line.startswith("trainbench: device=gpu: no CUDA device on this machine")]
    assert named == said[:1], said[:5]  # the first thing the sweep says, before any cell's line
    assert "its 2 cells will be recorded `unavailable` without starting, the other 2 run" in named[0]
    for run in [r for r in cells_of(uri) if r.data.tags["trainbench.device"] == "gpu"]:
        assert "sw.torch" not in run.data.tags  # no process imported PyTorch for it
        assert run.data.params["device.name"] == "gpu" and run.info.status == "FAILED"
    assert "Traceback" not in completed.stderr + completed.stdout


def cell_output(stdout: str, name: str) -> list[str]:
    """The lines a sweep's stdout holds from the cell `name` began (its `[cell i/N] name: overrides` line) until
    the next cell began."""
    lines, kept, inside = stdout.splitlines(), [], False
    for line in lines:
        begins = re.match(r"^\[cell \d+/\d+\] (\S+): (?!\w+ in \S+( s)?$)", line)
        if begins:
            inside = begins.group(1) == name
        if inside:
            kept.append(line)
    return kept


def test_each_cell_says_what_it_is_doing_in_plain_lines(cpu_gpu_sweep) -> None:
    """Not on a terminal: each phase of a cell says itself as it begins, in plain lines (no bar's carriage returns),
    before the epochs' own lines; cells run one at a time from the sweep's process carry no label."""
    completed, _ = cpu_gpu_sweep
    assert "\r" not in completed.stdout
    lines = [line.strip() for line in cell_output(completed.stdout, "pytorch-resnet18-cpu-bs8")]
    phases = [
        "recording the cell's settings in its run, starting the cell's process ...",
        "loading pytorch and its device (cpu) ...",
        "loading the data (synthetic) ...",
        "building the model (resnet18) ...",
        "counting the model's FLOPs ...",
        "training: 2 epoch(s) of 8 steps, each timed, then validation on 16 samples ...",
        "epoch 1/2: ",
        "epoch 2/2: ",
    ]
    at = [next((i for i, line in enumerate(lines) if line.startswith(phase)), -1) for phase in phases]
    assert -1 not in at and at == sorted(at), "\n".join(lines)
    assert not any(line.startswith("[pytorch-") for line in completed.stdout.splitlines())


def test_a_sweep_says_its_elapsed_time_and_an_estimate_of_what_is_left(cpu_gpu_sweep) -> None:
    """Before each cell: the time since the sweep began and the cells done; an estimate of what is left from the
    ended cells' durations once one has ended. After each cell: its outcome and how long it took."""
    completed, _ = cpu_gpu_sweep
    clocks = re.findall(r"^  sweep: (\S+)(?: s)? elapsed, (\d) of 4 cells done; (.+)$", completed.stdout, re.MULTILINE)
    assert [int(done) for _, done, _ in clocks] == [0, 1, 2, 3], completed.stdout[-3000:]
    assert clocks[0][2] == "estimate after the first cell"
    from trainbench.measure.device_probe import absent

    if absent("gpu"):  # each cell left is estimated from ended cells of its kind: the MLP's time says nothing of
        # ResNet-18's, and a GPU cell recorded `unavailable` without starting takes none
        resnet18 = "estimate after the first cell like train/resnet18/cpu (task/model/device)"
        assert [estimate for _, _, estimate in clocks[1:]] == [resnet18, resnet18, "about 0 s left"]
    for _, _, estimate in clocks[1:]:
        assert re.fullmatch(
            r"about \S+( s)? left|estimate after the first cell like \S+ \(task/model/device\)", estimate
        )
    elapsed = [seconds_of(clock) for clock, _, _ in clocks]
    assert elapsed == sorted(elapsed)
    ended = re.findall(r"^\[cell (\d)/4\] (\S+): (\w+) in \S+", completed.stdout, re.MULTILINE)
    assert sorted((int(i), outcome) for i, name, outcome in ended if "-cpu-" in name) == [
        (1, "finished"),
        (3, "finished"),
    ]
    assert len(ended) == 4


def seconds_of(clock: str) -> int:
    """`42` or `3:05` or `1:02:05` as trainbench.progress.duration writes them, in seconds."""
    return sum(int(part) * 60**power for power, part in enumerate(reversed(clock.split(":"))))


def test_a_crashing_cell_is_failed_with_its_stderr_and_the_next_cell_runs(tmp_path, monkeypatch) -> None:
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(INJECT_FAULT_ENV, "1:abort")
    result = api.run(["seed=0,1", "device=cpu", *TINY], tracking_uri=uri, output="quiet", cwd=tmp_path)
    assert (result.exit_status, result.outcome) == (1, "failed")
    assert [c.outcome for c in result.cells] == ["failed", "finished"] and "SIGABRT" in str(result.cells[0].reason)
    crashed, healthy = sorted(cells_of(uri), key=lambda r: r.data.tags["trainbench.cell_index"])
    assert crashed.info.run_id == result.cells[0].run_id and crashed.info.status == "FAILED"
    assert crashed.data.tags["trainbench.reason"] == result.cells[0].reason
    client = MlflowClient(uri)
    artifacts = {a.path for a in client.list_artifacts(crashed.info.run_id)}
    assert {"stderr_tail.txt", "config.yaml", "overrides.txt", "requirements-freeze.txt"} <= artifacts
    assert "os.abort()" in Path(client.download_artifacts(crashed.info.run_id, "stderr_tail.txt")).read_text()
    assert healthy.data.tags["trainbench.outcome"] == "finished"
    # What the cell's process found in force is written by it alone: a cell that died before its framework said
    # has none of it, rather than what was asked under the same name (the asked values are the params).
    in_force = ("trainbench.num_devices", "trainbench.compile")
    assert not any(tag in crashed.data.tags for tag in in_force), crashed.data.tags
    assert (healthy.data.tags["trainbench.num_devices"], healthy.data.tags["trainbench.compile"]) == ("1", "false")
    assert crashed.data.params["device.count"] == "1" and crashed.data.params["optimize.compile"] == "False"
    # The machine's hw.* tags: the cell's process writes them as it found them; its launcher writes its own only
    # where the cell wrote none (it died before binding its device), so every run says where it ran.
    assert "hw.label" in healthy.data.tags and "hw.label" not in crashed.data.tags
    host = {key: value for key, value in healthy.data.tags.items() if key.startswith("hw.") and key != "hw.label"}
    assert host and {key: crashed.data.tags.get(key) for key in host} == host


def test_an_exception_names_its_class_and_a_hang_is_stopped_by_the_timeout(trainbench) -> None:
    result = trainbench(
        "-m", "seed=0,1", "device=cpu", "cell.timeout_s=8", *TINY, env={INJECT_FAULT_ENV: "1:raise,2:sleep"}
    )
    raised, hung = sorted(cells_of(result.uri), key=lambda r: r.data.tags["trainbench.cell_index"])
    assert raised.data.tags["trainbench.reason"] == "RuntimeError: TRAINBENCH_INJECT_FAULT=raise: a deliberate failure"
    assert hung.data.tags["trainbench.outcome"] == "failed"
    assert "timed out after 8 s" in hung.data.tags["trainbench.reason"]
    # the timeout is expected: one line; the exception is a bug: its traceback is on the terminal too
    (line,) = [x for x in result.stderr.splitlines() if "timed out" in x]
    assert line.startswith(f"trainbench: {hung.info.run_name} failed: timed out after 8 s (cell.timeout_s)")
    assert result.stderr.count("Traceback (most recent call last)") == 1
    assert f"trainbench: {raised.info.run_name} failed: RuntimeError: TRAINBENCH_INJECT_FAULT=raise" in result.stderr


@pytest.mark.parametrize(("stop", "exit_status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stopped_sweep_records_the_running_cell_killed_and_lists_what_never_started(tmp_path, stop, exit_status):
    sweep, uri = start_sweep(tmp_path, "seed=0,1,2", *LONG_CELL)
    wait_for(
        lambda: any(metric_history(uri, r.info.run_id, "epoch_time_s") for r in cells_of(uri)),
        what="the first epoch of the first cell",
    )
    sweep.send_signal(stop)
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == exit_status
    (cell,) = cells_of(uri)  # the sweep stopped at the running cell
    assert cell.data.tags["trainbench.outcome"] == "killed" and cell.info.status == "KILLED"
    assert metric_history(uri, cell.info.run_id, "epoch_time_s")  # what it measured before is kept
    (parent,) = sweeps_of(uri)
    assert parent.data.tags["trainbench.outcome"] == "killed" and parent.info.status == "KILLED"
    assert out.count("not started") == 2 and "killed" in out
    assert not workers(tmp_path)


def test_a_killed_sweep_leaves_no_orphan_and_nothing_running_after_the_next_invocation(tmp_path, trainbench) -> None:
    sweep, uri = start_sweep(tmp_path, "seed=0,1", *LONG_CELL)
    wait_for(
        lambda: any(metric_history(uri, r.info.run_id, "epoch_time_s") for r in cells_of(uri)),
        what="the first epoch of the first cell",
    )
    sweep.kill()  # SIGKILL: no handler runs in the sweep's process
    sweep.wait(timeout=30)
    wait_for(lambda: not workers(tmp_path), timeout=30, what="the orphaned cell process to notice and exit")
    # the cell stopped at once and handed its run to a small closing process (trainbench.cell.orphan)
    wait_for(lambda: cells_of(uri)[0].info.status != "RUNNING", timeout=30, what="the cell's run to be closed")
    (cell,) = cells_of(uri)
    assert cell.data.tags["trainbench.outcome"] == "killed"  # recorded on the cell's behalf
    assert "died" in cell.data.tags["trainbench.reason"]
    assert metric_history(uri, cell.info.run_id, "epoch_time_s")
    assert sweeps_of(uri)[0].info.status == "RUNNING"  # its owner was SIGKILLed ...
    later = subprocess.run(
        [sys.executable, str(RUN_PY), "device=cpu", *TINY],
        cwd=tmp_path,
        text=True,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        timeout=600,
    )
    assert later.returncode == 0, later.stderr[-2000:]
    parent = sweeps_of(uri)[0]  # ... and the next invocation closed it
    assert parent.info.status == "FAILED" and parent.data.tags["trainbench.outcome"] == "lost"
    assert "vanished" in parent.data.tags["trainbench.reason"]
    assert not [r for r in runs_in(uri) if r.info.status == "RUNNING"]


def test_resume_skips_what_finished_and_runs_the_rest(tmp_path) -> None:
    """Ctrl-C with cell 1 finished, cell 2 running and cell 3 never started; `sweep.resume=failed` then runs 2
    (killed) and 3 (it never ran here: once recorded `skipped` with no result) and skips 1."""
    sweep, uri = start_sweep(
        tmp_path,
        "batch_size=8,16,32",
        "task.epochs=1",
        "tracking.system_metrics_interval_s=0",
        "device=cpu",
        "data.num_samples=1024",
        "data.num_val_samples=16",
    )
    wait_for(
        lambda: (
            sum(c.data.tags.get("trainbench.outcome") == "finished" for c in cells_of(uri)) >= 1 and running_cell(uri)
        ),
        what="one finished cell and one running",
    )
    sweep.send_signal(signal.SIGINT)
    sweep.communicate(timeout=120)
    first = {c.data.tags["trainbench.cell_index"]: c.data.tags["trainbench.outcome"] for c in cells_of(uri)}
    assert first == {"1": "finished", "2": "killed"}
    resumed = api.run(  # the Python API: the command line's process, its cells handed back typed
        [
            "batch_size=8,16,32",
            "task.epochs=1",
            "device=cpu",
            "data.num_samples=1024",
            "data.num_val_samples=16",
            "tracking.system_metrics_interval_s=0",
            "sweep.resume=failed",
        ],
        tracking_uri=uri,
        output="quiet",
        cwd=tmp_path,
    )
    assert resumed.exit_status == 0
    recorded = {c.info.run_id: c for c in cells_of(uri)}
    assert [c.outcome for c in resumed.cells] == ["skipped", "finished", "finished"]
    for cell in resumed.cells:
        assert recorded[str(cell.run_id)].data.tags["mlflow.parentRunId"] == resumed.sweep_run_id
        assert recorded[str(cell.run_id)].data.tags["trainbench.outcome"] == cell.outcome
    skipped = resumed.cells[0]
    assert skipped.name == "pytorch-mlp-cpu-bs8" and "already finished" in str(skipped.reason)
    # Its figures are the earlier run's, which the skip's record points to.
    earlier = recorded[str(skipped.result_run_id)]
    assert recorded[str(skipped.run_id)].data.tags["trainbench.result_run_id"] == earlier.info.run_id
    assert skipped.samples_per_s == earlier.data.metrics["samples_per_s"] and earlier.info.run_id != skipped.run_id


def test_joblib_runs_cells_side_by_side_under_one_parent(trainbench) -> None:
    result = trainbench(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "batch_size=16,32",
        "device=cpu",
        "data.num_samples=512",
        "data.num_val_samples=16",
        "task.epochs=2",
        "tracking.system_metrics_interval_s=0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (parent,) = sweeps_of(result.uri)
    first, second = sorted(cells_of(result.uri), key=lambda r: r.info.start_time)
    assert {first.data.tags["mlflow.parentRunId"], second.data.tags["mlflow.parentRunId"]} == {parent.info.run_id}
    assert second.info.start_time < first.info.end_time  # they overlapped
    # Side by side on one output: every line of a cell carries its name, its error output's too
    epochs = [line for line in result.stdout.splitlines() if re.search(r"epoch \d/2: ", line)]
    for name in ("pytorch-mlp-cpu-bs16", "pytorch-mlp-cpu-bs32"):
        assert sum(line.startswith(f"[{name}] epoch ") for line in epochs) == 2, result.stdout[-3000:]
        assert f"[{name}]   building the model (mlp) ..." in result.stdout.splitlines()
    assert len(epochs) == 4


def test_submitit_local_runs_every_cell_under_one_parent(trainbench) -> None:
    result = trainbench(
        "-m",
        "hydra/launcher=submitit_local",
        "batch_size=16,32",
        "device=cpu",
        *TINY,
        env={"TRAINBENCH_HYDRA_DIR": "submitit"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (parent,) = sweeps_of(result.uri)
    cells = cells_of(result.uri)
    assert len(cells) == 2 and {c.data.tags["trainbench.outcome"] for c in cells} == {"finished"}
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parent.info.run_id}


def mlflow_run(folder: Path, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`mlflow run` on this checkout, as a user types it, against the store at `uri`."""
    return subprocess.run(
        ["mlflow", "run", str(ROOT), "--env-manager", "local", *args],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_mlflow_named(uri: str, completed: subprocess.CompletedProcess[str], verb: str) -> Any:
    """The run `mlflow run` named in its last line ("Run (ID '...') succeeded" / "failed"), as the store has it."""
    found = re.search(rf"Run \(ID '([0-9a-f]+)'\) {verb}", completed.stderr)
    assert found, completed.stderr[-2000:]
    return MlflowClient(tracking_uri=uri).get_run(found.group(1))


def test_mlflow_run_nests_cells_under_the_project_run(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = f"overrides=model=mlp device=cpu,gpu {' '.join(TINY)}"
    completed = mlflow_run(tmp_path, uri, "--experiment-name", "trainbench", "-P", overrides)
    projects = [r for r in runs_in(uri) if r.data.tags.get("mlflow.source.type") == "PROJECT"]
    assert len(projects) == 1, completed.stderr[-2000:]
    assert projects[0].data.tags["trainbench.kind"] == "sweep"
    cells = cells_of(uri)
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {projects[0].info.run_id}
    assert {c.data.tags["trainbench.outcome"] for c in cells} == {"finished", "unavailable"}
    # The run `mlflow run` names is the sweep's, ended as the sweep ended.
    named = run_mlflow_named(uri, completed, "failed")
    assert named.info.run_id == projects[0].info.run_id
    assert (named.info.status, named.data.tags["trainbench.outcome"]) == ("FAILED", "failed")


def test_mlflow_run_without_an_experiment_keeps_the_run_it_names(tmp_path) -> None:
    """`mlflow run .` names no experiment by default, and its run lands in "Default", where `trainbench results`
    and the report never look: the cell goes to experiment trainbench under a sweep's run, and the run `mlflow run`
    names in its last line stays, FINISHED, with the sweep's outcome and the way to its run."""
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    completed = mlflow_run(tmp_path, uri, "-P", f"overrides=device=cpu {' '.join(TINY)}")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "`mlflow run` named no experiment, so the sweep is recorded in experiment trainbench" in completed.stdout
    (sweep,) = sweeps_of(uri)
    (cell,) = cells_of(uri)
    assert cell.data.tags["trainbench.outcome"] == "finished"
    assert cell.data.tags["mlflow.parentRunId"] == sweep.info.run_id
    named = run_mlflow_named(uri, completed, "succeeded")
    assert [r.info.run_id for r in runs_in(uri, "Default")] == [named.info.run_id]
    assert (named.info.status, named.info.lifecycle_stage) == ("FINISHED", "active")
    tags = named.data.tags
    assert (tags["trainbench.kind"], tags["trainbench.outcome"]) == ("mlflow_run", "finished")
    assert tags["trainbench.sweep_run_id"] == sweep.info.run_id
    assert sweep.info.run_id in tags["mlflow.note.content"] and cell.info.run_name in tags["mlflow.note.content"]
    assert named.info.run_id in completed.stdout  # the line above says where that run leads


def test_a_bad_override_under_mlflow_run_records_nothing_and_says_why_on_its_run(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    completed = mlflow_run(tmp_path, uri, "-P", "overrides=batch_size=0")
    assert completed.returncode != 0
    assert "`batch_size`=0 is not valid" in completed.stderr
    assert runs_in(uri) == []  # no sweep, no cell
    named = run_mlflow_named(uri, completed, "failed")
    assert (named.info.status, named.info.lifecycle_stage) == ("FAILED", "active")
    assert named.data.tags["trainbench.kind"] == "mlflow_run"
    assert "`batch_size`=0 is not valid" in named.data.tags["trainbench.reason"]


def test_mlflow_run_without_conda_is_explained_where_the_command_is_shown(tmp_path) -> None:
    """`mlflow run .` with MLflow's default env manager (conda) fails before trainbench starts on a machine without
    conda: what MLflow prints there is what the docs quote, and the README's `mlflow run` line says so."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = child_env(
        {"MLFLOW_TRACKING_URI": uri, "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}
    )
    env.pop("MLFLOW_CONDA_HOME", None)
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "mlflow"), "run", str(ROOT), "-P", "overrides=device=cpu"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 1
    assert "=== Could not find Conda executable at conda." in completed.stderr  # as docs/sweeps.md quotes it
    assert "[cell" not in completed.stdout  # trainbench never started: nothing of ours can say more there
    assert "Could not find Conda executable at conda." in (ROOT / "docs" / "sweeps.md").read_text()
    readme = [line for line in (ROOT / "README.md").read_text().splitlines() if "mlflow run ." in line]
    assert any("--env-manager local" in line and "conda" in line for line in readme), readme


def test_the_parent_process_never_imports_a_framework(tmp_path) -> None:
    probe = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('FRAMEWORKS_IN_PARENT', sorted(m for m in ('torch', 'tensorflow', 'jax',"
        " 'keras', 'mlx') if m in sys.modules)))\n"
        f"sys.argv = [{str(RUN_PY)!r}, 'device=cpu', *{TINY!r}]\n"
        f"runpy.run_path({str(RUN_PY)!r}, run_name='__main__')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(ROOT / "src")}),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "FRAMEWORKS_IN_PARENT []" in completed.stdout
    assert os.path.exists(tmp_path / "mlflow.db")
