"""Compositions a command makes once and uses twice. The trainbench sweeper hands its launcher the composition it
judged (a copy) instead of composing each job a second time: what the launcher gets must be what Hydra's own
load_sweep_config composes, setting for setting. The command line's check hands hydra.main the mode it composed:
it must be the mode Hydra's get_mode composes from the same command line."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
from hydra_plugins.trainbench_sweeper.trainbench_sweeper import as_launched
from trainbench.cell.order import ORDER_ENV
from trainbench.config import CONF_DIR
from trainbench.config.command_line import check_command_line, parse_args

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
    judged = {tuple(job): pickle.dumps(loader.load_sweep_config(master, job))}
    reused = as_launched(judged, master, [*job, AT_LAUNCH])
    fresh = loader.load_sweep_config(master, [*job, AT_LAUNCH])
    assert reused is not None
    assert OmegaConf.to_container(reused, resolve=False) == OmegaConf.to_container(fresh, resolve=False)
    assert OmegaConf.get_type(reused) is OmegaConf.get_type(fresh)  # the typed cell, struct and writable alike
    for node in (lambda c: c, lambda c: c.hydra, lambda c: c.model):
        assert (OmegaConf.is_struct(node(reused)), OmegaConf.is_readonly(node(reused))) == (
            OmegaConf.is_struct(node(fresh)),
            OmegaConf.is_readonly(node(fresh)),
        )
    assert (
        reused.hydra.job.env_set[ORDER_ENV] == "eyJjZWxsIjogMX0="
        and os.environ["HOME"] == reused.hydra.job.env_set.HOME
    )
    assert reused.hydra.sweep.dir == fresh.hydra.sweep.dir == master.hydra.sweep.dir  # one ${now:...} for the sweep
    assert reused.hydra.overrides.hydra[-1] == AT_LAUNCH


def test_a_job_that_was_not_judged_or_gains_a_setting_is_composed_afresh(loader_and_master) -> None:
    loader, master = loader_and_master
    judged = {("model=mlp",): pickle.dumps(loader.load_sweep_config(master, ["model=mlp"]))}
    assert as_launched(judged, master, ["model=resnet18", AT_LAUNCH]) is None
    assert as_launched(judged, master, ["model=mlp", "batch_size=4"]) is None
    assert as_launched(judged, master, ["model=mlp", "++hydra.job.name=other"]) is None


def mode_hydra_composes(argv: list[str], config_dir: Path) -> object:
    """What hydra.main's get_mode answers for `argv` with the primary config in `config_dir`."""
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2("run", create_config_search_path(str(config_dir)))
        return hydra.get_mode(config_name="config", overrides=parse_args(argv).overrides)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize(
    "argv",
    [
        ["model=mlp", "batch_size=8"],
        ["-m", "+experiment=mlp_depth_study"],
        ["hydra.mode=RUN", "model=mlp"],  # Hydra runs the job outside any sweeper, as it did
        ["model=mlp", "hydra.mode=MULTIRUN"],
    ],
    ids=["plain", "preset", "run-mode", "multirun-mode"],
)
def test_a_command_line_that_sweeps_nothing_runs_in_the_mode_hydra_composes(argv: list[str]) -> None:
    mode = check_command_line(parse_args(argv))
    assert mode is not None and mode == mode_hydra_composes(argv, CONF_DIR)


def test_a_config_without_a_mode_or_a_sweep_is_left_to_hydra(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("defaults:\n  - _self_\nseed: 0\n")
    argv = ["-cp", str(tmp_path), "+x=1", "hydra/sweeper=trainbench"]
    assert check_command_line(parse_args(argv)) is None
    assert mode_hydra_composes(argv, tmp_path) is None
    assert check_command_line(parse_args(["-m", "model=mlp", "batch_size=8,16"])) is None  # a swept preset could set it
