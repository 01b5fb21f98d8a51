"""trainbench's part in whichever Hydra launcher runs a sweep's cells: how many at once, and that none outlives
the sweep.

How many: a launcher that runs cells side by side on this machine runs at most as many as there are cells to
run and as the machine has cores for (its cores over `cell.cpus`, one core a cell when unset). joblib starts
every worker it is allowed at once, each a Python importing Hydra and trainbench: `hydra.launcher.n_jobs=1000`
on a 2-cell sweep started 1000 processes, 20 GB, a load of 90. A request above the bound is cut, in one line.

None outlives the sweep: a launcher's worker on this machine (a joblib/loky worker, a submitit job, a Ray
worker) dies with the sweep's process, however that ends (SIGKILL included). Like a cell's process
(cell/worker.py) it gets the kernel's parent-death signal when the sweep is its parent (Linux), and on every
system a thread that checks every second that the sweep's process is still there. It dies at once (SIGKILL):
the cell it was running notices its launcher's death within a second and records its own run `killed`
(cell/worker.py), and a run it had not handed to a cell yet is closed `lost` by the next invocation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from trainbench.cell.cpu_ranks import cores_here

# The sweep's process, as `pid:start time`, for the processes its launcher starts (they inherit it).
SWEEP_PROCESS_ENV = "TRAINBENCH_SWEEP_PROCESS"
SWEEP_CHECK_S = 0.1  # a job whose sweep is not its parent (submitit_local) looks this often: cells end within 1 s
_watching = False


# ------------------------------------------------------------------------------------------------ how many


def bound_parallelism(
    requested: int | None, cells: int, cores: int, cpus_per_cell: int | None
) -> tuple[int | None, str | None]:
    """How many cells may run at once, and why when that is fewer than asked. `requested` is joblib's n_jobs:
    None or 0 left to joblib (its default, its error), a negative number counted from the cores as joblib
    counts it (-1: all of them). The reason names what bounds it, the cells before the cores."""
    if not requested:
        return requested, None
    wanted = requested if requested > 0 else max(1, cores + 1 + requested)
    per_cell = max(1, cpus_per_cell or 1)
    by_cores = max(1, cores // per_cell)
    bound = max(1, min(wanted, cells, by_cores))
    if bound >= wanted:
        return wanted, None
    if bound == cells:
        return bound, f"{cells} cell{'s' if cells != 1 else ''}"
    return bound, f"{cores} cores" + (f", cell.cpus={cpus_per_cell}" if cpus_per_cell else "")


def prepare(launcher: Any, jobs: int, cpus_per_cell: int | None) -> int:
    """Before `launcher` runs `jobs` cells: mark this process as the sweep for the processes the launcher starts,
    bound how many cells run at once, and have a joblib launcher's workers die with the sweep from their first
    moment (loky's initializer runs before a worker takes any job). Returns how many jobs to hand the launcher
    at a time: submitit_local starts a process for every job it is given at once."""
    mark_sweep_process()
    kind = type(launcher).__module__ + "." + type(launcher).__name__
    settings = getattr(launcher, "joblib", None)
    if kind.endswith(".JoblibLauncher") and isinstance(settings, dict):
        requested = settings.get("n_jobs")
        bound, why = bound_parallelism(requested, jobs, cores_here(), cpus_per_cell)
        settings["n_jobs"] = bound
        if why and requested and requested > 0:
            _say(f"hydra.launcher.n_jobs={requested} cut to {bound} ({why})")
        settings["initializer"] = worker_started
        settings["initargs"] = (os.getpid(),)
    elif kind.startswith("hydra_plugins.hydra_submitit_launcher.") and kind.endswith(".LocalLauncher"):
        bound, why = bound_parallelism(-1, jobs, cores_here(), cpus_per_cell)
        if bound is not None and bound < jobs:
            _say(f"hydra/launcher=submitit_local runs {bound} cell{'s' if bound != 1 else ''} at a time ({why})")
            return bound
    return jobs


def mark_sweep_process() -> None:
    """Mark this process as the sweep for the processes it starts (in_the_sweeps_process, die_with_sweep)."""
    os.environ[SWEEP_PROCESS_ENV] = _identity(os.getpid())


@contextlib.contextmanager
def ctrl_c_for_the_sweep_alone(launcher: Any) -> Iterator[None]:
    """While a joblib launcher runs cells in workers of its own, Ctrl-C is the sweep's alone: the sweep stops the
    workers and their cells (joblib kills each tree) and records the runs. A worker must not take it itself: one
    still importing joblib (its first half second) would print a KeyboardInterrupt traceback.

    A process starts with the signal mask of the thread that started it: SIGINT is blocked in this (the main)
    thread while the launcher starts its workers, so they and their cells never get it. This process still
    does: the kernel hands it to a thread that does not block it (one is started here), and Python runs the
    sweep's handler in the main thread, which joblib wakes every 10 ms while it waits for results. Python's
    multiprocessing unblocks SIGINT whenever it starts its resource tracker (loky's semaphores start it):
    started first, here, it is not started again under the block."""
    settings = getattr(launcher, "joblib", None)
    if not isinstance(settings, dict) or not settings.get("n_jobs") or settings["n_jobs"] == 1:
        yield  # no launcher workers: the cells run from this process and take Ctrl-C themselves
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    threading.Thread(target=_take_signals, name="ctrl-c", daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _take_signals() -> None:
    """A thread that blocks no signal, for the kernel to deliver SIGINT to while the main thread blocks it."""
    threading.Event().wait()


def stop_local_workers() -> None:
    """The sweep is stopping while its launcher runs: end the processes a local launcher started for the cells
    and their cells with them (SIGKILL to each tree, as joblib ends its own workers); the sweep then records
    their runs `killed`. submitit_local's job controllers are made to outlive the Python that started them."""
    import psutil

    for child in psutil.Process().children():
        try:
            if "submitit.local._local" not in " ".join(child.cmdline()):
                continue
            tree = [child, *child.children(recursive=True)]
        except psutil.Error:
            continue
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(tree, timeout=5)


def _say(line: str) -> None:
    sys.stderr.write(f"trainbench: {line}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------ none outlives it


def worker_started(sweep_pid: int) -> None:
    """A joblib (loky) worker's first act: leave Ctrl-C to the sweep, print nothing unredacted, die with it."""
    # Ctrl-C on a terminal reaches every process of the sweep. The sweep stops its launcher's workers and
    # records the cells; a KeyboardInterrupt here would only print loky's traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from trainbench.store.tracking import quiet_logs

    quiet_logs()
    _die_with(sweep_pid, os.environ.get(SWEEP_PROCESS_ENV, ""))


def in_the_sweeps_process() -> bool:
    """Whether this is the sweep's own process (the basic launcher runs its cells here, one at a time), not a
    launcher's worker or a job on another machine."""
    return os.environ.get(SWEEP_PROCESS_ENV, "").split(":", 1)[0] == str(os.getpid())


def die_with_sweep() -> None:
    """In a job's process: when the sweep that launched it runs on this machine and is an ancestor of this
    process (a joblib worker, a submitit_local job under its controller, a local Ray worker), die with it.
    Elsewhere (a Slurm node, a Ray cluster), and in the sweep's own process, nothing changes."""
    identity = os.environ.get(SWEEP_PROCESS_ENV, "")
    pid_text = identity.split(":", 1)[0]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return
    import psutil

    try:
        ancestors = [(p.pid, p.create_time()) for p in psutil.Process().parents()]
    except psutil.Error:
        return
    if any(_identity(pid, started) == identity for pid, started in ancestors):
        _die_with(int(pid_text), identity)


def _die_with(sweep_pid: int, identity: str) -> None:
    """SIGKILL this process when the sweep's process is gone: the kernel's parent-death signal where the sweep is
    the parent (Linux), and a thread that looks every SWEEP_CHECK_S. Once per process."""
    global _watching
    if _watching:
        return
    _watching = True
    if sys.platform.startswith("linux") and os.getppid() == sweep_pid:
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)

    def alive() -> bool:
        if not identity:  # no identity to compare: the parent is the sweep
            return os.getppid() == sweep_pid
        import psutil

        try:
            sweep = psutil.Process(sweep_pid)
            # A killed sweep whose parent has not reaped it yet is a zombie: gone all the same.
            return _identity(sweep_pid, sweep.create_time()) == identity and sweep.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:  # NoSuchProcess: gone
            return False

    def watch() -> None:
        while alive():
            time.sleep(SWEEP_CHECK_S)
        os.kill(os.getpid(), signal.SIGKILL)

    if not alive():  # gone before the watch began
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, name="sweep-watch", daemon=True).start()


def _identity(pid: int, started: float | None = None) -> str:
    if started is None:
        import psutil

        started = psutil.Process(pid).create_time()
    return f"{pid}:{started:.2f}"
