"""A soak, as trusted stores test themselves: a sweep runs while a second process imports, a third exports what was
imported (the sweep's runs are exported only once it ends), and chaos threads take the store's lock and SIGKILL a
running cell every KILL_EVERY_S; at the end every run must be closed, none duplicated, every point a finished cell
logged there, at least one export written, and every kind of chaos must have struck (the sweep runs on past
--seconds, up to STRIKE_GRACE_S, until each has).

    python benchmarks/soak.py [--seconds 600] [--folder DIR] [--server]

The store is SQLite (the lock is a write transaction held for LOCK_S, as another writer would). With --server every
process reaches it through an `mlflow server` (tests/servers.py) that a chaos thread SIGKILLs every BLINK_EVERY_S and
starts again BLINK_S later, inside the sweep's tracking.outage_s. Prints the counts and exits 1 when an invariant
fails. tests/test_soak.py runs short ones.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 3
CELL = ["model=mlp", "data=digits", "device=cpu", f"task.epochs={EPOCHS}", "tracking.system_metrics_interval_s=0",
        "data.num_samples=256", "data.num_val_samples=64", "cell.timeout_s=300"]  # fmt: skip
LOCK_S = 2.0  # a write transaction held this long, every LOCK_EVERY_S or so
LOCK_EVERY_S = 8.0
KILL_EVERY_S = 25.0  # a cell SIGKILLed this often
BLINK_EVERY_S, BLINK_S = 20.0, 5.0  # --server: the tracking server SIGKILLed this often, and started again this later
STRIKE_GRACE_S = 90  # past --seconds, the longest the soak waits for a kind of chaos that has not struck yet
STOP_BOUND_S = 120  # the sweep ends this soon after Ctrl-C, or the soak fails and lists its processes
SHELL = "import sys; from trainbench.store.sharing.commands import {0}; sys.exit({0}(sys.argv[1:]))"


def env_for(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update({"PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{store}"})
    return env


def export_document(runs: int) -> dict[str, object]:
    """A colleague's export of `runs` finished cells, each with a fresh id."""
    now = int(time.time() * 1000)
    records = [
        {
            "run_id": uuid.uuid4().hex,
            "run_name": f"colleague-{i}",
            "status": "FINISHED",
            "start_time": now,
            "end_time": now + 1000,
            "parent_run_id": None,
            "params": {"batch_size": "32"},
            "tags": {"trainbench.kind": "cell", "trainbench.outcome": "finished"},
            "metrics": {"samples_per_s": [[0, now, 1000.0 + i]]},
            "artifacts": {},
        }  # fmt: skip
        for i in range(runs)
    ]
    return {"format": "trainbench-export", "version": 1, "exported_at": "2026-11-28T00:00:00Z",
            "experiment": "colleague", "runs": records}  # fmt: skip


class Soak:
    def __init__(self, folder: Path, seconds: float, pause_s: float = 1.0, server: bool = False) -> None:
        """`pause_s`: the importer's pause between files, twice that the exporter's between exports (each a Python
        process importing MLflow: seconds of CPU on a small machine). `server`: every process reaches the store
        through an `mlflow server` over it, which a chaos thread kills and starts again."""
        self.folder, self.seconds, self.pause_s, self.with_server = folder, seconds, pause_s, server
        self.server: Any = None
        self.store = folder / "mlflow.db"
        self.env = env_for(self.store)
        self.stop = threading.Event()
        self.sweep_exit: int | None = None
        self.ran_on_s = 0.0  # past `seconds`, waiting for a kind of chaos to strike
        self.cells_started = threading.Event()  # the kill's and the blink's clocks start with the first cell
        self.counts: Counter[str] = Counter()
        self.imported_ids: list[str] = []  # ids of the files' runs whose import said so (exit 0)

    def python(self, code: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=self.folder, env=self.env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    def importer(self) -> None:
        number = 0
        while not self.stop.is_set():
            number += 1
            document = export_document(5)
            path = self.folder / f"import-{number}.json"
            path.write_text(json.dumps(document))
            for _ in range(2):  # the same file twice: the second adds nothing
                done = self.python(SHELL.format("import_main"), str(path), "--experiment", "imported")
                self.counts[f"import exit {done.returncode}"] += 1
                if done.returncode == 0:
                    self.imported_ids += [r["run_id"] for r in document["runs"]]  # type: ignore[index]
            self.stop.wait(self.pause_s)

    def exporter(self) -> None:
        while not self.stop.is_set():
            # The imported runs: finished, while the sweep's own stay unexportable until the sweep ends
            exported = self.folder / "exported.json"
            done = self.python(SHELL.format("export_main"), "--experiment", "imported", "-o", str(exported))
            self.counts[f"export exit {done.returncode}"] += 1
            self.stop.wait(2 * self.pause_s)

    def locker(self) -> None:
        while not self.stop.wait(random.uniform(0.5, 1.5) * LOCK_EVERY_S):
            if self.store.exists():
                with sqlite3.connect(self.store, timeout=60, isolation_level=None) as db:
                    db.execute("BEGIN IMMEDIATE")  # the store's write lock, held as a slow writer would
                    time.sleep(LOCK_S)
                    db.execute("COMMIT")
                self.counts["locks held"] += 1

    def killer(self, sweep: subprocess.Popen[str]) -> None:
        # Every KILL_EVERY_S, the next cell process seen: cells come and go between ticks of a slower loop
        self.cells_started.wait()
        while not self.stop.wait(KILL_EVERY_S):
            while not self.stop.is_set() and not kill_running_cell(sweep.pid, self.counts):
                time.sleep(0.2)

    def blinker(self) -> None:
        # Not before the sweep has reached the server: a server down at its start is refused (tested elsewhere)
        self.cells_started.wait()
        while not self.stop.wait(BLINK_EVERY_S):
            self.server.stop(kill=True)  # a crash: no shutdown handler runs
            self.counts["server blinks"] += 1
            time.sleep(BLINK_S)
            self.server.start()  # same port, same store

    def run(self) -> int:
        if not self.with_server:
            return self._run()
        sys.path.insert(0, str(ROOT / "tests"))
        from servers import MlflowServer  # the tests' real server, over this soak's SQLite file

        self.server = MlflowServer(self.folder / "server", store_uri=f"sqlite:///{self.store}").start()
        self.env["MLFLOW_TRACKING_URI"] = self.server.uri
        try:
            return self._run()
        finally:
            self.server.stop()

    def _run(self) -> int:
        sizes = ",".join(str(b) for b in (8, 16, 24, 32, 48, 64, 96, 128) * 40)  # more cells than the time allows
        sweep = subprocess.Popen(
            [sys.executable, str(ROOT / "src" / "run.py"), "-m", *CELL, f"batch_size={sizes}",
             f"hydra.sweep.dir={self.folder / 'multirun'}"],
            cwd=self.folder, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        chaos = [self.importer, self.exporter, self.locker] + ([self.blinker] if self.server is not None else [])
        threads = [threading.Thread(target=t, daemon=True) for t in chaos]
        threads.append(threading.Thread(target=self.killer, args=(sweep,), daemon=True))
        for thread in threads:
            thread.start()
        # The clock starts with the sweep's first cell: on a loaded machine the sweep's own start (Python, Hydra,
        # MLflow, the store's lock taken by the others) can take minutes, and a soak of none of its cells is none.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and sweep.poll() is None and not running_cells(sweep.pid):
            time.sleep(0.5)
        self.cells_started.set()
        time.sleep(self.seconds)
        # A soak whose chaos has not all struck runs on until it has: the kill finds no cell while the server's blink
        # (or a held lock) keeps the sweep between cells, and on a loaded 2-core machine that can fill the window
        waiting_since = time.monotonic()
        while time.monotonic() < waiting_since + STRIKE_GRACE_S and sweep.poll() is None and self.unstruck():
            time.sleep(0.5)
        self.ran_on_s = time.monotonic() - waiting_since
        os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C: the sweep records the running cell and ends
        try:
            _, err = sweep.communicate(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired as late:
            err = still_running(sweep, late)
        self.stop.set()
        self.cells_started.set()
        for thread in threads:
            thread.join(timeout=600)
        self.sweep_exit = sweep.returncode
        self.counts[f"sweep exit {sweep.returncode}"] += 1
        return self.verdict(err)

    def unstruck(self) -> list[str]:
        """The kinds of chaos that this soak's length promises and that have not struck yet."""
        promised = {
            "no cell SIGKILLed": (self.seconds >= KILL_EVERY_S, "cells SIGKILLed"),
            "no lock held": (self.seconds >= 2 * LOCK_EVERY_S, "locks held"),
            "no server blink": (self.server is not None and self.seconds >= BLINK_EVERY_S, "server blinks"),
        }
        return [failure for failure, (due, count) in promised.items() if due and not self.counts[count]]

    def verdict(self, sweep_stderr: str) -> int:
        with sqlite3.connect(self.store, timeout=60) as db:
            statuses = Counter(status for (status,) in db.execute("select status from runs"))
            origins = Counter(
                value for (value,) in db.execute("select value from tags where key = 'trainbench.import.run_id'")
            )
            finished_cells = [
                run_id
                for (run_id,) in db.execute(
                    "select r.run_uuid from runs r join tags k on k.run_uuid = r.run_uuid and k.key = "
                    "'trainbench.kind' and k.value = 'cell' join tags o on o.run_uuid = r.run_uuid and o.key = "
                    "'trainbench.outcome' and o.value = 'finished' join experiments e on e.experiment_id = "
                    "r.experiment_id where e.name = 'trainbench'"
                )
            ]
            short = [
                run_id
                for run_id in finished_cells
                if db.execute(
                    "select count(distinct step) from metrics where run_uuid = ? and key = 'val_accuracy'", (run_id,)
                ).fetchone()[0]
                != EPOCHS
            ]
        duplicated = {origin: n for origin, n in origins.items() if n > 1}
        missing = set(self.imported_ids) - set(origins)
        print(f"runs by status: {dict(statuses)}")
        print(f"sweep's finished cells: {len(finished_cells)}, with a point missing: {len(short)}")
        print(f"imported runs: {len(origins)} ({len(set(self.imported_ids))} reported imported), duplicated: "
              f"{len(duplicated)}, reported but absent: {len(missing)}")  # fmt: skip
        print(f"activity: {dict(sorted(self.counts.items()))}")
        if self.ran_on_s >= 1:
            print(f"ran on {self.ran_on_s:.0f} s past --seconds {self.seconds:g} until every kind of chaos had struck")
        (self.folder / "sweep-stderr.txt").write_text(sweep_stderr)
        tracebacks = sweep_stderr.count("Traceback")
        print(f"tracebacks on the sweep's stderr: {tracebacks}")
        if "NOT ENDED" in sweep_stderr or self.sweep_exit != 130:
            print(sweep_stderr[-4000:])
        failures = {
            "a run left RUNNING": statuses.get("RUNNING", 0),
            "a run imported twice": len(duplicated),
            "an import reported but absent": len(missing),
            "a finished cell missing a point": len(short),
            "a traceback": tracebacks,
            "the sweep not ended after Ctrl-C": sweep_stderr.count("NOT ENDED"),
            "the sweep ended before Ctrl-C, or not by it": int(self.sweep_exit != 130),
            "no export written": int(self.imported_ids != [] and not self.counts["export exit 0"]),
            **dict.fromkeys(self.unstruck(), 1),  # a soak whose chaos never struck proves nothing
        }
        broken = {what: n for what, n in failures.items() if n}
        print("soak: " + ("held" if not broken else "FAILED: " + ", ".join(f"{w} ({n})" for w, n in broken.items())))
        return 1 if broken else 0


def still_running(sweep: subprocess.Popen[str], late: subprocess.TimeoutExpired) -> str:
    """The sweep did not end STOP_BOUND_S after Ctrl-C: what each of its processes was doing, then SIGKILL. The
    returned text (its stderr so far and that list) goes to the verdict, which counts the sweep as not ended."""
    lines = [f"the sweep had not ended {STOP_BOUND_S} s after Ctrl-C; its processes:"]
    try:
        tree = [psutil.Process(sweep.pid), *psutil.Process(sweep.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    for process in tree:
        try:
            times = process.cpu_times()
            lines.append(f"  {process.pid} {process.status()} cpu {times.user + times.system:.1f} s: "
                         f"{' '.join(process.cmdline())[:300]}")  # fmt: skip
        except psutil.Error:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sweep.pid, signal.SIGKILL)
    _, err = sweep.communicate()
    so_far = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else (late.stderr or "")
    return so_far + (err or "") + "\n" + "\n".join(lines) + "\nNOT ENDED\n"


def running_cells(sweep_pid: int) -> list[psutil.Process]:
    try:
        tree = psutil.Process(sweep_pid).children(recursive=True)
        return [p for p in tree if "trainbench.cell.worker" in " ".join(p.cmdline())]
    except psutil.Error:
        return []


def kill_running_cell(sweep_pid: int, counts: Counter[str]) -> bool:
    """SIGKILL the running cell's process (not the sweep): the sweep must record it and go on. False: none ran."""
    killed = False
    for cell in running_cells(sweep_pid):
        try:
            cell.kill()
            counts["cells SIGKILLed"] += 1
            killed = True
        except psutil.Error:
            continue
    return killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--folder", default=None, help="keep the store here (default: a temporary folder)")
    parser.add_argument("--server", action="store_true", help="through an mlflow server that the chaos blinks")
    args = parser.parse_args()
    if args.folder:
        Path(args.folder).mkdir(parents=True, exist_ok=True)
        return Soak(Path(args.folder), args.seconds, server=args.server).run()
    with tempfile.TemporaryDirectory(prefix="soak-") as folder:
        return Soak(Path(folder), args.seconds, server=args.server).run()


if __name__ == "__main__":
    sys.exit(main())
