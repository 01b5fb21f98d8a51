"""One invocation of `python src/run.py`: its store, its sweep's parent run, its cells' results.

A multirun (and anything under `mlflow run`, which exports MLFLOW_RUN_ID) is one parent run tagged
`trainbench.kind=sweep`; every cell is its child. Cells run one after another in this process, each in
a child process of its own (trainbench.launch). At the end the session prints a summary table and
decides the exit status: 0 only when every cell finished.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from trainbench import hardware, tracking
from trainbench.launch import CellResult, Store, run_cell

EXIT_OK, EXIT_CELLS_DID_NOT_FINISH, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class Session:
    def __init__(self, cells: list[dict[str, Any]], multirun: bool, overrides: list[str]) -> None:
        first = cells[0]
        uri = tracking.resolve_tracking_uri(first["tracking"]["uri"])
        client = tracking.connect(uri)  # raises TrackingUnavailable before any work
        self.total = len(cells)
        self.overrides = overrides
        self.results: list[CellResult] = []
        self.started = time.time()
        self.adopted_parent = os.environ.get("MLFLOW_RUN_ID")
        if self.adopted_parent:  # `mlflow run`: its run is the parent, and its experiment is ours
            experiment_id = client.get_run(self.adopted_parent).info.experiment_id
        else:
            experiment_id = tracking.experiment_id(client, first["tracking"]["experiment"], uri)
        parent = self.adopted_parent or (self._create_parent(client, experiment_id) if multirun else None)
        if parent:
            self._tag_parent(client, parent)
        self.store = Store(client, uri, experiment_id, parent, tracking.installed_packages())

    def run(self, cfg: dict[str, Any], job_overrides: list[str]) -> CellResult:
        index = len(self.results) + 1
        print(f"[cell {index}/{self.total}] {tracking.run_name(cfg, cfg['device']['name'])}: "
              f"{' '.join(job_overrides) or '(defaults)'}", flush=True)
        result = run_cell(cfg, self.store, job_overrides)
        self.results.append(result)
        return result

    def interrupted(self) -> None:
        """Ctrl-C: the running cell is already recorded `killed`; the sweep stops here."""
        self.results.append(CellResult("(interrupted)", "killed", None, "interrupted by the user (Ctrl-C)", ""))

    def finish(self) -> int:
        killed = any(r.outcome == "killed" for r in self.results)
        all_finished = bool(self.results) and all(r.outcome == "finished" for r in self.results)
        table = summary_table(self.results)
        print(table, flush=True)
        print(f"MLflow: {self.store.uri} (experiment {self.store.experiment_id}"
              + (f", sweep run {self.store.parent_run_id}" if self.store.parent_run_id else "") + ")"
              + f"  -- {browse_hint(self.store.uri)}", flush=True)
        parent = self.store.parent_run_id
        if parent:
            client = self.store.client
            outcome = "killed" if killed else "finished" if all_finished else "failed"
            not_finished = sum(r.outcome != "finished" for r in self.results)
            reason = None if all_finished else f"{not_finished} of {len(self.results)} cells did not finish"
            tracking.log_metrics(client, parent, {
                "cells": len(self.results),
                "cells_finished": sum(r.outcome == "finished" for r in self.results),
                "sweep_time_s": time.time() - self.started,
            })
            client.log_text(parent, table + "\n", "summary.txt")
            if self.adopted_parent:  # `mlflow run` closes its own run from our exit status
                tracking.set_tags(client, parent, {"trainbench.outcome": outcome, "trainbench.reason": reason})
            else:
                tracking.close(client, parent, outcome, reason)
        if killed:
            return EXIT_INTERRUPTED
        return EXIT_OK if all_finished else EXIT_CELLS_DID_NOT_FINISH

    def _create_parent(self, client: Any, experiment_id: str) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run = client.create_run(experiment_id, run_name=f"sweep-{stamp}", tags={"trainbench.kind": "sweep"})
        return run.info.run_id

    def _tag_parent(self, client: Any, run_id: str) -> None:
        tracking.set_tags(client, run_id, {
            "trainbench.kind": "sweep",
            "trainbench.outcome": "running",
            "trainbench.cells": self.total,
            "trainbench.overrides": " ".join(self.overrides)[:5000] or "(defaults)",
            "git.commit": tracking.git_commit(),
            **hardware.host_tags(),
        })


def browse_hint(uri: str) -> str:
    if uri == tracking.default_tracking_uri():
        return "browse with `mlflow ui` from the project root"
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    return f"browse with `mlflow ui --backend-store-uri {uri}`"


def summary_table(results: list[CellResult]) -> str:
    rows = [("cell", "outcome", "samples/s", "reason")]
    for r in results:
        speed = f"{r.samples_per_s:,.1f}" if r.samples_per_s is not None else "-"
        if r.peak_tflops is not None:
            speed = f"{r.peak_tflops:,.2f} TFLOPS peak"
        rows.append((r.name, r.outcome, speed, r.reason or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(
            [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]), row[3]]
        ).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(lines)


def fail(message: str) -> int:
    print(f"trainbench: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT
