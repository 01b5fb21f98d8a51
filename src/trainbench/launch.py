"""Run one cell in its own process and record it in MLflow, whatever happens to that process.

The parent creates the run first (params, tags, config artifacts), so a cell that dies at import time is
still on record. The child logs into it. The parent always closes it with an outcome:
  finished     the child wrote a result saying so
  unavailable  the child found no such device here (reason says what was checked)
  failed       the child raised (reason: exception class and message), or died without a result:
               abort, segfault, the OOM killer (reason: the signal), or a timeout; stderr tail attached
  killed       the user pressed Ctrl-C (the sweep then stops)
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainbench import hardware, tracking
from trainbench.batch_search import Probe, SearchFailed, find_max_batch
from trainbench.config import PROJECT_ROOT, config_hash, flatten

STDERR_TAIL_LINES = 200
GRACE_S = 10  # how long a child gets to write its result after SIGINT/SIGTERM


@dataclass(frozen=True)
class CellResult:
    name: str
    outcome: str
    samples_per_s: float | None
    reason: str | None
    run_id: str
    peak_tflops: float | None = None  # matmul cells


@dataclass(frozen=True)
class Store:
    """Where a cell's run goes: the tracking client, its URI, the experiment and the sweep's parent run."""

    client: Any
    uri: str
    experiment_id: str
    parent_run_id: str | None
    packages: str  # pip-freeze text, computed once per sweep


def run_cell(cfg: dict[str, Any], store: Store, overrides: list[str]) -> CellResult:
    run_id = _create_run(cfg, store, overrides)
    if cfg["batch_size"] == "max":
        try:
            cfg = _with_max_batch(cfg, store, run_id)
        except (SearchFailed, KeyboardInterrupt) as stop:
            outcome = "killed" if isinstance(stop, KeyboardInterrupt) else "failed"
            reason = "interrupted by the user (Ctrl-C)" if outcome == "killed" else str(stop)
            tracking.close(store.client, run_id, outcome, reason)
            if outcome == "killed":
                raise
            return CellResult(tracking.run_name(cfg, cfg["device"]["name"]), "failed", None, reason, run_id)
    name = tracking.run_name(cfg, cfg["device"]["name"])
    try:
        result, stderr_tail = _run_in_child(cfg, run_id, store.uri, cfg["cell"]["timeout_s"])
    except KeyboardInterrupt:
        tracking.close(store.client, run_id, "killed", "interrupted by the user (Ctrl-C)")
        raise
    if result["outcome"] == "failed" and stderr_tail:
        store.client.log_text(run_id, stderr_tail, "stderr_tail.txt")
    if result.get("failure"):
        tracking.set_tags(store.client, run_id, {"trainbench.failure": result["failure"]})
    tracking.close(store.client, run_id, result["outcome"], result.get("reason"))
    if result.get("backend"):
        name = tracking.run_name(cfg, result["backend"])
    return CellResult(name, result["outcome"], result.get("samples_per_s"), result.get("reason"), run_id,
                      result.get("peak_tflops"))


def _with_max_batch(cfg: dict[str, Any], store: Store, run_id: str) -> dict[str, Any]:
    """Search the largest batch that fits (each probe its own process), record it, return the cell's config
    with that batch size. Raises SearchFailed when a probe fails for another reason or nothing fits."""
    limit = cfg["cell"]["max_batch_size"]

    def probe(batch_size: int) -> Probe:
        probe_cfg = {**cfg, "batch_size": batch_size,
                     "task": {**cfg["task"], "name": "benchmark", "warmup_steps": 2, "steps": 1, "repeats": 1,
                              "settle_cv_pct": None}}
        print(f"  batch_size=max: probing {batch_size} ...", flush=True)
        result, _ = _run_in_child(probe_cfg, None, store.uri, cfg["cell"]["timeout_s"])
        fits = result["outcome"] == "finished"
        if not fits and result.get("failure") != "oom":
            raise SearchFailed(f"batch_size=max: the probe at batch {batch_size} failed ({result.get('reason')})")
        tracking.log_metrics(store.client, run_id, {"batch_size_probe_fits": float(fits)}, step=batch_size)
        return Probe(batch_size, fits, result.get("reason"))

    best, probes = find_max_batch(probe, limit)
    if best == 0:
        tracking.set_tags(store.client, run_id, {"trainbench.failure": "oom"})
        raise SearchFailed(f"batch_size=max: not even batch 1 fits ({probes[0].reason})")
    print(f"  batch_size=max: {best} fits" + (f" ({best * 2 if best < limit else limit + 1} does not)"
                                               if best < limit else f" (the limit, cell.max_batch_size={limit})"),
          flush=True)
    tracking.log_metrics(store.client, run_id, {"max_batch_size": best, "batch_size_probes": len(probes)})
    tracking.set_tags(store.client, run_id, {"trainbench.batch_size": best, "trainbench.batch_size_search": "max"})
    return {**cfg, "batch_size": best}


def _create_run(cfg: dict[str, Any], store: Store, overrides: list[str]) -> str:
    tags = {
        "trainbench.kind": "cell",
        "trainbench.framework": cfg["framework"]["name"],
        "trainbench.device": cfg["device"]["name"],
        "trainbench.task": cfg["task"]["name"],
        "trainbench.model": "matmul" if cfg["task"]["name"] == "matmul" else cfg["model"]["name"],
        "trainbench.data": cfg["data"]["name"],
        "trainbench.batch_size": cfg["batch_size"],
        "trainbench.precision": cfg["precision"]["name"],
        "trainbench.matmul_shape": cfg["task"]["shape"] if cfg["task"]["name"] == "matmul" else None,
        "trainbench.config_hash": config_hash(cfg),
        "trainbench.outcome": "running",
        "git.commit": tracking.git_commit(),
        "sw.python": sys.version.split()[0],
        "sw.mlflow": _mlflow_version(),
        **hardware.host_tags(),
    }
    if store.parent_run_id:
        tags["mlflow.parentRunId"] = store.parent_run_id
    run = store.client.create_run(
        store.experiment_id,
        run_name=tracking.run_name(cfg, cfg["device"]["name"]),
        tags={k: str(v) for k, v in tags.items() if v is not None},
    )
    run_id = run.info.run_id
    tracking.log_params(store.client, run_id, tracking.params_of(flatten(cfg)))
    store.client.log_text(run_id, yaml.safe_dump(cfg, sort_keys=False), "config.yaml")
    store.client.log_text(run_id, "\n".join(overrides) + "\n", "overrides.txt")
    store.client.log_text(run_id, store.packages, "requirements-freeze.txt")
    return run_id


def _run_in_child(cfg: dict[str, Any], run_id: str | None, uri: str,
                  timeout_s: float | None) -> tuple[dict[str, Any], str]:
    """Run `cfg` in a worker process (logging into run_id; None: a probe that logs nothing);
    return (its result, its stderr tail)."""
    with tempfile.TemporaryDirectory(prefix="trainbench-cell-") as scratch:
        result_path = Path(scratch) / "result.json"
        spec_path = Path(scratch) / "spec.json"
        spec_path.write_text(json.dumps({
            "config": cfg, "run_id": run_id, "tracking_uri": uri, "result_path": str(result_path),
        }))
        returncode, stderr_tail = _run_child(spec_path, timeout_s)
        return _read_result(result_path, returncode, timeout_s), stderr_tail


def _run_child(spec_path: Path, timeout_s: float | None) -> tuple[int, str]:
    """Start the cell's process, echo its stderr while keeping the tail; return (exit status, tail)."""
    env = dict(os.environ)
    # The child logs by run id; an inherited MLFLOW_RUN_ID (set by `mlflow run`) must not redirect it.
    env.pop("MLFLOW_RUN_ID", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    child = subprocess.Popen(
        [sys.executable, "-m", "trainbench.worker", str(spec_path)],
        env=env, stderr=subprocess.PIPE, text=True, errors="replace",
    )
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
    reader = threading.Thread(target=_pump, args=(child.stderr, tail), daemon=True)
    reader.start()
    try:
        returncode = child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(child, signal.SIGTERM)
        returncode = TIMED_OUT
    except KeyboardInterrupt:
        # On a terminal the child got the same SIGINT; from `kill -INT parent` it did not: pass it on.
        _stop(child, signal.SIGINT)
        raise
    reader.join(timeout=5)
    return returncode, "".join(tail)


TIMED_OUT = -1000


def _pump(stream: Any, tail: collections.deque[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(line)


def _stop(child: subprocess.Popen[str], first: signal.Signals) -> None:
    """Ask politely (the child then records its own outcome), then insist."""
    for sig in (first, signal.SIGKILL):
        if child.poll() is not None:
            return
        child.send_signal(sig)
        try:
            child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue


def _read_result(path: Path, returncode: int, timeout_s: float | None) -> dict[str, Any]:
    if returncode == TIMED_OUT:
        return {"outcome": "failed", "reason": f"timed out after {timeout_s:g} s (cell.timeout_s) and was stopped"}
    if path.exists():
        return json.loads(path.read_text())
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = ""
        if name == "SIGKILL":
            hint = " (most often the kernel's out-of-memory killer: try a smaller batch_size)"
        return {"outcome": "failed", "reason": f"cell process killed by {name}{hint}"}
    return {"outcome": "failed", "reason": f"cell process exited with status {returncode} without a result"}


def _mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")
