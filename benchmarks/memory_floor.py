"""The smallest `cell.memory_limit_mb` with which each framework imports and runs a tiny cell.

python benchmarks/memory_floor.py [--frameworks pytorch tensorflow jax] [--resolution-mb 16] [--write results/]

For each framework, a tiny training cell (model=mlp, data=digits, task.epochs=1, device=cpu) runs exactly as a
sweep runs it (trainbench.sweep.cell_run.run_cell: the run created in a scratch MLflow store, the cell's own
process under RLIMIT_DATA as cell/worker.py applies it, logging into the run), with limits bisected between
one that fails and one that finishes. The judge's floor (min_memory_mb) is bypassed on purpose: it is what is
being measured. Prints the floor per framework and what min_memory_mb() should say (floor + MARGIN, rounded up
to a multiple of ROUND_MB); --write adds a dated markdown file with the machine and versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run as a script, from anywhere
import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from trainbench.cell.order import CellOrder, StoreAddress  # noqa: E402
from trainbench.config import CONF_DIR, validate  # noqa: E402
from trainbench.measure import hardware
from trainbench.store import tracking  # noqa: E402
from trainbench.sweep.cell_run import Store, run_cell  # noqa: E402

# cell.timeout_s: a cell that spins at its cap forever (a library retrying a failed allocation) does not fit.
TINY_CELL = ["model=mlp", "data=digits", "task.epochs=1", "device=cpu", "batch_size=64",
             "tracking.system_metrics_interval_s=0", "cell.timeout_s=300"]  # fmt: skip
MARGIN = 0.25  # headroom over the measured floor: allocator and thread-count differences between machines
ROUND_MB = 128
PACKAGES = ("torch", "tensorflow", "keras", "jax", "jaxlib", "mlflow", "numpy")


def tiny_cell(framework: str):  # -> CellConfig
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=[f"framework={framework}", *TINY_CELL]))


def finishes(framework: str, limit_mb: int, store: Store) -> tuple[bool, str]:
    """Run the tiny cell under `limit_mb`; (finished?, its outcome and reason)."""
    tiny = tiny_cell(framework)
    cell = dataclasses.replace(tiny, cell=dataclasses.replace(tiny.cell, memory_limit_mb=limit_mb))
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as quiet:  # the cells' progress lines and tracebacks are not the point here
        stderr, sys.stderr = sys.stderr, quiet
        os.dup2(quiet.fileno(), 1)
        try:
            overrides = (f"framework={framework}", *TINY_CELL, f"cell.memory_limit_mb={limit_mb}")
            address = StoreAddress(store.uri, store.experiment_id, None, "memory-floor")
            result = run_cell(CellOrder(cell, overrides, address), store)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sys.stderr = stderr
    return result.outcome == "finished", f"{result.outcome}: {result.reason or ''}"[:160]


def floor_of(framework: str, store: Store, low: int, high: int, resolution: int) -> int:
    """Bisect the smallest limit (to `resolution` MB) with which the cell finishes; `low` must fail."""
    fits, why = finishes(framework, high, store)
    print(f"  {framework} @ {high} MB: {why}", flush=True)
    while not fits:
        low, high = high, high * 2
        fits, why = finishes(framework, high, store)
        print(f"  {framework} @ {high} MB: {why}", flush=True)
    while high - low > resolution:
        middle = (low + high) // 2
        fits, why = finishes(framework, middle, store)
        print(f"  {framework} @ {middle} MB: {why}", flush=True)
        low, high = (low, middle) if fits else (middle, high)
    again, why = finishes(framework, high, store)  # the floor must be reproducible, not a lucky run
    print(f"  {framework} @ {high} MB again: {why}", flush=True)
    return high if again else floor_of(framework, store, high, high * 2, resolution)


def recommended(floor_mb: int) -> int:
    return math.ceil(floor_mb * (1 + MARGIN) / ROUND_MB) * ROUND_MB


def installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", default=["pytorch", "tensorflow", "jax"])
    parser.add_argument("--resolution-mb", type=int, default=16)
    parser.add_argument("--write", type=Path, help="folder for <date>-memory-floor.md (results/)")
    args = parser.parse_args()

    floors: dict[str, int] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="trainbench-memory-floor-") as scratch:
        uri = f"sqlite:///{scratch}/mlflow.db"
        client = tracking.open_store(uri)
        store = Store(client, uri, tracking.experiment_id(client, "memory-floor", uri), None, "memory-floor")
        for framework in args.frameworks:
            print(f"{framework}:", flush=True)
            floors[framework] = floor_of(framework, store, 64, 1024, args.resolution_mb)

    host = hardware.host_tags()
    machine = (f"{host.get('hw.cpu', platform.processor())}, {os.cpu_count()} logical CPUs, "
               f"{host.get('hw.memory_gb', '?')} GB, {host.get('hw.os', platform.system())}")  # fmt: skip
    versions = ", ".join(f"{p} {installed(p)}" for p in PACKAGES)
    lines = [
        f"## {time.strftime('%Y-%m-%d')} — memory floor per framework (benchmarks/memory_floor.py)",
        "",
        f"- Machine: {machine}; Python {platform.python_version()}.",
        f"- Versions: {versions}.",
        f"- Cell: `{' '.join(TINY_CELL)}`, RLIMIT_DATA as cell/worker.py sets it, bisected to "
        f"{args.resolution_mb} MB, the floor confirmed by a second run; {time.time() - started:.0f} s in all.",
        f"- min_memory_mb() = floor + {MARGIN:.0%}, rounded up to a multiple of {ROUND_MB} MB.",
        "",
        "| framework | floor (MB) | min_memory_mb() |",
        "|---|---|---|",
        *[f"| {name} | {floor} | {recommended(floor)} |" for name, floor in floors.items()],
    ]
    print("\n".join(lines), flush=True)
    if args.write:
        path = args.write / f"{time.strftime('%Y-%m-%d')}-memory-floor.md"
        path.write_text("\n".join(lines) + "\n")
        print(f"written: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
