"""Expand a command line into its cells and validate every one of them before any work starts.

Hydra would find a bad value only when it reaches that job, after the cells before it have run (and a
missing config file only as a multi-line error). Expanding the sweep here the way Hydra's basic sweeper
does (sweeper params from the config, then the command line; the cartesian product) and composing each
cell with Hydra's compose API means a typo in the last cell of a sweep stops the sweep before its first
cell, with one line naming the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf

from trainbench.config import CONF_DIR, ConfigError, validate

# Hydra flags that print something instead of running cells: hand those straight to Hydra.
_INFO_FLAGS = ("help", "hydra_help", "cfg", "info", "shell_completion", "version", "experimental_rerun")


@dataclass(frozen=True)
class Plan:
    multirun: bool
    cells: list[dict[str, Any]]  # validated, resolved configs, in the order Hydra will run them
    overrides: list[str]  # the command-line overrides, as typed


def parse_args(argv: Sequence[str]) -> Any:
    return get_args_parser().parse_args(list(argv))


def is_informational(args: Any) -> bool:
    return any(getattr(args, flag, None) for flag in _INFO_FLAGS)


def plan(argv: Sequence[str]) -> Plan:
    """Compose and validate every cell the command line asks for. Raises ConfigError."""
    args = parse_args(argv)
    overrides = list(args.overrides)
    config_dir = str(CONF_DIR if args.config_dir is None else args.config_dir)
    config_name = args.config_name or "config"
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            jobs = _expand_sweep(overrides, config_name) if args.multirun else [overrides]
            cells = [validate(_compose(config_name, job)) for job in jobs]
    finally:
        GlobalHydra.instance().clear()  # hydra.main initialises its own
    return Plan(multirun=bool(args.multirun), cells=cells, overrides=overrides)


def _expand_sweep(overrides: list[str], config_name: str) -> list[list[str]]:
    parser = OverridesParser.create()
    parsed = _parse(parser, overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    base = _compose(config_name, fixed, with_hydra=True)
    sweeper_params = OmegaConf.select(base, "hydra.sweeper.params") or {}
    combined = [f"{key}={value}" for key, value in sweeper_params.items()] + overrides
    (jobs,) = BasicSweeper.split_arguments(_parse(parser, combined), max_batch_size=None)
    return jobs


def _parse(parser: OverridesParser, overrides: list[str]) -> list[Any]:
    try:
        return parser.parse_overrides(overrides)
    except OverrideParseException as error:
        first_line = str(error).splitlines()[0]
        raise ConfigError("overrides", " ".join(overrides), f"{first_line} (Hydra's override syntax)") from None


def _compose(config_name: str, overrides: list[str], with_hydra: bool = False) -> Any:
    try:
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=with_hydra)
    except MissingConfigException as error:
        group, _, value = (error.missing_cfg_file or "").rpartition("/")
        if group and error.options:
            raise ConfigError(group, value, f"choose one of {', '.join(sorted(error.options))}") from None
        raise ConfigError("config", error.missing_cfg_file, str(error).splitlines()[0]) from None
    except HydraException as error:
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        key = _key_in(lines[0] if lines else "", overrides)
        raise ConfigError(key, _value_of(key, overrides), " ".join(lines)) from None


def _key_in(message: str, overrides: list[str]) -> str:
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key and key in message:
            return key
    return "overrides"


def _value_of(key: str, overrides: list[str]) -> Any:
    for override in overrides:
        if override.lstrip("+~").split("=", 1)[0] == key and "=" in override:
            return override.split("=", 1)[1]
    return " ".join(overrides)
