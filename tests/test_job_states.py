"""What a sweep lists for cells whose outcome neither their launcher returned nor their failed store can give back
(a joblib launcher drops every job's return when one job's store fault stops it): what each job noted in the
sweep's scratch folder. Real cells composed through Hydra, a real folder; no process is started."""

from __future__ import annotations

import functools

from trainbench.config import CellConfig
from trainbench.config.compose import cells_for
from trainbench.store.tracking import StoreFailed
from trainbench.sweep import job_states
from trainbench.sweep.owner import Sweep

FAULT = StoreFailed("the tracking store sqlite:///m.db stopped accepting writes: its database was emptied")


@functools.cache
def three_cells() -> tuple[CellConfig, ...]:
    return tuple(cells_for(["seed=0,1,2", "device=cpu", "model=mlp", "tracking.system_metrics_interval_s=0"]))


def sweep_of_three(cells_run_here: bool = True) -> Sweep:
    cells = list(three_cells())
    jobs = [[f"seed={i}"] for i in range(3)]
    return Sweep(cells, jobs, launch=lambda _: [], cells_run_here=cells_run_here)


def test_each_cell_is_listed_as_far_as_its_job_got() -> None:
    sweep = sweep_of_three()
    with job_states.kept() as folder:
        sweep.job_states = folder
        job_states.write(1, {"state": "started"})
        ended = {"index": 2, "name": "pytorch-mlp-cpu-bs64 seed=1", "outcome": "finished", "samples_per_s": 812.5}
        job_states.write(2, {"state": "ended", **ended, "reason": None, "run_id": "r2", "peak_tflops": None})
        started, finished, never = sweep._rows({}, {}, None, FAULT)
    assert (started.outcome, started.reason) == (
        "lost",
        f"it ran until the sweep stopped; its record was lost: {FAULT}",
    )
    assert (finished.outcome, finished.samples_per_s, finished.run_id) == ("lost", 812.5, "r2")
    assert finished.reason == f"it ran (finished); its record was lost: {FAULT}"
    assert (never.outcome, never.reason) == ("not started", "the tracking store stopped taking writes")
    assert not folder.exists()  # removed with the sweep


def test_a_cell_run_on_another_machine_is_not_called_not_started() -> None:
    sweep = sweep_of_three(cells_run_here=False)
    with job_states.kept() as folder:
        sweep.job_states = folder
        rows = sweep._rows({}, {}, None, FAULT)
    assert {(row.outcome, row.reason) for row in rows} == {("lost", f"its outcome could not be read back: {FAULT}")}
