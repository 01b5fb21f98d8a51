"""A stop (Ctrl-C, SIGTERM) is never lost to library code that swallows its exception: real processes, real signals."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT

SWALLOWED = """
import os, signal, sys
sys.path.insert(0, {src!r})
from trainbench.stops import exit_quietly_on_stop, raising_on_stop

def optional_import():  # what some libraries do around an optional import
    try:
        os.kill(os.getpid(), signal.{signal})
        sum(range(1000))  # the handler runs here, between two instructions
    except:  # noqa: E722
        pass
"""


def run(body: str, stop: str = "SIGINT") -> subprocess.CompletedProcess[str]:
    script = SWALLOWED.format(src=str(ROOT / "src"), signal=stop) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)


def test_a_stop_swallowed_while_importing_ends_the_process_quietly_where_the_imports_end() -> None:
    done = run(
        """
        with exit_quietly_on_stop():
            optional_import()
            print("the imports went on", flush=True)
        print("the sweep started", flush=True)
        """,
        stop="SIGTERM",
    )
    assert (done.returncode, done.stdout, done.stderr) == (143, "the imports went on\n", "")


def test_a_stop_swallowed_before_the_sweep_takes_over_stops_stops_the_sweep_before_any_cell() -> None:
    done = run(
        """
        class Stopped(KeyboardInterrupt):
            pass

        with exit_quietly_on_stop():
            optional_import()
            try:
                with raising_on_stop(lambda signum: Stopped()):
                    print("a cell started", flush=True)
            except Stopped:
                print("stopped before any cell", flush=True)
            with raising_on_stop(lambda signum: Stopped()):
                print("answered once: the next block runs", flush=True)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["stopped before any cell", "answered once: the next block runs"]


def test_a_stop_swallowed_between_cells_starts_no_further_cell() -> None:
    """The sweep's block spans every cell: a stop that a library swallowed after one cell must keep the next from
    starting (a sweep of 300 cells would otherwise run them all before its block ends)."""
    done = run(
        """
        from trainbench.runner.cell import Stopped, run_cell

        try:
            with raising_on_stop(Stopped):
                print("cell 1 ran", flush=True)
                optional_import()  # between the first cell and the second
                run_cell(None, None)  # cell 2: refused at its first line, before its run is created
                print("cell 2 started", flush=True)
        except Stopped as stop:
            print(stop.reason, flush=True)
        """
    )
    assert done.stdout.splitlines() == ["cell 1 ran", "the sweep was stopped by Ctrl-C (SIGINT)"], done.stderr
