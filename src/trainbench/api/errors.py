"""What the Python API raises: bad input (the command line's exit 2, nothing recorded or written), a sweep that
ended without handing back its cells, a store that could not be read or written."""

from __future__ import annotations

DEFAULT_EXPERIMENT = "trainbench"  # tracking.experiment's default (conf/config.yaml)


class BadInput(ValueError):
    """Refused before anything ran or was written (the command line's exit 2); nothing was recorded.
    str() is the line `trainbench` prints after `trainbench: `."""


class SweepError(RuntimeError):
    """The sweep's process ended without handing back its cells (killed, or it crashed): a bug or a kill."""


class StoreError(RuntimeError):
    """A store or file could not be read or written midway (the command line's exit 1), or the work was stopped
    (exit_status 128 + the signal). str() is the line `trainbench` prints after `trainbench: `."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status
