"""Where the main job's wall time goes, on a fresh store: how soon it shows something and starts its first cell.

    python benchmarks/start_time.py [--runs 3] [ARGS...]      # ARGS: overrides for `python src/run.py`

Runs the README's main job (`python src/run.py`, plus ARGS) --runs times, each in a new temporary folder with a
new SQLite store there (what a user's first sweep meets), with TRAINBENCH_TIMELINE set so every process of the
sweep stamps its phases, and its output read line by line as it comes. Prints, as the median and range over the
runs:

- Python start: an interpreter's start (`python -c pass`, timed on its own) for each Python process the job
  starts before it prints its summary (the sweep's and the cell's);
- first phase line: from the command's start to its first line about the cell (`[cell 1/1] ...`);
- first cell start: from the command's start to the cell's process being started;
- framework import: inside the cell (`cell: config read` to `cell: framework imported`);
- timed epochs: the run's `total_time_s` (the epochs' training, as recorded);
- other machines' runs: importing the published and contributed runs into the new store, which a new store's
  first sweep does after its summary (TRAINBENCH_SHARED_RUNS=off skips it; --no-shared sets that);
- trainbench's own work: the rest of the total (composing and judging, the store, the run's records, data, model,
  FLOP count, validation, the summary and the comparison page), without and with the import above;
- total: the command's wall time.

Then each phase of the timeline (median seconds since the previous stamp). The cache of MLflow's empty store
(trainbench.store_template) is whatever this user has: run once before to measure a machine that has it, or with
XDG_CACHE_HOME pointing at an empty folder to measure a machine's very first sweep.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "src" / "run.py"


@dataclass
class Run:
    figures: dict[str, float] = field(default_factory=dict)
    phases: list[tuple[str, float]] = field(default_factory=list)


def interpreter_start_s(repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def read_timeline(path: Path) -> list[tuple[float, int, str]]:
    rows = []
    for line in path.read_text().splitlines():
        stamp, pid, phase = line.split(" ", 2)
        rows.append((float(stamp), int(pid), phase))
    return rows


def stamp_of(rows: list[tuple[float, int, str]], prefix: str) -> float:
    return next(stamp for stamp, _, phase in rows if phase.startswith(prefix))


def timed_epochs_s(uri: str) -> float:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([experiment.experiment_id])
    return float(run.data.metrics["total_time_s"])


def one_run(args: list[str], python_start_s: float, shared: bool) -> Run:
    with tempfile.TemporaryDirectory(prefix="trainbench-start-") as folder:
        timeline = Path(folder) / "timeline.txt"
        uri = f"sqlite:///{folder}/mlflow.db"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": uri,
            "TRAINBENCH_TIMELINE": str(timeline),
            "PYTHONUNBUFFERED": "1",
        }
        if not shared:
            env["TRAINBENCH_SHARED_RUNS"] = "off"
        started = time.time()
        first_line = None
        imported_s = 0.0
        import_began = None
        with subprocess.Popen(
            [sys.executable, str(RUN_PY), *args],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                now = time.time()
                if first_line is None and line.startswith("[cell"):
                    first_line = now - started
                if line.startswith("Importing other machines' runs"):
                    import_began = now
                elif import_began is not None and line.startswith("Other machines' runs"):
                    imported_s, import_began = now - import_began, None
        total = time.time() - started
        if process.returncode != 0:
            raise SystemExit(f"the main job failed (exit {process.returncode}): run it by hand to see why")
        rows = read_timeline(timeline)
        framework = stamp_of(rows, "cell: framework imported") - stamp_of(rows, "cell: config read")
        epochs = timed_epochs_s(uri)
        python = python_start_s * 2  # the sweep's process and the cell's
        own = total - python - framework - epochs - imported_s
        run = Run(
            {
                "Python start (2 processes)": python,
                "first phase line": first_line if first_line is not None else float("nan"),
                "first cell start": stamp_of(rows, "job: starting the cell's process") - started,
                "framework import (in the cell)": framework,
                "timed epochs (total_time_s)": epochs,
                "other machines' runs imported": imported_s,
                "trainbench's own work": own,
                "trainbench's own work, with that import": own + imported_s,
                "total": total,
            }
        )
        previous = started
        for stamp, _, phase in rows:
            run.phases.append((phase, stamp - previous))
            previous = stamp
        return run


def spread(values: list[float]) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:8.2f}"
    return f"{median:8.2f}  ({min(values):.2f} - {max(values):.2f})"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} cores"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("mlflow", "hydra-core", "torch", "alembic", "sqlalchemy"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} absent")
    return ", ".join(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--no-shared", action="store_true", help="TRAINBENCH_SHARED_RUNS=off: no import of others' runs"
    )
    parser.add_argument("overrides", nargs="*", help="overrides for python src/run.py (none: the main job)")
    options = parser.parse_args()
    print(f"python src/run.py {' '.join(options.overrides)}".rstrip() + f", {options.runs} run(s), each on a new store")
    print(f"{platform.platform()}, Python {platform.python_version()}; load before: {load()}")
    print(f"versions: {versions()}")
    python_start = interpreter_start_s()
    runs = []
    for index in range(options.runs):
        runs.append(one_run(options.overrides, python_start, shared=not options.no_shared))
        print(f"  run {index + 1}: total {runs[-1].figures['total']:.2f} s; load: {load()}", flush=True)
    print(f"\n{'seconds, median (min - max) over runs':44s}")
    for name in runs[0].figures:
        print(f"{name:44s}{spread([run.figures[name] for run in runs])}")
    print("\ntimeline (seconds since the previous stamp; the first since the command's start), median:")
    for position, (phase, _) in enumerate(runs[0].phases):
        values = [run.phases[position][1] for run in runs if position < len(run.phases)]
        print(f"  {phase:44s}{statistics.median(values):8.2f}")
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
