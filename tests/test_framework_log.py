"""The frameworks' own log lines (TensorFlow, XLA, absl, Inductor's autotuning) stay out of the terminal and go to the cell's run
(framework_log.txt); trainbench's lines, warnings, tracebacks and a framework's fatal record still reach it.
Fast: a real process writes real lines (copied from TensorFlow 2.21, absl and older TensorFlow) to a real pipe,
read by the cell launcher's reader. A real TensorFlow cell: tests/test_keras_training.py."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from trainbench.sweep import framework_log
from trainbench.sweep.cell_process import Activity, _pump

CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795856492.978206   31062 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. To turn "
    "them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    "W0000 00:00:1732788866.313553    4211 cudart_stub.cc:29] Could not find cuda drivers on your machine, GPU will "
    "not be used.",
    "I0000 00:00:1732788866.448002    4211 cpu_feature_guard.cc:210] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "E0000 00:00:1732788867.101010    4211 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register "
    "factory for plugin cuDNN when one has already been registered",
    "I1128 09:01:33.123456 140091 service.cc:152] XLA service 0x55d0c6c0 initialized for platform Host",
    "2023-11-28 09:01:33.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.",
    "2023-11-28 09:01:34.000001: W tensorflow/core/common_runtime/gpu/gpu_device.cc:2256] Cannot dlopen some GPU "
    "libraries.",
    # PyTorch 2.11's Inductor under compile_mode=max-autotune (an H200's terminal, results/2026-11-28-vit-compile-modes)
    "AUTOTUNE mm(25216x3072, 3072x768)",
    "strides: [3072, 1], [768, 1]",
    "dtypes: torch.bfloat16, torch.bfloat16",
    "  convolution 0.8062 ms 100.0% ",
    "  triton_mm_49 0.0638 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=True, BLOCK_K=64, BLOCK_M=128, BLOCK_N=128, "
    "EVEN_K=True, GROUP_M=8, USE_FAST_ACCUM=False, num_stages=3, num_warps=4",
    "SingleProcess AUTOTUNE benchmarking takes 9.4529 seconds and 0.0003 seconds precompiling for 21 choices",
    "Autotune Choices Stats:",
    '{"num_choices": 21, "num_triton_choices": 20, "best_kernel": "mm", "best_time": 0.1555519998073578}',
]
# PyTorch 2.14's c10d on a node whose peer never joined (this machine, 2026-11-29): a record, its C++ stack
C10_RECORD_WITH_STACK = [
    "[W1129 05:42:13.122196611 TCPStore.cpp:340] [c10d] TCP client failed to connect/validate to host "
    "localhost:37971 - retrying (try=0, timeout=15000ms, delay=11431ms): The client socket has timed out after "
    "15000ms while trying to connect to (localhost, 37971).",
    "Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/socket.cpp:1030 "
    "(most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char>) + 0x9d (0x7f751b2b460d in "
    "/x/torch/lib/libc10.so)",
    "<omitting python frames>",
    "frame #50: _start + 0x21 (0x5574af1f3081 in /x/bin/python)",
    "",
]
FATAL = "F0000 00:00:1732788867.200000    4211 cuda_blas.cc:190] Check failed: status == CUBLAS_STATUS_SUCCESS"
OURS = [
    "trainbench: tensorflow-mlp-cpu-bs64 failed: ValueError: shapes do not match",
    "Traceback (most recent call last):",
    '  File "/x/trainbench/cell/worker.py", line 120, in main',
    "ValueError: shapes do not match",
    "/x/keras/src/trainers/trainer.py:1032: UserWarning: the loss is nan",
    "WARNING:absl:You are saving your model as an HDF5 file",  # Python logging's format: a framework's warning
    "I1128 is not a record",
    "  sweep: 24 s elapsed, 1 of 11 cells done; about 2:43 left (16 s a cell)",
    "  loading pytorch and its device (gpu) ...",
    "benchmark: 39.02 ms/step (p90 40.13), 3,280 samples/s +/- 95 (95% CI)",
]


@pytest.mark.parametrize("line", CHATTER + [FATAL])
def test_a_framework_log_record_is_recognised(line: str) -> None:
    assert framework_log.is_chatter(line + "\n")


@pytest.mark.parametrize("line", OURS)
def test_trainbench_lines_tracebacks_and_warnings_are_not(line: str) -> None:
    assert not framework_log.is_chatter(line + "\n")


def pumped(lines: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, framework_log.FrameworkLog, str]:
    """What the terminal shows, what the cell's run keeps, and the stderr tail, of a real process writing `lines`
    on its error output, read as the cell's launcher reads a cell's process."""
    script = "import sys\nfor line in sys.stdin: sys.stderr.write(line)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    assert child.stdin is not None
    child.stdin.write("".join(line + "\n" for line in lines))
    child.stdin.close()
    tail: collections.deque[str] = collections.deque(maxlen=200)
    kept = framework_log.FrameworkLog()
    _pump(child.stderr, tail, Activity(), kept)
    assert child.wait(timeout=30) == 0
    return capsys.readouterr().err, kept, "".join(tail)


def test_the_frameworks_log_goes_to_the_run_and_the_rest_to_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINBENCH_VERBOSE", raising=False)
    lines = [CHATTER[0], OURS[0], *CHATTER[1:5], *OURS[1:4], *CHATTER[5:], OURS[4], OURS[5]]
    terminal, kept, tail = pumped(lines, capsys)
    assert terminal.splitlines() == [OURS[0], *OURS[1:4], OURS[4], OURS[5]]
    assert kept.text().splitlines() == CHATTER
    assert tail.splitlines() == lines  # a failed cell's stderr_tail.txt: every line, in order


def test_a_fatal_record_and_the_error_before_it_are_where_a_crash_is_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A framework aborts the process right after a fatal record: the terminal shows it (it says why); the error
    record before it is in the run's stderr_tail.txt and framework_log.txt."""
    monkeypatch.delenv("TRAINBENCH_VERBOSE", raising=False)
    terminal, kept, tail = pumped([CHATTER[5], FATAL], capsys)
    assert terminal.splitlines() == [FATAL]
    assert kept.text().splitlines() == [CHATTER[5], FATAL]
    assert tail.splitlines() == [CHATTER[5], FATAL]


def test_a_c10_record_keeps_its_cpp_stack_out_of_the_terminal_and_a_traceback_keeps_its_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's C++ logs an error with its C++ stack, many lines: all of them are the record's. The same kind of
    line after trainbench's own (a traceback of a C++ error) is not chatter."""
    monkeypatch.delenv("TRAINBENCH_VERBOSE", raising=False)
    ours = [OURS[1], OURS[2], C10_RECORD_WITH_STACK[2], OURS[3]]
    terminal, kept, tail = pumped([*C10_RECORD_WITH_STACK, *ours, *C10_RECORD_WITH_STACK[:2]], capsys)
    assert terminal.splitlines() == ours
    assert kept.text().splitlines() == [*C10_RECORD_WITH_STACK, *C10_RECORD_WITH_STACK[:2]]
    assert tail.splitlines() == [*C10_RECORD_WITH_STACK, *ours, *C10_RECORD_WITH_STACK[:2]]


def test_hydra_verbose_shows_the_frameworks_log_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINBENCH_VERBOSE", "1")
    terminal, kept, _ = pumped([CHATTER[1], OURS[0]], capsys)
    assert terminal.splitlines() == [CHATTER[1], OURS[0]]
    assert kept.text().splitlines() == [CHATTER[1]]


def test_a_framework_that_logs_without_end_keeps_the_start_and_says_how_much_was_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(framework_log, "MAX_CHARS", 1000)
    kept = framework_log.FrameworkLog()
    for _ in range(100):
        kept.keep(CHATTER[6] + "\n")
    text = kept.text()
    assert len(text) < 1100 and text.startswith(CHATTER[6])
    assert text.splitlines()[-1] == "[trainbench: 90 more lines left out past 1,000 characters]"
