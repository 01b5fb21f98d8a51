"""A reader that stops reading (`trainbench ... | head -1`) ends our output quietly, as it ends a Unix tool's.

Python raises BrokenPipeError at the next write to such a pipe; inside Hydra (`-sc install=bash`, `--cfg`) that
became a traceback. Python's documented recipe (the signal module's notes on SIGPIPE) is to point the stream at
/dev/null, so that later writes and the exit's own flush succeed, and to exit non-zero: here 141, the status a shell
gives a tool that SIGPIPE ended. The work already under way (a sweep's cells) goes on and is recorded; only what
nobody reads any more is dropped.
"""

from __future__ import annotations

import os
import signal
from typing import IO, Any

READER_GONE = 128 + signal.SIGPIPE  # 141

_gone = False


def reader_gone(stream: IO[Any]) -> None:
    """`stream`'s reader is gone: its descriptor now writes to /dev/null, and the exit status says so."""
    global _gone
    _gone = True
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # no descriptor of its own (pytest's capture): nothing to point elsewhere
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def exit_status(code: int) -> int:
    """The process's exit status: READER_GONE where the output's reader went away and nothing else failed."""
    return READER_GONE if _gone and code == 0 else code
