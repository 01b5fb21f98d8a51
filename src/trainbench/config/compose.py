"""From overrides to judged cells: the trainbench sweeper's `expand_and_judge` expands a sweep the way Hydra's basic
sweeper does (presets' own sweeps included) and judges every job before the first one runs: the one place a sweep's
cells are judged. `cells_for` does the same for tests and the references.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Hydra composes each choice into the schema it names: every shipped framework's and task's registered.
import trainbench.config.plugins  # noqa: F401
from trainbench.config import CellConfig, validate
from trainbench.config.catalogue import (
    schema_of,
)
from trainbench.config.errors import ConfigError, PlainError, first_line
from trainbench.config.explain import compose_or_explain
from trainbench.config.overrides import parse_overrides
from trainbench.locations import CONF_DIR, choices


def expand_and_judge(
    parser: Any, overrides: list[str], compose: Callable[[list[str]], DictConfig]
) -> tuple[list[list[str]], list[CellConfig]]:
    """Expand a sweep the way Hydra's basic sweeper does (comma lists, glob, range, choice), then compose and
    judge every job. Returns (each job's overrides, each job's cell); raises ConfigError."""
    judged = [pair for job in _expand(parser, overrides) for pair in _judged_with_preset_sweep(parser, job, compose, 0)]
    jobs, cells = [job for job, _ in judged], [cell for _, cell in judged]
    refuse_unused_settings(jobs, cells)
    return jobs, cells


def _expand(parser: Any, overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper expands them (later values of a key win)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    parsed = parse_overrides(parser, overrides)
    for override in parsed:
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise ConfigError(
                override.get_key_element(),
                override.input_line.split("=", 1)[-1],
                "interval() is a range for optimizing sweepers; trainbench runs discrete cells: "
                "use a,b,c, range(start,stop,step) or choice(...)",
            )
    try:
        batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    except (HydraException, ValueError, OSError) as error:
        raise PlainError("overrides", f"cannot expand the sweep: {first_line(error)}") from None
    jobs = [list(job) for batch in batches for job in batch]
    if not jobs or any(o.is_sweep_override() and not list(o.sweep_iterator()) for o in parsed):
        raise PlainError("overrides", "the sweep has no cells: a range() or choice() in it is empty")
    return jobs


# Presets that sweep presets that sweep ...: deeper than this is a loop between preset files.
PRESET_DEPTH = 4


def _judged_with_preset_sweep(
    parser: Any, job: list[str], compose: Callable[[list[str]], DictConfig], depth: int
) -> list[tuple[list[str], CellConfig]]:
    """The job judged; or, when it chose a preset whose own sweep (`hydra.sweeper.params`) it does not cover,
    that sweep expanded under the job's values and each of its jobs judged. Hydra reads a preset's sweep only
    when the preset is in the primary config, so `+experiment=A,B` (a sweep of presets) would run each
    preset's first setting only: each preset expands here as `+experiment=A` alone would."""
    composed = compose_or_explain(compose, job)
    params = OmegaConf.select(composed, "hydra.sweeper.params", default=None)
    if params and depth < PRESET_DEPTH:
        fixed = {o.split("=", 1)[0] for o in job}
        own = [f"{key}={value}" for key, value in params.items() if key not in fixed]
        if own:
            return [
                pair
                for sub in _expand(parser, own + job)
                for pair in _judged_with_preset_sweep(parser, sub, compose, depth + 1)
            ]
    return [(job, validate(composed))]


# What a task that leaves a group out says it does without it.
GROUP_WORDS = {"model": "model", "data": "data", "optim": "optimizer"}


def refuse_unused_settings(jobs: list[list[str]], cells: list[CellConfig]) -> None:
    """A setting typed for a group no cell of the sweep uses (`data.pipeline=loader task=matmul`: a matmul has
    no model, data or optimizer) changes nothing and would read as if it did: refused. A sweep over tasks
    (`task=train,matmul data=digits`) keeps it, as long as one of its cells uses it."""
    used: dict[str, bool] = {}
    task_of: dict[str, str] = {}
    for job, cell in zip(jobs, cells, strict=True):
        unused = getattr(cell.task, "unused_groups", ())
        for override in job:
            key = override.split("=", 1)[0].lstrip("+~")
            group = key.split(".", 1)[0]
            if group not in GROUP_WORDS or "/" in key or "@" in key:
                continue
            used[key] = used.get(key, False) or group not in unused
            task_of.setdefault(key, cell.task.name)
    for key, in_use in used.items():
        if in_use:
            continue
        task, group = task_of[key], key.split(".", 1)[0]
        unused = getattr(schema_of("task", task), "unused_groups", ())
        words = [GROUP_WORDS[g] for g in GROUP_WORDS if g in unused]
        listed = f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else "".join(words)
        tasks = [t for t in choices("task") if group not in getattr(schema_of("task", t), "unused_groups", ())]
        raise PlainError(
            key,
            f"`{key}` changes nothing: task={task} uses no {listed}; leave {key} out, or choose "
            f"task={' or task='.join(tasks)}",
        )


def cells_for(overrides: list[str]) -> list[CellConfig]:
    """The judged cells `python src/run.py OVERRIDES` would run, composed here without running anything: the
    preset's own sweep (`hydra.sweeper.params`) expanded under the command line's values, as trainbench's
    sweeper does. Raises ConfigError. For checks that must agree with the command line (the reference runs'
    suggested commands); call it inside one `hydra.initialize_config_dir` to compose many commands quickly."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    was_initialized = GlobalHydra.instance().is_initialized()
    if not was_initialized:
        initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3")
    try:
        parser = OverridesParser.create()
        presets = tuple(
            o.input_line
            for o in parse_overrides(parser, overrides)
            if not o.is_sweep_override() and o.get_key_element().lstrip("+~").split("/")[0] in ("experiment", "hydra")
        )
        swept = [f"{key}={value}" for key, value in _preset_sweep(presets).items()]
        _, cells = expand_and_judge(
            parser, swept + list(overrides), lambda job: compose(config_name="config", overrides=job)
        )
        return cells
    finally:
        if not was_initialized:
            GlobalHydra.instance().clear()


@functools.lru_cache(maxsize=64)
def _preset_sweep(presets: tuple[str, ...]) -> dict[str, str]:
    """A preset's own sweep (its `hydra.sweeper.params`): the only place besides the command line a sweep's
    axes come from."""
    from hydra import compose

    composed = compose_or_explain(
        lambda job: compose(config_name="config", overrides=job, return_hydra_config=True), list(presets)
    )
    return dict(composed.hydra.sweeper.params or {})
