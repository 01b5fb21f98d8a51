"""From a command line to judged cells, with every failure as one line.

Used in two places: `check_command_line` runs before Hydra (so that Hydra never prints a multi-line error
or a traceback for bad input), and the trainbench sweeper's `expand_and_judge` turns the expanded jobs
into typed cells before the first one runs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trainbench.config import CONF_DIR, CellConfig, choices, flatten, validate
from trainbench.config.errors import ConfigError, PlainError, first_line, key_in_message, unknown_key
from trainbench.config.registry import SCHEMAS

# Hydra flags that print something instead of running cells.
INFO_FLAGS = ("help", "hydra_help", "cfg", "info", "shell_completion", "version")


def parse_args(argv: Sequence[str]) -> Any:
    """Hydra's own command-line parser (argparse: a bad flag exits 2 with its usage line)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser().parse_args(list(argv))


def is_informational(args: Any) -> bool:
    return any(getattr(args, flag, None) for flag in INFO_FLAGS)


def check_command_line(args: Any) -> None:
    """Everything Hydra would compose before trainbench's sweeper runs, composed here first: the primary
    config with the overrides that are not sweeps. Raises ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = list(args.overrides)
    if args.multirun and is_informational(args):
        flag = next(f"--{flag.replace('_', '-')}" for flag in INFO_FLAGS if getattr(args, flag, None))
        raise PlainError(
            flag,
            f"{flag} prints and runs nothing: leave out -m (to list a sweep's cells, run it with sweep.dry_run=true)",
        )
    for override in overrides:
        if len(override) > 1000:
            raise PlainError(
                "overrides", f"an override of {len(override):,} characters is not a setting: {override[:40]!r}..."
            )
    parsed = parse_overrides(OverridesParser.create(), overrides)
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps and args.cfg:
        raise PlainError(
            "--cfg",
            f"--cfg shows one cell's config, but {sweeps[0]} is a sweep: give one value per "
            "key, or list a sweep's cells with sweep.dry_run=true",
        )
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    config_dir = str(CONF_DIR if args.config_dir is None else args.config_dir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            composed = compose_or_explain(
                lambda job: compose(config_name=args.config_name or "config", overrides=job, return_hydra_config=True),
                fixed,
            )
            if not sweeps:
                validate(composed)
    finally:
        GlobalHydra.instance().clear()  # hydra.main initialises its own


def parse_overrides(parser: Any, overrides: list[str]) -> list[Any]:
    from hydra.errors import OverrideParseException

    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        group, _, field = key.partition(".")
        if field == "name" and group in choices_groups():
            raise PlainError(
                key,
                f"`{key}` is the choice itself: choose it with {group}={value or '<name>'} "
                f"(one of {', '.join(choices(group))})",
            )
        if key in choices_groups() and value.strip().lower() in ("null", "none", "~") and "=" in override:
            raise PlainError(key, f"`{key}` must be chosen: {key}=<one of {', '.join(choices(key))}>")
    try:
        parsed = list(parser.parse_overrides(overrides))
    except OverrideParseException as error:
        text = first_line(error)
        culprit = next((o for o in overrides if o.split("=", 1)[0] in text or o in text), " ".join(overrides))
        raise ConfigError(
            "overrides", culprit, f"{text} (Hydra's override syntax: key=value, or key=a,b for a sweep)"
        ) from None
    except OSError as error:
        raise PlainError("overrides", f"could not read the overrides: {error}") from None
    for override in parsed:
        key = override.get_key_element()
        if key.lstrip("+~") in choices_groups() and not override.is_delete():
            _check_group_values(key.lstrip("+~"), override)
    return parsed


def _check_group_values(group: str, override: Any) -> None:
    """A group's value names a YAML file: a number or a list is never one (Hydra would crash on it)."""
    from hydra.core.override_parser.types import Glob

    if override.is_sweep_override():
        if not override.is_discrete_sweep() or isinstance(override.value(), Glob):
            return  # interval(): refused when the sweep is expanded; glob(): expands to the group's files
        values = list(override.sweep_iterator())
    else:
        values = [override.value()]
    for value in values:
        if not isinstance(value, str) or value not in choices(group):
            shown = value if not isinstance(value, str) else value[:80]
            raise ConfigError(group, shown, f"choose one of {', '.join(choices(group))}")


def expand_and_judge(
    parser: Any, overrides: list[str], compose: Callable[[list[str]], DictConfig]
) -> tuple[list[list[str]], list[CellConfig]]:
    """Expand a sweep the way Hydra's basic sweeper does (comma lists, glob, range, choice), then compose and
    judge every job. Returns (each job's overrides, each job's cell); raises ConfigError."""
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
    return jobs, [validate(compose_or_explain(compose, job)) for job in jobs]


def compose_or_explain(compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> DictConfig:
    """compose(overrides), with whatever Hydra or OmegaConf says about them as one ConfigError."""
    from hydra.errors import HydraException, MissingConfigException

    try:
        return compose(overrides)
    except MissingConfigException as error:
        group, _, value = (error.missing_cfg_file or "").rpartition("/")
        if group and error.options is not None:
            options = [o for o in error.options if not o.startswith("_")]
            listed = ", ".join(sorted(options)) or f"(none: conf/{group}/ is empty)"
            raise ConfigError(group.lstrip("/"), value, f"choose one of {listed}") from None
        raise PlainError("config", first_line(error)) from None
    except (HydraException, OmegaConfBaseException) as error:
        raise explain(error, overrides) from None
    except OSError as error:  # a key thousands of characters long becomes a file name Hydra looks up
        raise PlainError("overrides", f"not a setting or a config file: {str(error)[:120]}") from None
    except (ValueError, TypeError, KeyError) as error:  # Hydra refuses some values outright, or trips on them
        raise PlainError("overrides", f"cannot compose {' '.join(overrides)[:200]}: {first_line(error)}") from None


def explain(error: BaseException, overrides: list[str]) -> ConfigError:
    """A Hydra or OmegaConf composition error as one line naming the key and what to do instead."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    key = key_in_message(message) or getattr(error, "full_key", None) or ""
    override = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == key), None)
    if "Could not delete" in message or (override or "").startswith("~"):
        group = key.split(".", 1)[0]
        if group in choices_groups():
            return PlainError(
                key, f"`{key}` cannot be removed: every cell needs a {group}; choose one of {', '.join(choices(group))}"
            )
        return PlainError(key, f"`{key}` cannot be removed (it is not in the config, or a cell needs it)")
    if "An item is already at" in message or "Could not append to config" in message:
        return PlainError(key, f"`{key}` already exists: set it with {key}=... (`+` adds only keys that do not exist)")
    if "Could not override" in message or "not in" in message or "Key '" in message:
        return unknown_key(key, known_keys(), lambda group: describe_group(group, overrides), choices_having)
    if "Value '" in message and (
        "could not be converted" in message or "is not a valid" in message or "Invalid type" in message
    ):
        value = OmegaConf.to_container(OmegaConf.create({"v": _value_in(override)}))["v"] if override else None
        return ConfigError(key or "config", value, first_line(error))
    if "Missing mandatory value" in message:
        group = key.split(".", 1)[0]
        if group in choices_groups():
            return PlainError(group, f"`{group}` must be chosen: {group}=<one of {', '.join(choices(group))}>")
    return ConfigError(key or "overrides", _value_in(override) if override else " ".join(overrides), first_line(error))


def _value_in(override: str | None) -> str | None:
    return override.split("=", 1)[1] if override and "=" in override else None


def choices_groups() -> tuple[str, ...]:
    from trainbench.config.schema import GROUPS

    return GROUPS


@functools.lru_cache(maxsize=1)
def known_keys() -> tuple[str, ...]:
    """Every key of the default config, dotted (for suggestions)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    was_initialized = GlobalHydra.instance().is_initialized()
    if was_initialized:
        composed = compose(config_name="config")
        return tuple(flatten(OmegaConf.to_container(composed, resolve=False)))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        composed = compose(config_name="config")
    GlobalHydra.instance().clear()
    return tuple(flatten(OmegaConf.to_container(composed, resolve=False)))


def default_choice(group: str) -> str | None:
    """The group's choice in conf/config.yaml's defaults list."""
    import yaml

    for entry in yaml.safe_load((CONF_DIR / "config.yaml").read_text()).get("defaults", []):
        if isinstance(entry, dict) and group in entry:
            return str(entry[group])
    return None


def describe_group(group: str, overrides: list[str]) -> str | None:
    """`model `resnet50` (a vision model; its settings: torchvision, keras, ...)`, for a group key."""
    if group not in choices_groups():
        return None
    chosen = next(
        (o.split("=", 1)[1] for o in overrides if o.lstrip("+").split("=", 1)[0] == group and "=" in o),
        default_choice(group),
    )
    if chosen is None or chosen not in choices(group):
        return f"the {group} group"
    cls = schema_of(group, chosen)
    if cls is None:
        return f"{group} `{chosen}`"
    fields = [f.name for f in dataclasses.fields(cls) if f.name != "name"]
    return f"{group} `{chosen}` ({getattr(cls, 'schema_kind', group)}; its settings: {', '.join(fields)})"


def schema_of(group: str, choice: str) -> type | None:
    """The schema class a YAML choice extends (read from its defaults list)."""
    path = CONF_DIR / group / f"{choice}.yaml"
    seen = set()
    while path.exists() and path not in seen:  # a choice may extend another choice (mlp_deep: mlp)
        seen.add(path)
        text = path.read_text()
        for kind, cls in SCHEMAS.get(group, {}).items():
            if f"/schema/{group}/{kind}@" in text:
                return cls
        parents = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ") and "/" not in line]
        path = CONF_DIR / group / f"{parents[0]}.yaml" if parents else path
    return None


def choices_having(group: str, field: str) -> list[str]:
    """The choices of `group` whose schema has `field` (e.g. the vision models for model.pretrained)."""
    top = field.split(".", 1)[0]
    return [
        c
        for c in choices(group)
        if (cls := schema_of(group, c)) is not None and top in {f.name for f in dataclasses.fields(cls)}
    ]


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
