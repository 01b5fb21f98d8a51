"""What a trainbench process prints and records names no secret and no home folder: every log record and every
write to stdout and stderr goes through redact(); MLflow's own log lines are quiet unless hydra.verbose, and one
line each.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainbench import untrusted
from trainbench.locations import PROJECT_ROOT


def error_line(error: BaseException) -> str:
    """The error's first line, whole: MLflow often ends it with what to do (a cut at 200 characters lost the
    hint of its folder-store refusal). Bounded only against a line that is really a dump."""
    text = str(error).strip()
    line = text.splitlines()[0][:2000] if text else type(error).__name__
    return redact_paths(redact(line))


def verbose() -> bool:
    """`hydra.verbose=...` on the command line (set for every process of the sweep by trainbench.cli)."""
    return os.environ.get("TRAINBENCH_VERBOSE", "") not in ("", "0")


def quiet_logs() -> None:
    """MLflow's INFO lines say nothing a user must act on: off unless hydra.verbose is given. TensorFlow's C++
    log (oneDNN notes, a `failed call to cuInit` on machines without a GPU) is left on: the cell's launcher keeps
    it out of the terminal and in the cell's run (trainbench.sweep.framework_log). Whatever is printed,
    verbose or not, names no password (redact_output)."""
    redact_output()
    if verbose():
        return
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read by MLflow when it configures its loggers
    quiet_loggers(("mlflow", "alembic", "absl"))


def quiet_loggers(names: Sequence[str]) -> None:
    """These Python loggers' INFO lines off unless hydra.verbose is given: trainbench's own libraries' (quiet_logs),
    and in a cell's process those its framework declares (FrameworkConfig.quiet_loggers)."""
    if verbose():
        return
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)


class _OneLine(logging.Filter):
    """MLflow's warnings and errors as one redacted line each (their tracebacks are MLflow's internals), and
    none at all from its stores: a store that fails is reported by trainbench, once, with what it means for the
    sweep (StoreFailed, the outage lines). hydra.verbose shows them all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or verbose():
            return True
        if record.name.startswith("mlflow.store."):
            return False
        first = (record.getMessage().strip().splitlines() or [""])[0]
        record.msg, record.args = private(first)[:300], None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def one_line_store_errors() -> None:
    """Attach _OneLine to MLflow's handlers (MLflow's loggers do not propagate to the root); once."""
    import mlflow  # noqa: F401  (configures its loggers and their handler)

    for handler in logging.getLogger("mlflow").handlers:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())


def redact(text: str) -> str:
    """Secrets in `text` masked (trainbench.untrusted.redact: the one rule set): http://user:***@host,
    ?password=***, MLFLOW_TRACKING_PASSWORD=***, cloud access key ids."""
    return untrusted.redact(text)


def redact_output() -> None:
    """Everything this process prints goes through redact() (and, written to stdout or stderr, has its control
    characters spelled out): every log record, of any logger, whatever handler
    prints it (MLflow's "API request to http://user:pass@host failed" while a server is down, urllib3's retries,
    Hydra's), and every write to sys.stdout and sys.stderr (print, tracebacks, warnings, Hydra's `--cfg`).
    Called first thing by each process trainbench starts: the sweep, a launcher's worker and its job, a cell."""
    import logging

    global _records_redacted
    if not _records_redacted:
        logging.setLogRecordFactory(_redacting_records(logging.getLogRecordFactory()))
        _records_redacted = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Redacted):
            setattr(sys, name, _Redacted(stream))


_records_redacted = False


def _redacting_records(make_record: Any) -> Any:
    """A log record factory that redacts the record's message and traceback as it is made, before any handler
    (whoever installed it, whenever) formats it."""
    import logging

    def make(*args: Any, **kwargs: Any) -> Any:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it as it would have
            return record
        shown = untrusted.shown(message, keep_newlines=True)
        if shown != message:
            record.msg, record.args = shown, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    return make


class _Redacted:
    """A text stream that writes through redact() and spells out control characters (trainbench.untrusted.
    for_stream: newlines, tabs and a progress bar's carriage returns kept): whatever reaches the terminal -- a run name from a shared file in an
    error, a config value in Hydra's parse error, a cell's echoed stderr -- cannot set the window title, plant a
    link, clear the screen or reorder text, and trainbench itself writes none. Everything else is the stream it
    wraps (fileno, isatty, encoding, flush). Each write is redacted whole: a URI split over two writes would pass,
    and no caller here writes one that way (print, logging and tracebacks write a URI within one string)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            self._stream.write(untrusted.for_stream(redact(text)) if isinstance(text, str) else text)
        except BrokenPipeError:  # `trainbench ... | head -1`: the reader is done (trainbench.closed_output)
            _reader_gone(self._stream)
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _reader_gone(self._stream)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _reader_gone(stream: Any) -> None:
    from trainbench import closed_output

    closed_output.reader_gone(stream)


def redact_paths(text: str, here: Path = PROJECT_ROOT) -> str:
    """Absolute paths made relative to `here` (./...: the project's folder unless told) or the home folder (~/...)."""
    home = str(Path.home())
    for root, short in ((str(here), "."), (home, "~")):
        if root and root != "/":
            text = untrusted.path_prefix(root).sub(short, text)
    return text


def private(text: str) -> str:
    return redact_paths(redact(text))


def private_line(error: BaseException | str, limit: int = 200) -> str:
    """What went wrong, for one line of the terminal: the first line of private(str(error)) (a SQL error's
    statement, parameters and link follow on lines of their own), at most `limit` characters."""
    text = private(str(error)).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:limit]


def as_seen_here(text: str) -> str:
    """Locations in `text` as the person at this terminal reaches them: under the current folder as ./..., else
    under the home folder as ~/..., credentials redacted. private() writes the project's folder as `.`, which reads
    right only from the project's root: a sweep started elsewhere still keeps its runs there."""
    return redact_paths(redact(text), here=Path.cwd())


def pasteable(uri: str) -> str:
    """`uri` for a command a person pastes into a shell: credentials redacted, the home folder as $HOME, which
    the shell expands anywhere in a word (a `~` inside `sqlite:///~/...` it leaves alone, and SQLite would then
    open a new, empty store in a folder named `~`)."""
    home = str(Path.home())
    text = redact(uri)
    if home and home != "/":
        text = text.replace(home + os.sep, "$HOME/")
    return text
