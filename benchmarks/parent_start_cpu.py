"""CPU and wall seconds of each step a sweep's process takes before its first cell, in one process:

    python benchmarks/parent_start_cpu.py

CPU seconds hardly move with the machine's load where wall seconds do (a shared 2-core machine), so they say what
the start would take on an idle machine. The steps: importing Hydra and trainbench's runner, importing MLflow,
importing MLflow's SQLAlchemy store and client, opening a new SQLite store (a copy of the cached empty schema),
creating the experiment, listing the installed packages for the run's record.
"""

from __future__ import annotations

import tempfile
import time

cpu_began, wall_began = time.process_time(), time.perf_counter()


def lap(name: str) -> None:
    global cpu_began, wall_began
    cpu, wall = time.process_time(), time.perf_counter()
    print(f"{name:55s} cpu {cpu - cpu_began:5.2f} s  wall {wall - wall_began:5.2f} s", flush=True)
    cpu_began, wall_began = cpu, wall


def main() -> None:
    import hydra  # noqa: F401

    from trainbench import cli  # noqa: F401
    from trainbench.sweep.job import run_job  # noqa: F401

    lap("import hydra, trainbench.cli, trainbench.sweep.job")
    import mlflow  # noqa: F401

    lap("import mlflow")
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: F401
    from mlflow.tracking import MlflowClient  # noqa: F401

    lap("import MLflow's SQLAlchemy store and client")
    from trainbench.store import tracking

    with tempfile.TemporaryDirectory(prefix="trainbench-start-") as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        store = tracking.open_store(uri)
        lap("open a new store (template copy, MLflow's schema check)")
        tracking.experiment_id(store, "trainbench", uri)
        lap("create the experiment")
    tracking.installed_packages()
    lap("installed packages (run's record)")


if __name__ == "__main__":
    main()
