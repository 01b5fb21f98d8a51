"""What a Hydra launcher cannot take, refused before anything runs.

Hydra types a launcher's settings from the launcher's own schema (hydra_joblib_launcher's JobLibLauncherConf,
submitit's queue confs), so `hydra.launcher.n_jobs=abc` is refused while composing. What a type cannot say
(`n_jobs=0`, a joblib backend that does not exist) would surface only once the launcher starts, after the
sweep's run is recorded, as a failed sweep: checked here instead, from the values each schema documents.
Large values are left alone (trainbench.sweep.launchers bounds how many cells run at once).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainbench.config.errors import ConfigError, PlainError, need
from trainbench.config.schema import whole


def check_sweeper(composed: DictConfig) -> None:
    """trainbench's sweeper owns every sweep (its store, parent run, summary, exit status); any other sweeper
    would hand Hydra's jobs straight to cells that have no store to record into."""
    target = str(OmegaConf.select(composed, "hydra.sweeper._target_", default=""))
    if target.endswith(".TrainbenchSweeper"):
        return
    refuse_sweeper(OmegaConf.select(composed, "hydra.runtime.choices", default={}).get("hydra/sweeper") or target)


def refuse_sweeper(chosen: str) -> None:
    raise ConfigError(
        "hydra/sweeper",
        chosen,
        "trainbench runs every sweep with its own sweeper: leave hydra/sweeper out (its one choice is trainbench); "
        "to run cells side by side or on a cluster choose a launcher, hydra/launcher=<one of "
        f"{', '.join(installed_launchers())}>",
    )


def installed_launchers() -> list[str]:
    """The Hydra launchers installed here, basic (the default) first."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers the installed launcher plugins' configs
    names = sorted(entry.removesuffix(".yaml") for entry in ConfigStore.instance().list("hydra/launcher"))
    return sorted(names, key=lambda name: name != "basic")


def check_launcher(composed: DictConfig) -> None:
    """Raise ConfigError for a `hydra.launcher.*` value the chosen launcher cannot take."""
    launcher = OmegaConf.select(composed, "hydra.launcher", default=None)
    if not isinstance(launcher, DictConfig):
        return
    _refuse_keys_not_in_schema(composed, launcher)
    target = str(launcher.get("_target_", ""))
    for suffix, check in CHECKS.items():
        if target.endswith(suffix):
            check(launcher)


def _refuse_keys_not_in_schema(composed: DictConfig, launcher: DictConfig) -> None:
    """A key added with `+` (+hydra.launcher.n_job=2) is taken by Hydra into a launcher's settings without a
    check, then either ignored or refused by the launcher once the sweep has started: refused here by name."""
    from hydra.core.config_store import ConfigStore

    chosen = (OmegaConf.select(composed, "hydra.runtime.choices", default={}) or {}).get("hydra/launcher")
    try:
        schema = ConfigStore.instance().load(f"hydra/launcher/{chosen}.yaml").node
    except Exception:  # noqa: BLE001  (a launcher from a config folder of the user's: its keys are its own)
        return
    known = {str(key) for key in schema}
    for key in launcher:
        if str(key) not in known:
            raise unknown_launcher_key(f"hydra.launcher.{key}", [f"hydra/launcher={chosen}"])


def check_sweep_dir(composed: DictConfig) -> None:
    """The launchers' folder (hydra.sweep.dir) is made once the sweep's run is recorded: one that cannot be made
    there would fail the sweep after its start. Its nearest existing folder must take a new folder."""
    from pathlib import Path

    try:
        folder = Path(str(OmegaConf.select(composed, "hydra.sweep.dir", default="") or "")).absolute()
    except Exception:  # noqa: BLE001  (an interpolation only Hydra's run can resolve: left to it)
        return
    if not str(folder):
        return
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and _takes_folders(existing):
        return
    why = "is a file" if not existing.is_dir() else "takes no new folders"
    raise PlainError(
        "hydra.sweep.dir",
        f"`hydra.sweep.dir`={folder} cannot be written ({existing} {why}): choose a folder you can write, "
        "e.g. hydra.sweep.dir=multirun/NAME",
    )


def _takes_folders(folder: Any) -> bool:
    """Whether a folder can be made in `folder`, found by making one and removing it: permission bits do not tell
    (root ignores them; a read-only mount or /proc refuses root too)."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".trainbench-check-", dir=folder))
    except OSError:
        return False
    return True


def _joblib(launcher: DictConfig) -> None:
    # The schema's comments: "if -1, all CPUs are used"; backend "hard-code[d]" or inferred from prefer
    # ("processes or threads") and require ("null or sharedmem"). The backends are joblib's own registry.
    import joblib
    from joblib.parallel import BACKENDS

    cpus = joblib.cpu_count()
    n_jobs = launcher.get("n_jobs")
    # joblib reads a negative n_jobs as cpus + 1 + n_jobs (-1: every CPU, -2: all but one); below -cpus it
    # would quietly run one cell at a time, and 0 "has no meaning" (joblib raises when the launcher starts).
    need(
        n_jobs is None or (whole(n_jobs) and (n_jobs >= 1 or -cpus <= n_jobs <= -1)),
        "hydra.launcher.n_jobs",
        n_jobs,
        f"how many cells run at once: a whole number >= 1, or -1 for one per CPU (joblib reads -2 as all CPUs "
        f"but one, and so on down to -{cpus}: this machine has {cpus}), e.g. hydra.launcher.n_jobs=2",
    )
    backends = sorted(BACKENDS)
    _one_of(launcher, "backend", [None, *backends], "joblib's backends; null: chosen from hydra.launcher.prefer")
    _one_of(launcher, "prefer", [None, "processes", "threads"], "")
    _one_of(launcher, "require", [None, "sharedmem"], "")


def _submitit(launcher: DictConfig) -> None:
    for key in ("timeout_min", "nodes", "tasks_per_node"):
        value = launcher.get(key)
        need(
            whole(value) and value >= 1,
            f"hydra.launcher.{key}",
            value,
            f"a whole number >= 1, e.g. hydra.launcher.{key}=1",
        )
    for key, least in (("cpus_per_task", 1), ("mem_gb", 1), ("gpus_per_node", 0)):
        value = launcher.get(key)
        need(
            value is None or (whole(value) and value >= least),
            f"hydra.launcher.{key}",
            value,
            f"null or a whole number >= {least}",
        )


def _one_of(launcher: DictConfig, key: str, allowed: list[Any], why: str) -> None:
    value = launcher.get(key)
    shown = ", ".join("null" if a is None else str(a) for a in allowed)
    need(value in allowed, f"hydra.launcher.{key}", value, f"choose one of {shown}" + (f" ({why})" if why else ""))


# The launcher class (`_target_`) -> its check.
CHECKS: dict[str, Callable[[DictConfig], None]] = {
    ".JoblibLauncher": _joblib,
    ".LocalLauncher": _submitit,
    ".SlurmLauncher": _submitit,
}


def unknown_launcher_key(key: str, overrides: list[str]) -> ConfigError:
    """`hydra.launcher.backend` under the basic launcher: say which launchers have it, not trainbench's settings."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    chosen = next((o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("hydra/launcher=")), "basic")
    field = key[len("hydra.launcher.") :].split(".", 1)[0]
    having, own = [], []
    for entry in store.list("hydra/launcher"):
        name = entry.removesuffix(".yaml")
        fields = [k for k in store.load(f"hydra/launcher/{entry}").node if not str(k).startswith("_")]
        if name == chosen:
            own = fields
        elif field in fields:
            having.append(name)
    import difflib

    close = difflib.get_close_matches(field, [str(f) for f in own], n=1)
    if close:
        hint = f"; did you mean hydra.launcher.{close[0]}?"
    elif having:
        hint = f"; hydra/launcher={' or hydra/launcher='.join(having)} has it"
    else:
        hint = f"; its settings: {', '.join(map(str, own))}" if own else "; it has no settings"
    return PlainError(key, f"`{key}` is not a setting of the {chosen} launcher{hint}")
