"""Where a cell's time goes before its first step (and after its last), measured through the real entry point.

    python benchmarks/cell_overhead.py [--framework pytorch] [--repeats 3]

Runs `python src/run.py device=cpu task.epochs=0` (a cell that builds and records its model without training)
and `device=gpu` (on a machine without one: how long finding "no GPU" takes) with TRAINBENCH_TIMELINE set,
so every process of the sweep stamps its phases; prints each phase's median over the repeats, and what a
cell costs beyond importing its framework. The framework's import is timed in a process of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = {
    "pytorch": "import torch, torchvision",
    "tensorflow": "import tensorflow, keras",
    "jax": "import jax, keras",
    "mlx": "import mlx.core, mlx.nn",
}
# What a cell costs that is neither its framework's import nor its work: its job, its run, its process's start
# and end (the interpreter's teardown, the launcher logging the result and closing the run). Frameworks import
# lazily (Keras on TensorFlow inside "device selected", torchvision inside "data loaded"), so the import is
# measured on its own and the overhead is the sum of these phases, not a remainder.
OVERHEAD = (
    "job: started",
    "job: run created",
    "job: starting the cell's process",
    "cell: python started, trainbench imported",
    "cell: config read",
    "cell: hardware probed",
    "cell: ready for the first step",
    "job: the cell's process ended",
)


def timed(command: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def phases(timeline: Path, started: float) -> list[tuple[str, float]]:
    """(phase, seconds since the previous stamp), the first measured from the command's start."""
    rows, previous = [], started
    for line in timeline.read_text().splitlines():
        stamp, _, _, phase = line.split(" ", 3)
        rows.append((phase, float(stamp) - previous))
        previous = float(stamp)
    return rows


def run_cell(framework: str, device: str, folder: str) -> tuple[float, list[tuple[str, float]]]:
    timeline = Path(folder) / f"timeline-{device}.txt"
    timeline.unlink(missing_ok=True)
    env = {**os.environ, "TRAINBENCH_TIMELINE": str(timeline), "MLFLOW_TRACKING_URI": f"sqlite:///{folder}/mlflow.db"}
    started = time.time()
    total = timed(
        [
            sys.executable,
            str(ROOT / "src" / "run.py"),
            f"framework={framework}",
            f"device={device}",
            "task.epochs=0",
            "tracking.system_metrics_interval_s=0",
        ],
        env,
        folder,
    )
    return total, phases(timeline, started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="pytorch", choices=sorted(IMPORTS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainbench-overhead-") as folder:
        run_cell(args.framework, "cpu", folder)  # the store's creation, caches: not what is measured
        imports = [
            timed([sys.executable, "-c", IMPORTS[args.framework]], dict(os.environ), folder)
            for _ in range(args.repeats)
        ]
        runs = [run_cell(args.framework, "cpu", folder) for _ in range(args.repeats)]
        no_gpu = [run_cell(args.framework, "gpu", folder) for _ in range(args.repeats)]
    framework_import = statistics.median(imports)
    print(f"{args.framework} import alone, with Python's start: {framework_import:.2f} s (median of {args.repeats})")
    for title, measured in (("epochs=0 cell on the CPU", runs), ("device=gpu without a GPU", no_gpu)):
        total = statistics.median(t for t, _ in measured)
        print(f"\n{title}: {total:.2f} s in all")
        names = [name for name, _ in measured[0][1]]
        medians = {name: statistics.median(dict(p).get(name, 0.0) for _, p in measured) for name in names}
        for name in names:
            print(f"  {medians[name]:6.2f} s  {name}")
        per_sweep = sum(v for k, v in medians.items() if k.startswith("parent:"))
        per_cell = sum(medians.get(name, 0.0) for name in OVERHEAD)
        rest = total - per_sweep - per_cell
        print(f"  once per sweep (the parent: Hydra, MLflow, the store): {per_sweep:.2f} s")
        print(f"  per cell, its own overhead (job, run, process start and end): {per_cell:.2f} s")
        print(
            f"  the rest: importing {args.framework} and the cell's work or device probe: {rest:.2f} s "
            f"({args.framework}'s import alone: {framework_import:.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
