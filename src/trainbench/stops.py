"""A stop (Ctrl-C, SIGTERM, SIGHUP) that comes while a process of trainbench is still importing: the process
ends quietly with 128 + the signal (130, 143, 129), not with a KeyboardInterrupt traceback from whatever module
was loading. Light on purpose: it is imported before anything else."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def raising_on_stop(error: Callable[[int], BaseException]) -> Iterator[None]:
    """Within the block a stop raises error(signal number); the handlers in force before are back after it."""

    def stop(signum: int, frame: object) -> None:
        raise error(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_quietly_on_stop() -> AbstractContextManager[None]:
    """A stop raises SystemExit(128 + signal), which Python ends on without a word."""
    return raising_on_stop(lambda signum: SystemExit(128 + signum))
