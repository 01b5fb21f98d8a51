"""The trainbench sweeper hands its launcher the composition it judged (a copy) instead of composing each job a
second time: what the launcher gets must be what Hydra's own load_sweep_config composes, setting for setting."""

from __future__ import annotations

import os

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from hydra_plugins.trainbench_sweeper.trainbench_sweeper import as_launched
from trainbench.cell.order import ORDER_ENV
from trainbench.config import CONF_DIR

SWEEP = ["model=mlp", "batch_size=8,16", "hydra.job.env_copy=[HOME]", "hydra.job.chdir=false"]
JOBS = [
    ["model=mlp", "batch_size=8"],
    ["+experiment=mlp_depth_study", "model.depth=2"],  # a preset: defaults, choices and its own sweep
    ["task=benchmark", "task.steps=3", "data.num_samples=64"],
]
AT_LAUNCH = f"++hydra.job.env_set.{ORDER_ENV}='eyJjZWxsIjogMX0='"


@pytest.fixture
def loader_and_master():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides=SWEEP, run_mode=RunMode.MULTIRUN)
        str(master.hydra.sweep.dir)  # resolves ${now:...} into the sweep's cache, as a launcher does
        yield loader, master
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("job", JOBS, ids=["plain", "preset", "task"])
def test_the_launcher_gets_what_hydra_would_compose(loader_and_master, job: list[str]) -> None:
    loader, master = loader_and_master
    judged = {tuple(job): loader.load_sweep_config(master, job)}
    reused = as_launched(judged, master, [*job, AT_LAUNCH])
    fresh = loader.load_sweep_config(master, [*job, AT_LAUNCH])
    assert reused is not None
    assert OmegaConf.to_container(reused, resolve=False) == OmegaConf.to_container(fresh, resolve=False)
    assert (
        reused.hydra.job.env_set[ORDER_ENV] == "eyJjZWxsIjogMX0="
        and os.environ["HOME"] == reused.hydra.job.env_set.HOME
    )
    assert reused.hydra.sweep.dir == fresh.hydra.sweep.dir == master.hydra.sweep.dir  # one ${now:...} for the sweep
    assert reused.hydra.overrides.hydra[-1] == AT_LAUNCH


def test_a_job_that_was_not_judged_or_gains_a_setting_is_composed_afresh(loader_and_master) -> None:
    loader, master = loader_and_master
    judged = {("model=mlp",): loader.load_sweep_config(master, ["model=mlp"])}
    assert as_launched(judged, master, ["model=resnet18", AT_LAUNCH]) is None
    assert as_launched(judged, master, ["model=mlp", "batch_size=4"]) is None
    assert as_launched(judged, master, ["model=mlp", "++hydra.job.name=other"]) is None
