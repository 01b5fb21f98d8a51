"""Where the main job's wall time goes, on a fresh store: how soon it shows something and starts its first cell.

    python benchmarks/start_time.py [--runs 3] [--no-shared] [ARGS...]   # ARGS: overrides for `python src/run.py`

Runs the README's main job (`python src/run.py`, plus ARGS) --runs times, each in a new temporary folder with a
new SQLite store there (what a user's first sweep meets), with TRAINBENCH_TIMELINE set so every process of the
sweep stamps its phases (wall clock and its own CPU seconds), and its output read line by line as it comes.
Prints, as the median and range over the runs, wall seconds:

- Python start: an interpreter's start (`python -c pass`, timed on its own) for each Python process the job
  starts before it prints its summary (the sweep's and the cell's);
- first phase line: from the command's start to its first line of output (the first cell's `[cell 1/1] ...`);
- first cell's process started: from the command's start to the cell's process being started (before the store
  opens, where the sweep starts it early: trainbench.sweep.cell_process.prestart);
- first cell's run handed to its process: to the cell's process being given its run (it computes from then on);
- framework import: inside the cell (its adapter made: the framework imported, and what it imports later anyway);
- timed epochs: the run's `total_time_s` (the epochs' training, as recorded);
- other machines' runs: importing the published and contributed runs into the new store, which a new store's
  first sweep does after its summary (TRAINBENCH_SHARED_RUNS=off skips it; --no-shared sets that);
- trainbench's own work: the rest of the total (composing and judging, the store, the run's records, data, model,
  FLOP count, validation, the summary and the comparison page), without and with the import above. Where the
  cell's framework loads while the sweep opens the store, the two overlap: this is trainbench's share of the wall
  time the user waits, not the sum of its processes' work;

and CPU seconds (user + system), which the load of a shared machine hardly changes:

- the whole command (every process it waited for);
- the framework's import, in the cell's process;
- the cell's training (from its first step to its result: the timed epochs, validation and their records);
- trainbench's own work: the whole command less those two and the interpreters' starts;
- to the first cell's run: the sweep's process (to handing the run over) and the cell's (to its framework
  loaded): on an idle machine with two cores, the first cell's run is handed over after about the larger of the
  two, plus its start.

Then each phase of the timeline (median seconds since the command's start). The cache of MLflow's empty store
(trainbench.store.store_template) is whatever this user has: run once before to measure a machine that has it, or with
XDG_CACHE_HOME pointing at an empty folder to measure a machine's very first sweep.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
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


Row = tuple[float, int, float, str]  # wall stamp, pid, the process's CPU seconds so far, phase


def read_timeline(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines():
        stamp, pid, rest = line.split(" ", 2)
        cpu, _, phase = rest.partition(" ")
        try:
            rows.append((float(stamp), int(pid), float(cpu), phase))
        except ValueError:  # a checkout from before the stamps carried CPU seconds
            rows.append((float(stamp), int(pid), float("nan"), rest))
    return rows


def row_of(rows: list[Row], prefix: str) -> Row | None:
    return next((row for row in rows if row[3].startswith(prefix)), None)


def stamp_of(rows: list[Row], prefix: str) -> float:
    row = row_of(rows, prefix)
    if row is None:
        raise SystemExit(f"the timeline has no `{prefix}` stamp: is this trainbench's code?")
    return row[0]


def cpu_of(rows: list[Row], prefix: str) -> float:
    row = row_of(rows, prefix)
    return row[2] if row is not None else 0.0


def framework_import(rows: list[Row]) -> tuple[float, float]:
    """(wall, CPU) seconds of the cell's framework import: in a prestarted process, its preload; in the cell."""
    wall = stamp_of(rows, "cell: framework imported") - stamp_of(rows, "cell: config read")
    cpu = cpu_of(rows, "cell: framework imported") - cpu_of(rows, "cell: config read")
    if row_of(rows, "cell: framework preloaded") is not None:
        started = "cell: python started, trainbench imported (prestarted)"
        wall += stamp_of(rows, "cell: framework preloaded") - stamp_of(rows, started)
        cpu += cpu_of(rows, "cell: framework preloaded") - cpu_of(rows, started)
    return wall, cpu


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
        cpu_before = children_cpu_s()
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
                if first_line is None:
                    first_line = now - started
                if line.startswith("Importing other machines' runs"):
                    import_began = now
                elif import_began is not None and line.startswith("Other machines' runs"):
                    imported_s, import_began = now - import_began, None
        total = time.time() - started
        cpu_total = children_cpu_s() - cpu_before
        if process.returncode != 0:
            raise SystemExit(f"the main job failed (exit {process.returncode}): run it by hand to see why")
        rows = read_timeline(timeline)
        framework, framework_cpu = framework_import(rows)
        epochs = timed_epochs_s(uri)
        python = python_start_s * 2  # the sweep's process and the cell's
        own = total - python - framework - epochs - imported_s
        handed = stamp_of(rows, "job: starting the cell's process")
        prestarted = row_of(rows, "parent: cell's process prestarted")
        training_cpu = cpu_of(rows, "cell: result written") - cpu_of(rows, "cell: ready for the first step")
        cell_ready = "cell: framework preloaded" if prestarted is not None else "cell: framework imported"
        run = Run(
            {
                "Python start (2 processes)": python,
                "first phase line": first_line if first_line is not None else float("nan"),
                "first cell's process started": (prestarted[0] if prestarted else handed) - started,
                "first cell's run handed to its process": handed - started,
                "framework import (in the cell)": framework,
                "timed epochs (total_time_s)": epochs,
                "other machines' runs imported": imported_s,
                "trainbench's own work": own,
                "trainbench's own work, with that import": own + imported_s,
                "total": total,
                "CPU s: the whole command": cpu_total,
                "CPU s: framework import": framework_cpu,
                "CPU s: the cell's training (first step to result)": training_cpu,
                "CPU s: trainbench's own work (incl. any import above)": cpu_total
                - framework_cpu
                - training_cpu
                - python,
                "CPU s: sweep's process, to the run handed over": cpu_of(rows, "job: starting the cell's process"),
                "CPU s: cell's process, to its framework loaded": cpu_of(rows, cell_ready),
            }
        )
        for stamp, _, _, phase in rows:
            run.phases.append((phase, stamp - started))
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
    print(f"\n{'seconds, median (min - max) over runs':58s}")
    for name in runs[0].figures:
        print(f"{name:58s}{spread([run.figures[name] for run in runs])}")
    print("\ntimeline: seconds since the command's start, median (the sweep's and the cell's processes interleave):")
    for phase, _ in runs[0].phases:
        values = [seconds for run in runs for name, seconds in run.phases if name == phase]
        print(f"  {phase:58s}{statistics.median(values):8.2f}")
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
