"""From a command line to judged cells, with every failure as one line.

Used in two places: `check_command_line` runs before Hydra (so that Hydra never prints a multi-line error
or a traceback for bad input), and the trainbench sweeper's `expand_and_judge` turns the expanded jobs
into typed cells before the first one runs: the one place a sweep's cells are judged.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

# Hydra composes each choice into the schema it names: every shipped framework's and task's registered.
import trainbench.config.plugins  # noqa: F401
from trainbench.config import CellConfig, validate
from trainbench.config.catalogue import (
    choices_groups,
    choices_having,
    default_choice,
    default_values,
    describe_group,
    known_keys,
    preset_groups,
    schema_of,
)
from trainbench.config.errors import ConfigError, PlainError, first_line, key_in_message, unknown_key
from trainbench.locations import CONF_DIR, choices

# Hydra flags that print something instead of running cells.
INFO_FLAGS = ("help", "hydra_help", "cfg", "info", "shell_completion", "version")


def parse_args(argv: Sequence[str]) -> Any:
    """Hydra's own command-line parser; what it refuses (`--cfg bogus`) is one line, not its usage block."""
    from hydra._internal.utils import get_args_parser

    def refuse(message: str) -> NoReturn:
        raise PlainError("flags", f"{message} (trainbench --help says what each flag does)")

    parser = get_args_parser()
    parser.error = refuse
    return parser.parse_args(list(argv))


def _hydra_options() -> dict[str, bool]:
    """Hydra's flags -> whether the next word may be the flag's value."""
    from hydra._internal.utils import get_args_parser

    takes_value: dict[str, bool] = {}
    for action in get_args_parser()._actions:  # noqa: SLF001  (argparse keeps its options only there)
        for option in action.option_strings:
            takes_value[option] = action.nargs != 0
    return takes_value


def refuse_unknown_flags(argv: Sequence[str]) -> None:
    """A flag Hydra does not take (`--dry-run`, `--multi-run`) as one line naming the setting it may have meant,
    instead of argparse's usage block. Raises ConfigError."""
    known = _hydra_options()
    for word in argv:
        if word == "--":
            return
        if not word.startswith("-") or len(word) < 2 or word[1].isdigit() or word.split("=", 1)[0] in known:
            continue
        flag = word.split("=", 1)[0]
        name = flag.lstrip("-").replace("-", "_")
        meant = [key for key in default_values() if key == name or key.endswith(f".{name}")]
        hint = f"did you mean the setting {meant[0]}=...? " if meant else ""
        raise PlainError(
            flag,
            f"`{flag}` is not a flag: {hint}settings are key=value (e.g. sweep.dry_run=true); the flags are "
            "-m/--multirun, --cfg job, --help and Hydra's own (--hydra-help)",
        )


def flags_first(argv: Sequence[str]) -> list[str]:
    """The command line with Hydra's flags (and their values) ahead of the overrides, each group in its order.
    Hydra's parser takes the overrides as one run of positional arguments, so `model=mlp -m batch_size=8`
    would leave `batch_size=8` unrecognized; Hydra reads sys.argv itself, so the order is fixed here."""
    takes_value = _hydra_options()
    flags: list[str] = []
    overrides: list[str] = []
    last: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        option = word.split("=", 1)[0] if word.startswith("--") else word
        if word == "--":
            overrides += words[i + 1 :]
            break
        if not word.startswith("-") or option not in takes_value:
            overrides.append(word)  # an override, or a flag argparse will refuse with its own message
        elif takes_value[option] and "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("-"):
            flags += [word, words[i + 1]]
            i += 1
        elif takes_value[option] and "=" not in word:
            last.append(word)  # no value after it: ahead of the overrides it would take one of them as its value
        else:
            flags.append(word)
        i += 1
    return flags + overrides + last


SHELLS = ("bash", "zsh", "fish")
COMPLETION_ACTIONS = ("install", "uninstall", "query")


def check_shell_completion(args: Any) -> None:
    """`-sc install=bash` and the rest as one line each where Hydra would raise: one action, a shell it has a
    script for, and for query the COMP_LINE the completion script sets. Raises ConfigError."""
    import os

    how = 'install tab completion with: eval "$(trainbench -sc install=bash)" (or zsh, fish)'
    given = dict(o.split("=", 1) if "=" in o else (o, "") for o in args.overrides)
    actions = [a for a in given if a in COMPLETION_ACTIONS]
    if len(actions) != 1 or len(given) != 1:
        raise PlainError("-sc", f"-sc takes one of {', '.join(f'{a}=SHELL' for a in COMPLETION_ACTIONS)}: {how}")
    action, shell = actions[0], given[actions[0]]
    if shell not in SHELLS:
        raise PlainError("-sc", f"-sc {action}={shell}: the shells are {', '.join(SHELLS)}; {how}")
    if action == "query" and "COMP_LINE" not in os.environ:
        raise PlainError("-sc", f"-sc query={shell} is what the completion script runs, with COMP_LINE set; {how}")


def is_informational(args: Any) -> bool:
    return any(getattr(args, flag, None) for flag in INFO_FLAGS)


def check_command_line(args: Any) -> None:
    """Everything Hydra would compose before trainbench's sweeper runs, composed here first: the primary
    config with the overrides that are not sweeps. Raises ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from trainbench.config.launchers import check_launcher, check_sweep_dir, check_sweeper

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
    refuse_repeated_keys(parsed)
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    for override in parsed:
        if override.is_sweep_override() and override.is_hydra_override():  # Hydra's multi-line refusal, exit 1
            key = override.get_key_element().lstrip("+~")
            raise PlainError(
                key, f"`{key}` is one of Hydra's own settings, which one sweep cannot vary: give one value"
            )
    if sweeps and args.cfg:
        raise PlainError(
            "--cfg",
            f"--cfg shows one cell's config, but {sweeps[0]} is a sweep: give one value per "
            "key, or list a sweep's cells with sweep.dry_run=true",
        )
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    config_dir = str(primary_config_dir(args))
    if not Path(config_dir).is_dir():
        flag = "-cd" if args.config_dir is not None else "-cp"
        raise PlainError(
            flag,
            f"{flag} {config_dir}: no such folder (a relative -cp is relative to src/run.py, or to the current "
            "folder for the trainbench command)",
        )
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            composed = compose_or_explain(
                lambda job: compose(config_name=args.config_name or "config", overrides=job, return_hydra_config=True),
                fixed,
            )
            check_sweeper(composed)
            check_launcher(composed)
            if args.multirun:
                check_sweep_dir(composed)
            # A sweep's cells are judged once, by trainbench's sweeper (expand_and_judge); a flag that prints instead
            # of running (--cfg job) reaches no sweeper, so its one cell is judged here.
            if not sweeps and is_informational(args):
                cell = validate(composed)
                if not OmegaConf.select(composed, "hydra.sweeper.params", default=None):
                    refuse_unused_settings([fixed], [cell])  # with a preset's own sweep: when it is expanded
    finally:
        GlobalHydra.instance().clear()  # hydra.main initialises its own


def refuse_repeated_keys(parsed: list[Any]) -> None:
    """Hydra applies overrides in order, so the last of two for one key wins and the first is dropped without a
    word: a command line edited in a hurry (batch_size=32 ... batch_size=64) would measure what was not meant."""
    seen: dict[str, str] = {}
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        if key in seen and seen[key].lstrip("+~") != override.input_line.lstrip("+~"):  # the same twice drops nothing
            raise PlainError(
                key,
                f"`{key}` is given twice ({seen[key]}, {override.input_line}): give it once "
                f"(several values as a sweep: -m {key}=a,b)",
            )
        seen[key] = override.input_line


def primary_config_dir(args: Any) -> Path:
    """Where Hydra will look for the primary config: -cd/--config-dir is searched before -cp/--config-path, which
    replaces the entry point's own (conf/). A relative -cp is relative to the script declaring @hydra.main
    (src/run.py), as Hydra documents; the installed command has none, so there it is relative to the current
    folder (the command line is rewritten to match, in `absolute_config_path`)."""
    if args.config_dir is not None:
        return Path(args.config_dir)
    if args.config_path is None:
        return CONF_DIR
    path = Path(args.config_path)
    if path.is_absolute():
        return path
    script = Path(sys.argv[0])
    return ((script.resolve().parent if script.suffix == ".py" else Path.cwd()) / path).resolve()


def absolute_config_path(argv: list[str]) -> list[str]:
    """The installed `trainbench` command's -cp made absolute: Hydra would resolve a relative one against the
    installed package, where no user keeps configs."""
    if Path(sys.argv[0]).suffix == ".py":
        return argv
    out = list(argv)
    for i, word in enumerate(out):
        if word in ("-cp", "--config-path") and i + 1 < len(out) and not Path(out[i + 1]).is_absolute():
            out[i + 1] = str(Path.cwd() / out[i + 1])
        elif word.startswith("--config-path=") and not Path(word.split("=", 1)[1]).is_absolute():
            out[i] = f"--config-path={Path.cwd() / word.split('=', 1)[1]}"
    return out


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
        if key == "hydra/sweeper" and value != "trainbench" and "=" in override:
            from trainbench.config.launchers import refuse_sweeper

            refuse_sweeper(value)
    try:
        parsed = list(parser.parse_overrides(overrides))
    except OverrideParseException as error:
        raise _explain_syntax(parser, overrides, error) from None
    except OSError as error:
        raise PlainError("overrides", f"could not read the overrides: {error}") from None
    for override in parsed:
        key = override.get_key_element()
        if override.is_delete():
            _refuse_removal(key.lstrip("~"))
        elif key.lstrip("+~") in choices_groups():
            _check_group_values(key.lstrip("+~"), override)
    return parsed


def _explain_syntax(parser: Any, overrides: list[str], error: Exception) -> ConfigError:
    """Hydra's grammar refused an override: name the one it refused, by its key, and the quoting that fixes it
    when quoting does (`data.root=a=b`, `tracking.experiment=é`)."""
    from hydra.errors import OverrideParseException

    text = first_line(error)
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException as own:
            text = first_line(own)
        else:
            continue
        prefix, key, value = re.match(r"([+~]*)([^=]*)=?(.*)", override, re.DOTALL).groups()  # type: ignore[union-attr]
        if not re.fullmatch(r"[\w./@-]+", key):
            break
        fix = "Hydra's override syntax: key=value, or key=a,b for a sweep"
        quoted = f"{prefix}{key}='{value}'"
        try:
            parser.parse_overrides([quoted])
            fix = f"quote the value: {quoted}"
        except OverrideParseException:
            pass
        return ConfigError(key, value, f"{text} ({fix})")
    culprit = next((o for o in overrides if o.split("=", 1)[0] in text or o in text), " ".join(overrides))
    return ConfigError("overrides", culprit, f"{text} (Hydra's override syntax: key=value, or key=a,b for a sweep)")


def _refuse_removal(key: str) -> None:
    """`~KEY` removes KEY from the composed config. Every cell has every setting of its schema, so removing one
    (`~cell`, `~tracking`, `~batch_size`) would leave what its dataclass defaults to, or break a key that reads
    it (`~tracking` made a message about tracking.uri): refused. Hydra's own keys and the presets added with
    `+experiment=NAME` are Hydra's to remove."""
    top = key.split(".", 1)[0]
    if "/" in key or "@" in key or top == "hydra" or top in preset_groups():
        return
    if key in choices_groups():
        raise PlainError(
            key, f"`{key}` cannot be removed: every cell needs {_a(key)}; choose one of {', '.join(choices(key))}"
        )
    defaults = default_values()
    under = _settings_under(key)
    if under:
        shown, example = under
        raise PlainError(
            key, f"`{key}` cannot be removed: every cell has its settings ({shown}); set one instead, e.g. {example}"
        )
    having = choices_having(top, key.split(".", 1)[1]) if top in choices_groups() and "." in key else []
    if key in defaults or having:
        value = defaults[key] if key in defaults else _class_default(schema_of(top, having[0]), key)
        example = f"{key}={as_override_value(EXAMPLES.get(key, value))}"
        raise PlainError(key, f"`{key}` cannot be removed: every cell has it; set it instead, e.g. {example}")
    raise unknown_key(key, known_keys(), lambda group: describe_group(group, []), choices_having)


def _a(group: str) -> str:
    return f"an {group}" if group[0] in "aeiou" else f"a {group}"


def _settings_under(key: str) -> tuple[str, str] | None:
    """For a key that holds settings (`cell`): their names, and one of them set, as an example."""
    defaults = default_values()
    under = [k for k in defaults if k.startswith(f"{key}.")]
    if not under:
        return None
    first = next((k for k in under if defaults[k] is not None), under[0])
    shown = ", ".join(k[len(key) + 1 :] for k in under[:8]) + (", ..." if len(under) > 8 else "")
    return shown, f"{first}={as_override_value(EXAMPLES.get(first, defaults[first]))}"


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


def compose_or_explain(compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> DictConfig:
    """compose(overrides), with whatever Hydra or OmegaConf says about them as one ConfigError."""
    from hydra.errors import HydraException, MissingConfigException

    try:
        composed = compose(overrides)
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
    _refuse_numbers_as_booleans(composed, overrides)
    return composed


def _refuse_numbers_as_booleans(composed: DictConfig, overrides: list[str]) -> None:
    """A boolean setting takes true or false, nothing else. OmegaConf would take any integer (2 and -1 as true,
    0 as false) and yes/no/on/off: one spelling per value keeps what a sweep records and names its cells by
    (`optimize.compile=true`) the same as the YAML and the docs, and catches a number meant for another key.
    0 and 1 are refused too, for that one spelling."""
    from omegaconf.nodes import BooleanNode

    for override in overrides:
        key, sep, text = override.lstrip("+").partition("=")
        if not sep or override.startswith("~") or "/" in key or "@" in key:
            continue
        parent, _, leaf = key.rpartition(".")
        try:
            holder = OmegaConf.select(composed, parent, throw_on_missing=False) if parent else composed
            node = holder._get_node(leaf) if isinstance(holder, DictConfig) else None  # noqa: SLF001
        except OmegaConfBaseException:
            continue
        if not isinstance(node, BooleanNode):
            continue
        value = text.strip().strip("'\"").lower()
        if value in ("true", "false") or value.startswith("${") or (value == "null" and node._is_optional()):  # noqa: SLF001
            continue
        raise ConfigError(key, _typed_value(override), f"must be true or false, e.g. {key}=true")


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what caused it: Hydra's "Error merging override X" carries OmegaConf's reason as its cause."""
    chain: list[BaseException] = []
    while error is not None and error not in chain and len(chain) < 10:
        chain.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return chain


def explain(error: BaseException, overrides: list[str]) -> ConfigError:
    """A Hydra or OmegaConf composition error as one line naming the key and what to do instead."""
    causes = _causes(error)
    message = " ".join(line.strip() for cause in causes for line in str(cause).splitlines() if line.strip())
    detail = next((c for c in causes if getattr(c, "full_key", None)), None)
    detail_key = str(getattr(detail, "full_key", "") or "")
    merging = re.search(r"Error merging override (\S+)", message)
    key = key_in_message(message) or detail_key or (merging.group(1).lstrip("+~").split("=", 1)[0] if merging else "")
    if detail_key.endswith(f".{key}"):  # "Key 'epochs' not in 'BenchmarkTask'": the whole key is task.epochs
        key = detail_key
    source = re.match(r"In '([^']+)':", str(error).strip())
    if source and detail is not None and not source.group(1).startswith(("schema/", "hydra/")):
        preset = _explain_preset(source.group(1), detail_key, message, overrides)
        if preset is not None:
            return preset
    removed = re.search(r"Could not delete '([^'=]+)", message)
    key = key or (removed.group(1) if removed else "")
    override = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == key), None)
    if "Could not delete" in message or (override or "").startswith("~"):
        group = key.split(".", 1)[0]
        if group in choices_groups():
            return PlainError(
                key,
                f"`{key}` cannot be removed: every cell needs {_a(group)}; choose one of {', '.join(choices(group))}",
            )
        if group in preset_groups():
            return PlainError(key, f"`{key}` cannot be removed: no {key} was added (+{key}=NAME adds one)")
        return PlainError(key, f"`{key}` cannot be removed (it is not in the config, or a cell needs it)")
    under = _settings_under(key) if key else None
    if detail is not None and "is not a subclass of" in str(detail) and under:  # cell=5: a value for a node
        shown, example = under
        return PlainError(key, f"`{key}` holds settings ({shown}), not one value: set one of them, e.g. {example}")
    if detail is not None and (_is_type_error(str(detail)) or "is not Optional" in str(detail)):
        return _explain_type(detail, overrides)
    forced = re.search(r"force-add of config groups is not supported: '\+\+([^=']+)=([^']*)'", message)
    if forced:
        group, value = forced.groups()
        return PlainError(group, f"`++{group}`: ++ sets keys, not a group's choice: choose it with {group}={value}")
    if "An item is already at" in message or "Could not append to config" in message:
        return PlainError(key, f"`{key}` already exists: set it with {key}=... (`+` adds only keys that do not exist)")
    if "Could not override" in message or "not in" in message or "Key '" in message:
        if key.startswith("hydra.launcher."):
            from trainbench.config.launchers import unknown_launcher_key

            return unknown_launcher_key(key, overrides)
        if key.startswith("hydra."):
            return PlainError(key, f"`{key}` is not one of Hydra's settings (`--cfg hydra` lists them)")
        return unknown_key(key, known_keys(), lambda group: describe_group(group, overrides), choices_having)
    if "Value '" in message and (
        "could not be converted" in message or "is not a valid" in message or "Invalid type" in message
    ):
        return ConfigError(key or "config", _typed_value(override), first_line(error))
    if "Missing mandatory value" in message:
        group = key.split(".", 1)[0]
        if group in choices_groups():
            return PlainError(group, f"`{group}` must be chosen: {group}=<one of {', '.join(choices(group))}>")
    return ConfigError(key or "overrides", _value_in(override) if override else " ".join(overrides), first_line(error))


def _value_in(override: str | None) -> str | None:
    return override.split("=", 1)[1] if override and "=" in override else None


def _typed_value(override: str | None) -> Any:
    """The value of `key=value` as Hydra's parser types it (1.5, 'maybe', [1, 2]), for the one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    text = _value_in(override)
    if text is None:
        return None
    try:
        return OverridesParser.create().parse_override(f"v={text}").value()
    except (HydraException, ValueError):
        return text


# What OmegaConf says about a value of the wrong type -> what the key takes (and a placeholder example).
_TYPES = (
    ("to Integer", "a whole number", 1),
    ("to Float", "a number", 0.5),
    ("valid bool", "true or false", True),
    ("ListConfig, list or tuple", "a list", [1]),
    ("to list", "a list", [1]),
    ("to string", "text", None),
    ("reference_type=List", "a list", [1]),  # "Cannot merge DictConfig with ListConfig": a mapping for a list
)


# Examples for settings whose default is null (no limit, no cap): a value that makes sense, for messages.
EXAMPLES: dict[str, Any] = {
    "cell.timeout_s": 600,
    "cell.memory_limit_mb": 8192,
    "cell.cpus": 4,
    "tracking.uri": "sqlite:///mlflow.db",
    "model.depth": 5,
    "model.width": 1024,
    "data.num_samples": 1000,
    "data.num_val_samples": 100,
}

# A field's annotation -> the marker of its type in _TYPES, for "field 'seed' is not Optional" (null for a key that
# takes none), which names no type.
_FIELD_TYPES = {"int": "to Integer", "float": "to Float", "bool": "valid bool", "list": "to list", "str": "to string"}


def _is_type_error(text: str) -> bool:
    return any(marker in text for marker, _, _ in _TYPES) or "could not be converted" in text


def _explain_type(detail: BaseException, overrides: list[str]) -> ConfigError:
    """`task.epochs`=1.5 is not valid: must be a whole number, e.g. task.epochs=3 -- instead of Hydra's "Error
    merging override task.epochs=1.5" (which names neither the key's type nor a fix)."""
    full_key = str(getattr(detail, "full_key", ""))
    key = re.sub(r"\[\d+\]$", "", full_key)  # data.mean[0]: one element of a list
    element = key != full_key
    text = str(detail)
    field = _field(detail, key)
    if "is not Optional" in text and field is not None:
        text = f"{text} {_FIELD_TYPES.get(str(field.type).split('[', 1)[0], '')}"
    kind, placeholder = next(((kind, example) for marker, kind, example in _TYPES if marker in text), (None, None))
    override = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == key), None)
    if kind is None:
        return ConfigError(key, _typed_value(override), first_line(detail))
    optional = field is not None and ("None" in str(field.type) or "Optional" in str(field.type))
    example = True if kind == "true or false" else EXAMPLES.get(key, default_values().get(key))
    if example is None and field is not None:
        example = _field_default(field)
    if element:
        expected = f"every value must be {kind}"
        if not isinstance(example, list):
            example = [placeholder] if placeholder is not None else None
    else:
        expected = f"must be {kind}" + (" or null" if optional else "")
        if example is None or (isinstance(example, str) and example.startswith("${")):
            example = placeholder
    hint = f", e.g. {key}={as_override_value(example)}" if example is not None else ""
    return ConfigError(key, _typed_value(override), expected + hint)


def _class_default(cls: type | None, key: str) -> Any:
    name = key.rsplit(".", 1)[-1]
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None) if cls is not None else None
    return _field_default(field) if field is not None else None


def _field(detail: BaseException, key: str) -> Any:
    """The dataclass field behind a key OmegaConf refused a value for (its type says whether null is allowed)."""
    cls = getattr(detail, "object_type", None)
    name = key.rsplit(".", 1)[-1]
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    return next((f for f in dataclasses.fields(cls) if f.name == name), None)


def _field_default(field: Any) -> Any:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    return None if value == "???" else value  # OmegaConf's MISSING: no default


def _explain_preset(source: str, full_key: str, message: str, overrides: list[str]) -> ConfigError | None:
    """A preset (`+experiment=m1_tensorflow_blog`) sets a key that another choice on the command line does not
    have (task=benchmark has no task.epochs): blame the preset and the choice, never a key the user did not type."""
    if "not in" not in message and "Could not override" not in message:
        return None
    group, _, name = source.rpartition("/")
    chosen = next(
        (o for o in overrides if o.lstrip("+").split("=", 1)[0] == group and o.split("=", 1)[-1] == name),
        f"{group}={name}",
    )
    if any(o.lstrip("+~").split("=", 1)[0] == full_key for o in overrides):
        return None  # the user typed the key: the ordinary unknown-key answer names it
    owner, _, field = full_key.partition(".")
    if not field or owner not in choices_groups():
        return PlainError(full_key, f"`{chosen}` sets {full_key}, which this config does not have")
    typed = next((o for o in overrides if o.lstrip("+").split("=", 1)[0] == owner), None)
    current = typed.split("=", 1)[-1] if typed else default_choice(owner)
    cls = schema_of(owner, current) if current in choices(owner) else None
    settings = [f.name for f in dataclasses.fields(cls) if f.name != "name"] if cls is not None else []
    described = f"{owner}={current}" + (f" (its settings: {', '.join(settings)})" if settings else "")
    having = choices_having(owner, field)
    if typed:
        fix = f"leave out {typed} to run the preset as it is" + (
            f", or choose {owner}={f' or {owner}='.join(having)}" if having else ""
        )
    else:
        fix = f"choose {owner}={f' or {owner}='.join(having)}" if having else "run the preset on its own"
    return PlainError(full_key, f"`{chosen}` sets {full_key}, which {described} does not have: {fix}")


def as_override_value(value: Any) -> str:
    """`value` as it is typed on a command line: true, null, [0.5,0.25], a name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return f"[{','.join(as_override_value(v) for v in value)}]"
    text = str(value)
    return f"'{text}'" if any(c in text for c in " ,=[]{}()'\"") else text


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
