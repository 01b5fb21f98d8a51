"""cell.memory_limit_mb: the smallest limit the judge accepts runs a tiny cell (benchmarks/memory_floor.py
measured it), and a cell that needs more than its limit is recorded `failed` with trainbench.failure=oom,
whatever its framework's way of running out is (MemoryError, an allocator's exception, SIGABRT, a library
retrying an allocation forever)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import TINY
from trainbench.config.plugins import SCHEMAS
from trainbench.config.schema import CellLimits
from trainbench.runner import cell_process as runner

pytestmark = pytest.mark.slow

# About 92 M parameters (3072 x 8192 + 8192 x 8192 + 8192 x 10): 370 MB of fp32 weights, as much again for
# their gradients and the optimizer's momentum, on top of what the framework needs to run at all.
TOO_BIG = ["model.hidden_sizes=[8192,8192]", "device=cpu", "batch_size=16", "data.num_samples=32",
           "data.num_val_samples=16", "task.epochs=1", "tracking.system_metrics_interval_s=0"]  # fmt: skip


@pytest.mark.parametrize("framework", ["pytorch", "jax"])
def test_a_cell_over_its_limit_is_failed_oom_at_the_smallest_limit_allowed(trainbench, framework) -> None:
    floor = SCHEMAS["framework"][framework]().min_memory_mb()
    result = trainbench(f"framework={framework}", f"cell.memory_limit_mb={floor}", *TOO_BIG)
    assert result.returncode == 1, result.stderr[-3000:]
    (cell,) = [r for r in result.runs() if r.data.tags.get("trainbench.kind") == "cell"]
    assert cell.data.tags["trainbench.outcome"] == "failed" and cell.info.status == "FAILED"
    assert cell.data.tags["trainbench.failure"] == "oom", cell.data.tags["trainbench.reason"]
    assert f"cell.memory_limit_mb={floor}" in cell.data.tags["trainbench.reason"]
    # An expected outcome: one line on the terminal, with the batch size and what to try; no traceback there.
    (line,) = [x for x in result.stderr.splitlines() if "ran out of" in x]
    assert line.startswith(f"trainbench: {framework}-mlp-cpu-bs16 ran out of host memory ("), line
    assert line.endswith(f"try a smaller batch_size, batch_size=max, or more than cell.memory_limit_mb={floor}")
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    # The traceback is in the run's stderr_tail.txt.
    tail = Path(MlflowClient(result.uri).download_artifacts(cell.info.run_id, "stderr_tail.txt")).read_text()
    assert "allocat" in tail[tail.index("Traceback (most recent call last)") :], tail[-2000:]


def test_the_smallest_limit_allowed_runs_a_tiny_cell(trainbench) -> None:
    floor = SCHEMAS["framework"]["pytorch"]().min_memory_mb()
    result = trainbench("device=cpu", "data=digits", f"cell.memory_limit_mb={floor}", *TINY[2:])
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = result.runs()
    assert cell.data.tags["trainbench.outcome"] == "finished"


# Fills its memory cap, then loads SciPy, whose bundled OpenBLAS retries its failed 32 MB buffer allocation
# forever (seen with scikit-learn's `digits` under a tight cell.memory_limit_mb): a process that never ends.
SPINS_AT_CAP = """
import resource, sys
import numpy  # its own OpenBLAS gives up after 10 retries; SciPy's does not
limit = int(sys.argv[1]) * 2**20
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
ballast = []
try:
    while True:
        ballast.append(bytearray(4 * 2**20))
except MemoryError:
    ballast.pop()
import scipy.special
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cell.memory_limit_mb is applied on Linux only")
def test_a_cell_process_spinning_at_its_cap_is_stopped_and_recorded_oom(tmp_path) -> None:
    limit_mb = 600
    child = subprocess.Popen([sys.executable, "-c", SPINS_AT_CAP, str(limit_mb)], text=True)
    started = time.monotonic()
    try:
        # timeout_s bounds the test if the watch never sees it spinning (it would otherwise wait forever)
        limits = CellLimits(memory_limit_mb=limit_mb, timeout_s=120)
        returncode = runner._wait(child, limits, runner.Activity())
    finally:
        child.kill()
        child.wait()
    assert returncode == runner.STUCK_AT_CAP
    assert time.monotonic() - started < 60
    outcome = runner.read_result(tmp_path / "result.json", returncode, limits)
    assert (outcome["outcome"], outcome["failure"]) == ("failed", "oom")
    assert "cell.memory_limit_mb=600" in outcome["reason"]
