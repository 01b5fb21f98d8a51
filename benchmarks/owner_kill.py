"""How long a cell goes on after the sweep that owns it is SIGKILLed, for each local launcher.

    python benchmarks/owner_kill.py [--launchers basic,joblib,submitit_local] [--repeats 3]

Starts a sweep of one long CPU cell (model=mlp data=digits, many epochs) through the real entry point, waits until
the cell's process is computing, SIGKILLs the sweep's own process (nothing else: no process group), and polls
every process of the sweep's tree every 5 ms: prints, per launcher, the seconds from the SIGKILL until the cell's
last process is gone, until every process the sweep started is gone, the cell's run's status (the cell records its
own run `killed`), and the temporary folders and shared-memory files the cell left. docs/sweeps.md states the bound.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
CELL = ["model=mlp", "data=digits", "device=cpu", "task.epochs=100000", "cell.timeout_s=300"]
LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"],
    "submitit_local": ["hydra/launcher=submitit_local"],
}
POLL_S = 0.005


def leftovers(temp: Path) -> set[str]:
    """What a killed cell may leave behind: the sweep's temporary folder's contents (a folder of its own, so that
    other programs' files are not counted) and every shared-memory file."""
    found = {str(p) for p in temp.glob("trainbench-cell-*")}  # not the frameworks' caches (torchinductor_*)
    shm = Path("/dev/shm")
    if shm.is_dir():
        found |= {str(p) for p in shm.iterdir()}
    return found


def cell_processes(sweep: psutil.Process) -> list[psutil.Process]:
    try:  # a process may end while the tree is read (a launcher's short-lived helpers): read it again
        tree = sweep.children(recursive=True)
        cells = [p for p in tree if "trainbench.cell.worker" in " ".join(p.cmdline())]
        return [p for c in cells for p in (c, *c.children(recursive=True))]
    except psutil.Error:
        return []


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def once(launcher: str, folder: Path) -> dict[str, object]:
    store = folder / "mlflow.db"
    temp = folder / "tmp"
    temp.mkdir()
    before = leftovers(temp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["TMPDIR"] = str(temp)
    env["PYTHONPATH"] = str(ROOT / "src")
    sweep_process = subprocess.Popen(
        [sys.executable, str(ROOT / "src" / "run.py"), "-m", *CELL, *LAUNCHERS[launcher],
         f"tracking.uri=sqlite:///{store}", f"hydra.sweep.dir={folder / 'multirun'}"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    sweep = psutil.Process(sweep_process.pid)
    deadline = time.monotonic() + 120
    cells: list[psutil.Process] = []
    while time.monotonic() < deadline:
        cells = cell_processes(sweep)
        # computing: past its imports (a few CPU seconds) and busy
        if cells and sum(c.cpu_times().user for c in cells if not gone(c)) > 6:
            break
        time.sleep(0.2)
    else:
        sweep_process.kill()
        raise RuntimeError(f"{launcher}: the cell did not start computing within 120 s")
    tree = [p for p in sweep.children(recursive=True)]
    os.kill(sweep.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    sweep_process.wait()
    cell_end = everything_end = None
    while time.monotonic() - killed_at < 60:
        now = time.monotonic() - killed_at
        if cell_end is None and all(gone(c) for c in cells):
            cell_end = now
        if all(gone(p) for p in tree):
            everything_end = now
            if cell_end is None and all(gone(c) for c in cells):
                cell_end = now  # the cells ended between the two looks above
            break
        time.sleep(POLL_S)
    for process in tree:  # never leave one behind, whatever the figures
        if not gone(process):
            process.kill()
    statuses, closed = cell_statuses(store), None
    while time.monotonic() - killed_at < 60:  # the cell hands its run's closing to a small process of its own
        statuses = cell_statuses(store)
        if statuses and "RUNNING" not in statuses and not (leftovers(temp) - before):
            closed = time.monotonic() - killed_at
            break
        time.sleep(0.05)
    return {"cell_end_s": cell_end, "all_end_s": everything_end, "status": statuses, "closed_s": closed,
            "left": sorted(leftovers(temp) - before)}  # fmt: skip


def cell_statuses(store: Path) -> list[str]:
    query = (
        "select status from runs r join tags t on r.run_uuid = t.run_uuid "
        "where t.key = 'trainbench.kind' and t.value = 'cell'"
    )
    with sqlite3.connect(store, timeout=30) as db:
        return [row[0] for row in db.execute(query)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launchers", default="basic,joblib,submitit_local")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'launcher':16} {'cell gone (s)':>20} {'all gone (s)':>20} {'run closed (s)':>20}  cell run  left")
    for launcher in args.launchers.split(","):
        rows = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="owner-kill-") as folder:
                rows.append(once(launcher, Path(folder)))
        cell = [r["cell_end_s"] for r in rows if r["cell_end_s"] is not None]
        every = [r["all_end_s"] for r in rows if r["all_end_s"] is not None]
        shown = "  ".join(f"{v:.2f}" for v in cell)
        shown_all = "  ".join(f"{v:.2f}" for v in every)
        shown_closed = "  ".join("never" if r["closed_s"] is None else f"{r['closed_s']:.2f}" for r in rows)
        statuses = sorted({s for r in rows for s in r["status"]})  # type: ignore[attr-defined]
        left = sum(len(r["left"]) for r in rows)  # type: ignore[arg-type]
        print(f"{launcher:16} {shown:>20} {shown_all:>20} {shown_closed:>20}  {','.join(statuses):8}  {left}")
        if cell:
            print(f"{'':16} median {statistics.median(cell):.2f} s, max {max(cell):.2f} s")
        for r in rows:
            for path in r["left"]:  # type: ignore[attr-defined]
                print(f"{'':16} left: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
