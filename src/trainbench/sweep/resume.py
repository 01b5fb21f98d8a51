"""sweep.resume: which of a sweep's cells already have a result in the store.

A cell counts as done when a finished run in the store has the same config hash (trainbench.config_hash),
ran on a machine with this machine's label for the device the cell asks for (trainbench.measure.hardware.label of
the run's own tags: the GPU with its memory, the Apple GPU or the CPU with its cores, so a 24-core M1 Max never
stands for a 32-core one), and with the version of the framework installed here (trainbench.framework_version).
Such cells are skipped: the new sweep records a `skipped` run pointing at the result (trainbench.result_run_id).
With resume=failed, the cells whose latest run failed, was killed or was lost run again, and so do the cells that
never ran here (a sweep stopped before it reached them); only finished cells are skipped.

A run that died before its cell bound a device (the OOM killer at import time) has no backend and no
framework version: it is this machine's when the host it recorded has this machine's label for the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from trainbench.config import CellConfig, config_hash
from trainbench.measure import hardware
from trainbench.tasks.base import task_of

RERUN_OUTCOMES = ("failed", "killed", "hung", "lost")


@dataclass(frozen=True)
class Decision:
    run: bool
    prior_run: Any = None  # the run that holds the result (skipped cells)
    reason: str = ""


def decide(cells: list[CellConfig], store: Any, experiment_id: str, mode: Any) -> list[Decision]:
    if mode is False:
        return [Decision(True) for _ in cells]
    host = hardware.host_tags()
    return [_decide(cell, store, experiment_id, mode, host) for cell in cells]


def _decide(cell: CellConfig, store: Any, experiment_id: str, mode: Any, host: dict[str, str]) -> Decision:
    prepared = task_of(cell).prepared(cell)
    digest = config_hash(prepared)
    runs = store.search_runs(
        [experiment_id],
        f"tags.`trainbench.config_hash` = '{digest}' and tags.`trainbench.kind` = 'cell'",
        order_by=["attributes.start_time DESC"],
        max_results=200,
    )
    labels = hardware.labels_for(cell.device.name, host)
    installed = _public(_installed(cell.framework.package))
    comparable = [r for r in runs if _here(r.data.tags, cell.device.name, labels, installed)]
    finished = [r for r in comparable if r.data.tags.get("trainbench.outcome") == "finished"]
    if mode == "failed":
        latest = next((r for r in comparable if r.data.tags.get("trainbench.outcome") != "skipped"), None)
        outcome = latest.data.tags.get("trainbench.outcome") if latest is not None else None
        if outcome is None or outcome in RERUN_OUTCOMES:
            return Decision(True)  # it failed, or it never ran here
        if finished:
            return Decision(False, finished[0], f"already finished in run {finished[0].info.run_id} (sweep.resume)")
        return Decision(
            False,
            None,
            f"its latest run here was {outcome} (sweep.resume=failed reruns failed, killed, lost and never-run cells)",
        )
    if finished:
        return Decision(False, finished[0], f"already finished in run {finished[0].info.run_id} (sweep.resume)")
    return Decision(True)


def _here(tags: dict[str, str], device: str, labels: set[str], installed: str) -> bool:
    """Whether a run of the cell ran on this machine's kind of device with the framework installed here. A run
    that died before binding its device records neither backend nor version: its host's tags decide."""
    if "trainbench.backend" not in tags:
        return bool(hardware.labels_for(device, tags) & labels) and not tags.get("trainbench.framework_version")
    return hardware.run_label(tags) in labels and _public(tags.get("trainbench.framework_version", "")) == installed


def _public(version_string: str) -> str:
    """`2.15.0+cu132` -> `2.15.0`. The cell tags the version its framework reports (torch.__version__ carries the
    build's CUDA as a local part), while this process, which never imports a framework, reads the installed
    distribution's, which may not."""
    return version_string.split("+")[0]


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""
