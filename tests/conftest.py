"""Shared fixtures: run the real entry point in a temporary folder against a real SQLite MLflow store; real
tracking servers (tests/servers.py) over SQLite or a throwaway PostgreSQL."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import trainbench.config.plugins  # noqa: F401
from servers import POSTGRES_MISSING, MlflowServer, PostgresCluster, postgres_bin_dir

# Tests compose cells in-process with Hydra's compose(), as trainbench.config.compose does once every shipped
# schema is registered (the import above). The product's own entry points register them themselves: the tests
# that run them as real processes hold them to it.

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "src" / "run.py"
# Small enough for seconds on two CPU cores, big enough to exercise every code path. System metrics off:
# their sampling thread is exercised by the tests that ask for it.
TINY = ["data.num_samples=64", "data.num_val_samples=16", "task.epochs=2", "tracking.system_metrics_interval_s=0"]
QUIET = "tracking.system_metrics_interval_s=0"
# What a task=benchmark cell records of its timed steps, on every framework (docs/mlflow-schema.md)
STEP_METRICS = (
    "step_time_ms_mean",
    "step_time_ms_p50",
    "step_time_ms_p90",
    "step_time_ms_p99",
    "step_time_cv_pct",
    "samples_per_s",
    "warmup_time_s",
    "compile_time_s",
)


def assert_timed_steps(metrics: dict[str, float], warmup_steps: int) -> None:
    """A benchmark cell's step figures: all of them, percentiles in order, after the warm-up steps it was asked."""
    missing = [key for key in STEP_METRICS if key not in metrics]
    assert not missing, missing
    assert 0 < metrics["step_time_ms_p50"] <= metrics["step_time_ms_p90"] <= metrics["step_time_ms_p99"]
    assert metrics["warmup_steps_run"] == warmup_steps


@dataclass
class Invocation:
    returncode: int
    stdout: str
    stderr: str
    uri: str

    def runs(self, experiment: str = "trainbench") -> list[Any]:
        """Every run in the experiment, oldest first."""
        return runs_in(self.uri, experiment)


def runs_in(uri: str, experiment: str = "trainbench") -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return sorted(client.search_runs([found.experiment_id], max_results=1000), key=lambda r: r.info.start_time)


def metric_history(uri: str, run_id: str, key: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    return sorted(MlflowClient(tracking_uri=uri).get_metric_history(run_id, key), key=lambda m: m.step)


# The test files that take longest on two cores, longest first: the two workers take whole files in collection
# order, so these start first and the short files fill in around them (a long file taken last would run alone
# while the other worker idles). Measured with `pytest --durations=0`; a file not listed keeps its place after them.
# After the whole suite's longest come the files whose few slow tests are long (CI's slowest entries), then the
# fast tier's longest (`pytest -m "not slow" --durations=0`): its files run in this same order, and one of them
# taken last (alphabetical order's fate for test_validation.py) ran alone while the other worker idled.
LONGEST_FIRST = (
    "test_sweep.py",
    "test_report.py",
    "test_data_parallel.py",
    "test_measurement.py",
    "test_transformers_matmul.py",
    "test_ui.py",
    "test_first_screen.py",
    "test_tracking_resilience.py",
    "test_sharing.py",
    "test_studies.py",
    "test_training.py",
    "test_doctor.py",
    "test_bare_vs_harness.py",
    "test_store_faults.py",
    "test_stray_processes.py",
    "test_inference_cells.py",
    "test_timing.py",
    "test_soak.py",
    "test_keras_training.py",
    "test_servers.py",
    "test_python_api.py",
    "test_keras_parity.py",
    "test_import_atomic.py",
    "test_store_contention.py",
    "test_multi_node.py",
    # Files with a few slow tests each, ahead of the many short files: left to alphabetical order after them, the
    # last (test_yours.py, a sweep and a report) started when little else was left for the other worker.
    "test_bounds.py",
    "test_memory_limit.py",
    "test_privacy.py",
    "test_noise_and_settings.py",
    "test_dependencies.py",
    "test_team_server.py",
    "test_model_counts.py",
    "test_yours.py",
    "test_timed_regions.py",
    "test_builders.py",
    "test_keras_text_models.py",
    "test_start_time.py",
    "test_data.py",
    "test_validation.py",
    "test_conventions.py",
    "test_references.py",
    "test_store_template.py",
    "test_config.py",
    "test_command_line.py",
    "test_mlx_models.py",
    "test_suite.py",
    "test_data_files.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    place = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: place.get(item.path.name, len(place)))  # stable: a file's own order is kept


# Sweeps import the published and contributed runs into a new store once (trainbench.store.shared_runs), a minute on two
# cores: only the tests of that import turn it on.
os.environ.setdefault("TRAINBENCH_SHARED_RUNS", "off")


def command_of(process: Any) -> str:
    """A psutil process's command line; empty for one that ended (or is a zombie) while the test looked."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the store and the thread-count variables (part of every cell's
    setting: a test that wants one passes it in `extra`), plus `extra`."""
    from trainbench.config import THREAD_VARIABLES

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k not in THREAD_VARIABLES}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def import_references(folder: Path, uri: str) -> None:
    """The published references (the shipped CSV) imported into the store at `uri` as a user imports them:
    `python src/references.py`, run in `folder`."""
    imported = subprocess.run(
        [sys.executable, str(ROOT / "src" / "references.py")],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]


@functools.lru_cache(maxsize=1)
def template_store() -> Path:
    """An empty MLflow SQLite store with its schema made, once per session: creating one costs every sweep that
    starts on a new store 2-10 s on two cores. Copy it (with_schema) to use it."""
    from mlflow.tracking import MlflowClient

    path = Path(tempfile.mkdtemp(prefix="trainbench-template-")) / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    atexit.register(shutil.rmtree, path.parent, True)
    return path


def with_schema(uri: str) -> str:
    """A SQLite store at `uri` that does not exist yet begins as a copy of the session's empty one."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :])
        if not path.exists() and path.parent.is_dir():
            shutil.copy(template_store(), path)
    return uri


def start_multirun(
    uri: str,
    folder: Path,
    *args: str,
    env: dict[str, str] | None = None,
    fresh: bool = False,
    new_session: bool = False,
) -> subprocess.Popen[str]:
    """`python src/run.py -m ARGS...` started from `folder` (created) against the store at `uri`, not waited for:
    for tests that signal, kill or race the sweep. Its output is piped. `fresh`: a new SQLite store is made by the
    sweep itself (not copied with its schema); `new_session`: in a process group of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(RUN_PY), "-m", *args],
        cwd=folder,
        text=True,
        env=child_env({"MLFLOW_TRACKING_URI": uri if fresh else with_schema(uri), **(env or {})}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=new_session,
    )


def invoke(folder: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> Invocation:
    """`python src/run.py ARGS...` from `folder` with the store at folder/mlflow.db (for module-scoped
    fixtures: one sweep feeding several tests)."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    if "MLFLOW_TRACKING_URI" not in (env or {}):  # a test that names its own store makes it as it says
        with_schema(uri)
    completed = subprocess.run(
        [sys.executable, str(RUN_PY), *args],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Invocation(completed.returncode, completed.stdout, completed.stderr, uri)


@pytest.fixture
def trainbench(tmp_path: Path):
    """Call `python src/run.py ARGS...` from tmp_path with the store at tmp_path/mlflow.db."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> Invocation:
        return invoke(tmp_path, *args, env=env, timeout=timeout)

    return run


@pytest.fixture
def postgres_cluster():
    """A fresh PostgreSQL with an empty `mlflow` database (`.uri`), removed afterwards."""
    if postgres_bin_dir() is None:
        pytest.skip(POSTGRES_MISSING)
    with PostgresCluster() as cluster:
        yield cluster


@pytest.fixture
def mlflow_server_sqlite(tmp_path: Path):
    """`mlflow server` on loopback over a fresh SQLite store in tmp_path, artifacts served from tmp_path."""
    with MlflowServer(tmp_path / "mlflow-server") as server:
        yield server


@pytest.fixture
def mlflow_server_postgres(tmp_path: Path, postgres_cluster: PostgresCluster):
    """`mlflow server` on loopback over a fresh PostgreSQL database (stopped before the database is)."""
    with MlflowServer(tmp_path / "mlflow-server", postgres_cluster.uri) as server:
        yield server


@pytest.fixture(scope="session")
def migrated_store() -> Path:
    """The session's empty store with its schema (template_store). Copy it (shutil.copy) to use it."""
    return template_store()
