"""A stop (Ctrl-C, SIGTERM, SIGHUP) that comes while a process of trainbench is still importing: the process
ends quietly with 128 + the signal (130, 143, 129), not with a KeyboardInterrupt traceback from whatever module
was loading. Light on purpose: it is imported before anything else."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Stops whose exception has not yet left a raising_on_stop block. The exception is raised in whatever code runs when
# the signal comes, and a library's bare `except:` (around an optional import, say) can swallow it; the stop is then
# raised again where a block ends or the next one begins, so that it is never lost.
_unanswered: list[int] = []


@contextmanager
def raising_on_stop(error: Callable[[int], BaseException]) -> Iterator[None]:
    """Within the block a stop raises error(signal number), as does a stop that came before and was swallowed (on
    entry) or one swallowed within the block (at its end); the handlers in force before are back after it."""

    def stop(signum: int, frame: object) -> None:
        _unanswered.append(signum)
        raise error(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        if _unanswered:
            raise error(_unanswered[-1])
        yield
        if _unanswered:
            raise error(_unanswered[-1])
    except BaseException:
        _unanswered.clear()  # the stop (or what ends the block instead) leaves the block: it is answered
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def unanswered() -> int | None:
    """The signal of a stop that a library swallowed within a raising_on_stop block still running, or None: a
    long block (a sweep's) asks at each step, so that the stop ends it there rather than at the block's end."""
    return _unanswered[-1] if _unanswered else None


def exit_quietly_on_stop() -> AbstractContextManager[None]:
    """A stop raises SystemExit(128 + signal), which Python ends on without a word."""
    return raising_on_stop(lambda signum: SystemExit(128 + signum))
