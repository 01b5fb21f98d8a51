"""The frameworks' own log on a cell's error output: kept in the cell's run, not shown in the terminal.

TensorFlow, XLA and absl log from C++ in absl's record format (absl-py, from Python, in the same one), and PyTorch's
Inductor prints its autotuning tables under max-autotune:

    I1128 09:01:33.978206   31062 port.cc:153] oneDNN custom operations are on. ...
    W0000 00:00:1795856492.978206   31062 cuda_executor.cc:1309] ...   (before absl is set up: 0000 00:00:<epoch s>)
    2024-01-02 10:11:12.345678: I tensorflow/core/util/port.cc:113] ...  (TensorFlow before 2.16)
    AUTOTUNE mm(25216x3072, 3072x768) ... SingleProcess AUTOTUNE benchmarking takes 9.45 seconds ...  (Inductor)
    [W1129 05:42:13.122196611 TCPStore.cpp:340] [c10d] TCP client failed to connect ...  (PyTorch's C++, c10)

A c10 record about an error goes on with the error's C++ stack ("Exception raised from ...", "frame #N: ...", a
blank line): those lines belong to the record before them.

Those lines are the frameworks talking about themselves (oneDNN is on, no CUDA driver, cuDNN factories registered
twice, XLA services started): nothing a user of trainbench acts on, and several per cell. The cell's process
(trainbench.sweep.cell_process._pump) keeps them in FrameworkLog, which the cell's run records as framework_log.txt
whatever its outcome, and does not echo them; everything else it prints (trainbench's lines, warnings,
tracebacks) still reaches the terminal. Two exceptions reach the terminal too: a fatal record (F), which the
framework prints just before it aborts the process, and every line under hydra.verbose. A failed cell's
stderr_tail.txt keeps its last lines in order, these included: an error record (E) just before a crash sits
there next to the crash.
"""

from __future__ import annotations

import re
import threading

ARTIFACT = "framework_log.txt"
MAX_CHARS = 2_000_000  # a framework asked to log verbosely (TF_CPP_VMODULE) writes without end: the start is kept

_ABSL_RECORD = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+(\.\d+)? +\d+ [^\s\]]+:\d+\] ")
_TF_OLD_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [^\s\]]+:\d+\] ")
_C10_RECORD = re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ (\d+ )?[^\s\]]+:\d+\] ")
_C10_STACK = re.compile(
    r"^(Exception raised from \S+ at \S+ \(most recent call first\):|frame #\d+: |<omitting python frames>|\s*$)"
)
_FATAL = re.compile(r"^(F\d{4} |\[F\d{4} |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: F )")
# Lines of the same chatter without a record's prefix: absl's notice as it starts logging, and the second
# line of TensorFlow's cpu_feature_guard notice.
_UNPREFIXED = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions: ",
)


# PyTorch Inductor's autotuning tables (compile_mode=max-autotune), printed on stderr without a record's prefix:
# per operation its shapes, every candidate kernel's time, and a summary. Hundreds of lines per model.
_INDUCTOR_AUTOTUNE = re.compile(
    r"^(AUTOTUNE \w+\(|strides: \[|dtypes: torch\.|  \S+ \d+\.\d+ ms \d+\.\d+% |SingleProcess AUTOTUNE benchmarking "
    r"takes |Autotune Choices Stats:|\{\"num_choices\": )"
)


def is_chatter(line: str) -> bool:
    """Whether `line` is a framework's own log record (or one of its known unprefixed lines)."""
    records = (_ABSL_RECORD, _TF_OLD_RECORD, _C10_RECORD, _INDUCTOR_AUTOTUNE)
    return any(record.match(line) for record in records) or line.startswith(_UNPREFIXED)


class Chatter:
    """Which lines of one stream are the frameworks' log: is_chatter's records, and the C++ stack lines that go on
    from a record (never from any other line: a Python traceback's own lines stay trainbench's)."""

    def __init__(self) -> None:
        self._in_record = False

    def __call__(self, line: str) -> bool:
        if is_chatter(line):
            self._in_record = True
        elif not (self._in_record and _C10_STACK.match(line)):
            self._in_record = False
        return self._in_record


def is_fatal(line: str) -> bool:
    """A fatal record: the framework aborts the process right after it, and this line says why."""
    return bool(_FATAL.match(line))


class FrameworkLog:
    """The framework chatter of one cell's processes (the cell's own and, for batch_size=max, its probes'), in
    the order it came, up to MAX_CHARS. Written by the thread reading a process's error output."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._chars = 0
        self._left_out = 0
        self._lock = threading.Lock()

    def keep(self, line: str) -> None:
        with self._lock:
            if self._chars + len(line) > MAX_CHARS:
                self._left_out += 1
                return
            self._lines.append(line if line.endswith("\n") else line + "\n")
            self._chars += len(line)

    def text(self) -> str:
        """What was kept; empty when the frameworks said nothing."""
        with self._lock:
            text = "".join(self._lines)
            if self._left_out:
                text += f"[trainbench: {self._left_out} more lines left out past {MAX_CHARS:,} characters]\n"
            return text
