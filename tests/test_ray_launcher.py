"""hydra/launcher=ray: the cells of one sweep run as Ray tasks on a local Ray instance, under one parent run.

Ray is optional (not in requirements.txt: ~400 MB installed): this test runs only where `ray` and
`hydra-ray-launcher` import in the test's Python, e.g. `pip install ray==2.60.0 hydra-ray-launcher`.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

import pytest

from conftest import TINY

pytestmark = pytest.mark.slow


@functools.cache
def ray_problem() -> str | None:
    """Why Ray cannot run a sweep here, or None."""
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        return "ray and hydra-ray-launcher are optional and not installed (pip install ray==2.60.0 hydra-ray-launcher)"
    probe = subprocess.run([sys.executable, "-c", "import ray, hydra_plugins.hydra_ray_launcher"], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"ray is installed but does not import here: {last} (docs/team.md, Ray)"
    return None


@pytest.mark.skipif(ray_problem() is not None, reason=str(ray_problem()))
def test_ray_runs_each_cell_in_its_own_task_under_one_parent(trainbench) -> None:
    result = trainbench("-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
                        "+hydra.launcher.ray.init.include_dashboard=false", "batch_size=16,32", "device=cpu", *TINY)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = result.runs()
    (parent,) = [r for r in runs if r.data.tags["trainbench.kind"] == "sweep"]
    cells = [r for r in runs if r.data.tags["trainbench.kind"] == "cell"]
    assert sorted(c.data.tags["trainbench.batch_size"] for c in cells) == ["16", "32"]
    assert {c.data.tags["trainbench.outcome"] for c in cells} == {"finished"}
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parent.info.run_id}
    # Each job ran in a Ray worker process, not in the sweep's own process.
    owner_pid = parent.data.tags["trainbench.process"].split(":")[1]
    assert owner_pid not in {c.data.tags["trainbench.process"].split(":")[1] for c in cells}
    assert not [r for r in runs if r.info.status == "RUNNING"]
