"""Ending a process whose work is done, without the interpreter's own teardown.

Python's exit frees every object one by one: with MLflow, SQLAlchemy and pandas loaded (a sweep's process) or a
framework (a cell's), that is seconds between a process's last line and its end, which its user (or its launcher,
waiting to record its result) waits through for nothing. `end_now` does what the exit would do that someone could
notice (the other threads end first, then the exit handlers: logs and queues flushed, a loader's workers ended, the
output flushed) and ends the process there.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def end_now(code: int) -> NoReturn:
    # What the interpreter's exit does first: threading's own exit callbacks (a pool's shutdown: joblib's loky
    # executor ends its manager thread and workers there), then every non-daemon thread joined. Joining first
    # would wait forever on such a pool's thread.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()
    else:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader gone (`| head`): nothing is left to tell it
            stream.flush()
    os._exit(code)
