"""A cell's own process: `python -m trainbench.cell.worker SPEC.json`.

The process that launched it (trainbench.sweep.cell_run) wrote SPEC (the cell, where to send what it records,
where to put the result) and closes the run whatever happens here. This process imports exactly one
framework and not MLflow: it sends its metrics, tags and artifacts as JSON lines over a pipe
(trainbench.cell.events), which the launcher logs into the run, and writes RESULT (outcome, reason,
samples/s) atomically. If it dies without writing one (abort, segfault, the OOM killer), the parent works
out the outcome from its exit status. An exception's traceback goes to stderr, which the parent echoes and
attaches to the run, unless running out of memory raised it: an expected outcome, whose traceback goes to
traceback.txt beside RESULT, for the run only, while the parent prints one line.

With `search` in SPEC, the process searches batch_size=max (trainbench.cell.batch_probes) instead of running
the cell.

If the parent dies (SIGKILL, the OOM killer, a lost node), this process notices within a second (Linux:
PR_SET_PDEATHSIG; everywhere: the parent pid changes), records its own run `killed` with that reason,
and exits: no orphan keeps computing and logging into a sweep nobody watches. The parent's death arrives as
its own signal (PARENT_DIED), not SIGTERM, the parent's way to stop a cell: while a killed process exits,
the kernel may send the death signal before this process is re-parented, so the parent pid alone cannot
tell the two apart.

A stop can come at any moment, also while Python is still importing (Ctrl-C in the first half second of a
cell): from the first line, a stop is only remembered, and raised once main() is ready to record it, so it
ends as `killed` like any other stop, with no traceback on the terminal.
"""

from __future__ import annotations

import os
import signal
import sys

from trainbench.cell.in_cell import PARENT_DIED

UNBLOCK_STOPS_ENV = "TRAINBENCH_UNBLOCK_SIGINT"
# `python -m trainbench.cell.worker --preload`: started before its cell's run exists (trainbench.sweep.cell_process
# .prestart), it reads the cell (to_spec, as JSON) from its first stdin line and loads its framework, then waits for
# SPEC's path on the second line and runs as `worker SPEC.json` would; at end of input instead, it exits recording
# nothing (the sweep did not run that cell here, or is gone).
PRELOAD_ARG = "--preload"
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, PARENT_DIED)
_stops: list[int] = []  # the stop signals received, in order


def _remember_stop(signum: int, frame: object) -> None:
    _stops.append(signum)


if __name__ == "__main__":  # first, before any import that takes time
    for _stop in _STOPS:
        signal.signal(_stop, _remember_stop)
    # The launcher started this process with Ctrl-C blocked (a stop in Python's own start-up would print a
    # KeyboardInterrupt traceback): one that came meanwhile is pending, and is remembered now.
    if os.environ.pop(UNBLOCK_STOPS_ENV, None):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

import contextlib  # noqa: E402  (after the stop handlers, on purpose)
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

from trainbench.cell import in_cell  # noqa: E402
from trainbench.cell.in_cell import (  # noqa: E402
    ProcessResult,
    die_with_parent,
    failure_kind,
    fault_for,
    inject_fault,
    one_line,
    write_atomically,
)

# The launcher's death is looked for this often, and the main thread has this long to end the process itself: the
# cell ends within about a second of its launcher's death (docs/sweeps.md; benchmarks/owner_kill.py measures it).
ORPHAN_CHECK_S = 0.1
ORPHAN_GRACE_S = 0.5


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the parent stopping this cell): unwinds like Ctrl-C."""


class ParentDied(Terminated):
    """PARENT_DIED: the process that launched this cell is gone, and with it whoever would close the run."""


def main(spec_path: str) -> int:
    from trainbench.measure.timeline import mark

    mark("cell: python started, trainbench imported")
    spec = json.loads(Path(spec_path).read_text())
    parent_pid = int(spec["parent_pid"])
    result: ProcessResult = {"outcome": "failed", "reason": None}
    parent_died = False
    try:
        die_with_parent(parent_pid)
        _guard_against_orphanhood(spec, parent_pid)
        if spec.get("cpus"):
            os.sched_setaffinity(0, spec["cpus"])
        from trainbench.cell.order import CellOrder
        from trainbench.store.tracking import NullLog, quiet_loggers, quiet_logs

        quiet_logs()  # also redacts credentials in whatever this process prints
        order = CellOrder.from_dict(spec["order"])  # judged already, on this machine, by the job that started it
        cell = order.cell
        quiet_loggers(cell.framework.quiet_loggers)
        mark("cell: config read")
        _limit_memory(cell.cell.memory_limit_mb)
        from trainbench.cell.events import PipeLog

        if spec.get("events_fd") is not None:
            log: Any = PipeLog(os.fdopen(spec["events_fd"], "w", buffering=1), Path(spec["result_path"]).parent)
        else:  # a probe (batch_size=max search): runs the cell, records nothing
            log = NullLog()
        # Until here a stop was only remembered: raised inside a library's code, it can break the library's state
        # into another error (OmegaConf turns it into an AttributeError). From here on it unwinds to the
        # `except` below; one that came earlier is raised now.
        _raise_stops()
        inject_fault(fault_for(order.index, rank=None))
        if spec.get("search") is not None:  # batch_size=max: probes, no figures
            from trainbench.cell import batch_probes

            result["search"] = batch_probes.search(cell, spec["search"])
        else:
            from trainbench.cell.ranks import launch

            result.update(launch(order, log, spec))
        _stop_listening()  # done: a stop signal now would only lose the result
        result["outcome"] = "finished"
    except (KeyboardInterrupt, Terminated) as stop:
        _stop_listening()
        parent_died = isinstance(stop, ParentDied)
        result.update({"outcome": "killed", "reason": "stopped by the sweep (Ctrl-C, SIGTERM or a timeout)"})
    except Exception as error:
        _stop_listening()
        from trainbench.cell.events import LauncherGone
        from trainbench.frameworks.base import DeviceUnavailable
        from trainbench.store.tracking import private

        parent_died = isinstance(error, LauncherGone) or os.getppid() != parent_pid or PARENT_DIED in _stops
        if parent_died:
            pass  # recorded as killed below
        elif _stops:  # a stop raised inside a library came out as another error: a stop all the same
            result.update({"outcome": "killed", "reason": "stopped by the sweep (Ctrl-C, SIGTERM or a timeout)"})
        elif isinstance(error, DeviceUnavailable):
            result.update({"outcome": "unavailable", "reason": private(str(error))})
        else:
            kind, reason = failure_kind(error), one_line(error)
            result.update({"outcome": "failed", "reason": private(reason), "failure": kind})
            if kind == "oom":
                result["memory"] = (
                    "host" if isinstance(error, MemoryError) or in_cell.selected_backend == "cpu" else "device"
                )
            # Expected (out of memory, another node of the cell gone): the parent prints one line, and the
            # traceback goes to the run only.
            if kind == "oom" or "NodeLost: " in reason:
                with contextlib.suppress(OSError):
                    traceback_path(Path(spec["result_path"])).write_text(private(traceback.format_exc()))
            else:  # a bug: on the terminal too, and in the stderr tail the parent attaches to the run
                with contextlib.suppress(OSError):
                    traceback.print_exc()
    if parent_died or os.getppid() != parent_pid:
        # Whatever happened here, the launcher that would log the results and close the run is gone: nothing
        # reached the run after its death, so it is `killed`, closed by a small process of its own (nobody else will)
        # while this one ends at once.
        _orphaned(spec, parent_pid)
    write_atomically(Path(spec["result_path"]), json.dumps(result))
    mark(f"cell: result written ({result['outcome']})")
    return 0


_handing_over = threading.Lock()


def _orphaned(spec: dict[str, Any], parent_pid: int) -> NoReturn:
    """The launcher died: hand the run's closing and the scratch folder to trainbench.cell.orphan and end now,
    without the seconds an interpreter with a framework loaded takes to tear down. Once, from whichever thread
    gets here first (the main thread unwinding a stop, or the guard when the main thread is stuck in C code)."""
    if not _handing_over.acquire(blocking=False):
        threading.Event().wait()  # the other thread is ending the process
    try:
        # Signal handlers can be changed from the main thread only. From the guard, a stop that still reaches the
        # main thread changes nothing: this thread ends the process all the same.
        if threading.current_thread() is threading.main_thread():
            _stop_listening()
        _silence_output()
        from trainbench.cell.orphan import hand_over

        reason = f"the process that launched this cell (pid {parent_pid}) died"
        hand_over(spec.get("tracking_uri"), spec.get("run_id"), "killed", reason, Path(spec["result_path"]).parent)
    finally:  # whatever failed above, the process ends: the other thread waits for this one to end it
        os._exit(0)


def _guard_against_orphanhood(spec: dict[str, Any], parent_pid: int) -> None:
    """A thread that ends the process ORPHAN_GRACE_S after its launcher died, should the main thread not have
    done so by then: a stop's exception is raised only between Python's bytecodes, and a long call into a
    framework's C code (a compile, a big kernel on the CPU) would keep computing until it returns."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(ORPHAN_CHECK_S)
        time.sleep(ORPHAN_GRACE_S)
        _orphaned(spec, parent_pid)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()


def traceback_path(result_path: Path) -> Path:
    """Where the cell's process leaves the traceback of an expected failure (out of memory), beside its result:
    the parent adds it to the run's stderr_tail.txt, and prints one line instead."""
    return result_path.with_name("traceback.txt")


def _raise_stops() -> None:
    """Stops raise from now on (SIGINT: KeyboardInterrupt; SIGTERM, SIGHUP: Terminated; PARENT_DIED: ParentDied),
    each remembered first, and the first stop that came while the process was starting is raised now."""
    for stop in _STOPS:
        signal.signal(stop, _raise_stop)
    if _stops:
        _raise_stop(_stops.pop(0), None)


def _raise_stop(signum: int, frame: Any) -> NoReturn:
    _stops.append(signum)
    if signum == PARENT_DIED:
        raise ParentDied()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt()
    raise Terminated()


def _stop_listening() -> None:
    """Once stopping, stay stopping: the parent-death signal and the watch thread each send PARENT_DIED, and a
    second one must not interrupt the recording of the first (closing the run imports MLflow: seconds)."""
    for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, PARENT_DIED):
        signal.signal(stop, signal.SIG_IGN)


def _silence_output() -> None:
    """The launcher held the reading end of this process's stderr: point stdout and stderr at /dev/null, or
    a write on the way to closing the run would raise BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (1, 2):
        os.dup2(devnull, stream)
    os.close(devnull)


def _limit_memory(limit_mb: int | None) -> None:
    """cell.memory_limit_mb: cap this process's data segment (heap and anonymous mappings), so a cell that
    needs more fails with an out-of-memory error instead of taking the machine down. Linux only."""
    if not limit_mb:
        return
    import resource

    limit = int(limit_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _preload_then_wait() -> str | None:
    """--preload: load the framework of the cell on stdin's first line, then return the spec's path read from the
    second (None at end of input). Stops are only remembered meanwhile: main() raises them, once the run exists."""
    from trainbench.measure.timeline import mark

    mark("cell: python started, trainbench imported (prestarted)")
    cell_line = sys.stdin.readline()
    if cell_line:
        try:
            from trainbench import frameworks
            from trainbench.config import from_spec
            from trainbench.store.tracking import quiet_logs

            quiet_logs()
            cell = from_spec(json.loads(cell_line))
            if getattr(cell.task, "uses_model", True):
                from trainbench.data.loading import prefetch

                prefetch(cell.data, cell.seed)
            frameworks.preload(cell)
            mark("cell: framework preloaded")
        except Exception:  # noqa: S110  the cell loads it again, and fails there with its error recorded in its run
            pass
    spec_line = sys.stdin.readline().strip()
    return spec_line or None


if __name__ == "__main__":
    from trainbench.process_end import end_now

    # Once the result is written, the launcher waits for this process's end to record it: no seconds of teardown
    if sys.argv[1] == PRELOAD_ARG:
        _spec_path = _preload_then_wait()
        end_now(main(_spec_path) if _spec_path else 0)
    end_now(main(sys.argv[1]))
