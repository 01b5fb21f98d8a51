"""trainbench from Python (trainbench.api): a real sweep of two tiny cells into a real SQLite store returns each
cell's typed result as MLflow recorded it; its dry run gives the same setting ids and records nothing; bad overrides
raise BadInput with the command line's own line, record nothing, and do so in a Python that has already imported
PyTorch. The comparison (trainbench.compare) is tested against a real first screen in tests/test_first_screen.py.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import os
import resource
import signal
import subprocess
import sys
import time

import psutil
import pytest

import trainbench
from conftest import ROOT, RUN_PY, child_env, runs_in, with_schema
from trainbench import figures

# Three epochs, the first left out: two timed repeats, so each figure has an interval.
CELLS = [
    "model=mlp",
    "device=cpu",
    "batch_size=16,32",
    "data.num_samples=64",
    "data.num_val_samples=16",
    "task.epochs=3",
    "tracking.system_metrics_interval_s=0",
]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[trainbench.SweepResult, str, object]:
    folder = tmp_path_factory.mktemp("python-api")
    uri = with_schema(f"sqlite:///{folder / 'mlflow.db'}")
    return trainbench.run(CELLS, tracking_uri=uri, output="quiet", cwd=folder), uri, folder


@pytest.mark.slow  # two tiny cells (~20 s on two cores)
def test_a_sweep_returns_each_cells_typed_result_as_mlflow_recorded_it(swept) -> None:
    result, uri, _ = swept
    assert (result.exit_status, result.outcome, result.ok, result.tracking_uri) == (0, "finished", True, uri)
    recorded = {r.info.run_id: r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"}
    assert sorted(c.run_id for c in result.cells if c.run_id) == sorted(recorded)
    assert [c.name for c in result.cells] == ["pytorch-mlp-cpu-bs16", "pytorch-mlp-cpu-bs32"]
    for cell in result.cells:
        run = recorded[str(cell.run_id)]
        metrics, tags = run.data.metrics, run.data.tags
        assert (cell.name, cell.index) == (run.info.run_name, int(tags["trainbench.cell_index"]))
        assert cell.outcome == tags["trainbench.outcome"] == "finished" and cell.reason is None
        assert cell.samples_per_s == metrics["samples_per_s"]
        assert cell.ci95 == metrics["samples_per_s_ci95"] and cell.repeats == 2
        assert cell.noisy == (tags.get("trainbench.noisy") == "true")  # a loaded machine's cell may be
        assert cell.figure == figures.quoted(metrics["samples_per_s"], metrics["samples_per_s_ci95"], 2, cell.noisy)
        assert " (95%, 2 repeats)" in cell.figure
        assert tags["mlflow.parentRunId"] == result.sweep_run_id == tags["trainbench.sweep_id"] == result.sweep_id
        assert cell.result_run_id == cell.run_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.cells[0].outcome = "failed"  # type: ignore[misc]
    with pytest.raises(ValueError, match="2 cells"):
        _ = result.cell


@pytest.mark.slow  # composes the sweep in a process of its own (~5 s)
def test_the_dry_run_gives_the_recorded_setting_ids_and_records_nothing(swept) -> None:
    result, uri, folder = swept
    before = len(runs_in(uri))
    planned = trainbench.run([*CELLS, "sweep.dry_run=true"], tracking_uri=uri, output="quiet", cwd=folder)
    assert (planned.exit_status, planned.outcome) == (0, "planned")
    assert [(c.name, c.outcome, c.setting_id) for c in planned.cells] == [
        (c.name, "would run", c.setting_id) for c in result.cells
    ]
    assert len({c.setting_id for c in planned.cells}) == 2
    assert len(runs_in(uri)) == before


@pytest.mark.slow  # the command line twice and a Python that imports PyTorch (~10 s)
def test_bad_overrides_raise_the_command_lines_line_and_record_nothing(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cli = subprocess.run(
        [sys.executable, str(RUN_PY), "model=nosuch"],
        cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 2
    (line,) = cli.stderr.splitlines()
    # A caller that imported a framework first: the sweep's process is its own, and imports none.
    script = (
        "import torch, trainbench\n"
        "try:\n"
        f"    trainbench.run(['model=nosuch'], tracking_uri={uri!r}, output='quiet')\n"
        "except trainbench.BadInput as error:\n"
        "    print('trainbench: ' + str(error))\n"
    )
    api = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=child_env({"PYTHONPATH": str(ROOT / "src")}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert api.stdout.splitlines() == [line], api.stderr[-2000:]
    assert "`model`='nosuch' is not valid" in line
    assert runs_in(uri) == []


def test_the_command_lines_flags_and_a_bare_string_are_refused_before_anything_starts() -> None:
    with pytest.raises(trainbench.BadInput, match="takes key=value overrides, not --cfg"):
        trainbench.run(["--cfg", "job"])
    with pytest.raises(TypeError, match="a list of key=value strings"):
        trainbench.run("model=mlp")  # type: ignore[arg-type]
    with pytest.raises(trainbench.BadInput, match="12 hex digits"):
        trainbench.compare(setting="mlp")


def test_importing_trainbench_loads_neither_mlflow_nor_hydra() -> None:
    probe = (
        "import sys, trainbench\n"
        "assert callable(trainbench.run) and callable(trainbench.compare)\n"
        "print(sorted(m for m in ('mlflow', 'hydra', 'omegaconf', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=child_env({"PYTHONPATH": str(ROOT / "src")}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "[]", done.stderr


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def test_the_sweep_runs_in_the_callers_process_and_leaves_it_as_it_was(tmp_path) -> None:
    """Up to the cells' own processes the sweep is the caller's: a dry run and a refusal start no process at all
    (a Python started for them would cost a second of CPU), and afterwards the caller's environment, folder,
    streams, signal handlers and Hydra are as they were: its own Hydra composes again."""
    from hydra import compose, initialize_config_dir

    from trainbench.config import CONF_DIR

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    before = (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, list(sys.argv))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    children = _children_cpu_s()
    planned = trainbench.run([*CELLS, "sweep.dry_run=true"], tracking_uri=uri, output="quiet", cwd=tmp_path)
    with pytest.raises(trainbench.BadInput, match="`model`='nosuch' is not valid"):
        trainbench.run(["model=nosuch"], tracking_uri=uri, output="quiet", cwd=tmp_path)
    assert _children_cpu_s() - children < 0.05
    assert [c.outcome for c in planned.cells] == ["would run", "would run"]
    assert (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, list(sys.argv)) == before
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert not (tmp_path / "mlflow.db").exists()  # nothing recorded, no store made
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        assert compose(config_name="config", overrides=["model=mlp"]).model.name == "mlp"


def test_the_sweeps_lines_reach_a_sys_stdout_that_is_no_file(tmp_path, capsys) -> None:
    """As in a notebook: the sweep's lines (its plan table here) come out of the caller's sys.stdout."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with capsys.disabled():
        shown = io.StringIO()
        streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = shown
        try:
            trainbench.run([*CELLS, "sweep.dry_run=true"], tracking_uri=uri, cwd=tmp_path)
        finally:
            sys.stdout, sys.stderr = streams
    assert "pytorch-mlp-cpu-bs16" in shown.getvalue() and "nothing was run or recorded" in shown.getvalue()


@pytest.mark.slow  # the sweep in a process of its own (~5 s)
def test_a_call_from_another_thread_runs_the_sweep_in_a_process_of_its_own(tmp_path) -> None:
    """Signal handlers can be set in the main thread alone: from another thread the same sweep is a child's."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    children = _children_cpu_s()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        planned = pool.submit(
            trainbench.run, [*CELLS, "sweep.dry_run=true"], tracking_uri=uri, output="quiet", cwd=tmp_path
        ).result(timeout=300)
    assert [(c.name, c.outcome) for c in planned.cells] == [
        ("pytorch-mlp-cpu-bs16", "would run"),
        ("pytorch-mlp-cpu-bs32", "would run"),
    ]
    assert _children_cpu_s() - children > 0.05


@pytest.mark.slow  # one cell, stopped as it starts (~15 s)
def test_ctrl_c_stops_the_sweep_as_on_the_command_line_then_raises_keyboard_interrupt(tmp_path) -> None:
    """The sweep runs in the caller's process: Ctrl-C there is the sweep's, which records the running cell `killed`
    and leaves no cell process behind; the caller then gets its KeyboardInterrupt."""
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    long_cell = ["device=cpu", "data.num_samples=4096", "task.epochs=30", "tracking.system_metrics_interval_s=0"]
    script = (
        "import trainbench\n"
        "try:\n"
        f"    trainbench.run({long_cell!r}, tracking_uri={uri!r}, output='quiet')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt')\n"
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=child_env({"PYTHONPATH": str(ROOT / "src")}),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not any(r.data.tags.get("trainbench.kind") == "cell" for r in runs_in(uri)):
            assert caller.poll() is None and time.monotonic() < deadline, "no cell started"
            time.sleep(0.5)
        caller.send_signal(signal.SIGINT)
        out, _ = caller.communicate(timeout=120)
    finally:
        caller.kill()
    assert (caller.returncode, out.strip()) == (0, "KeyboardInterrupt")
    (cell,) = [r for r in runs_in(uri) if r.data.tags.get("trainbench.kind") == "cell"]
    assert (cell.data.tags["trainbench.outcome"], cell.info.status) == ("killed", "KILLED")
    cells_here = [p for p in psutil.process_iter(["cmdline", "cwd"]) if p.info["cwd"] == str(tmp_path)]
    assert not [p for p in cells_here if "trainbench.cell.worker" in " ".join(p.info["cmdline"] or [])]
