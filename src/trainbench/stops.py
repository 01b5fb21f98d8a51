"""A stop (Ctrl-C, SIGTERM, SIGHUP) that comes while a process of trainbench is still importing: the process
ends quietly with 128 + the signal (130, 143, 129), not with a KeyboardInterrupt traceback from whatever module
was loading. Light on purpose: it is imported before anything else."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def exit_quietly_on_stop() -> Iterator[None]:
    """Within the block a stop raises SystemExit(128 + signal), which Python ends on without a word; the
    handlers in force before are back after it."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
