"""The command line, checked before Hydra sees it, so that Hydra never prints a multi-line error or a traceback for
bad input: trainbench's flags first, Hydra's flags known, shell completion, and `check_command_line`, which composes
the primary config with the overrides that are not sweeps.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import OmegaConf

from trainbench.config import validate
from trainbench.config.catalogue import (
    default_values,
)
from trainbench.config.compose import refuse_unused_settings
from trainbench.config.errors import PlainError
from trainbench.config.explain import compose_or_explain
from trainbench.config.overrides import parse_overrides, refuse_repeated_keys
from trainbench.locations import CONF_DIR

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


def check_command_line(args: Any) -> Any:
    """Everything Hydra would compose before trainbench's sweeper runs, composed here first: the primary
    config with the overrides that are not sweeps. Raises ConfigError. Returns the composed hydra.mode where the
    command line sweeps nothing (Hydra's get_mode composes the same overrides for it: see hydra_mode_known), else
    None."""
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
            # A sweep's cells are judged by trainbench's sweeper (expand_and_judge). A command line of one cell of
            # conf/ is judged here as well, on the composition just made: bad input is refused before Hydra composes
            # it twice more (a few ms of judging against a tenth of a second per composition). Not a preset with a
            # sweep of its own: its cells are its sweep's values, which only the sweeper applies. A flag that prints
            # instead of running (--cfg job) reaches no sweeper at all, so its cell is judged here whatever the
            # config folder.
            preset_sweep = OmegaConf.select(composed, "hydra.sweeper.params", default=None)
            one_cell_of_conf = args.config_dir is None and args.config_path is None and not preset_sweep
            if not sweeps and (is_informational(args) or one_cell_of_conf):
                cell = validate(composed)
                if not preset_sweep:
                    refuse_unused_settings([fixed], [cell])  # with a preset's own sweep: when it is expanded
            if sweeps or args.config_dir is not None:  # -cd: Hydra searches conf/ too, this composition does not
                return None
            return OmegaConf.select(composed, "hydra.mode", default=None)
    finally:
        GlobalHydra.instance().clear()  # hydra.main initialises its own


@contextmanager
def hydra_mode_known(mode: Any) -> Iterator[None]:
    """While hydra.main runs: its first composition (Hydra's get_mode, all of the command line's overrides, only to
    read hydra.mode) answered with the mode check_command_line composed from the same overrides, a composition less
    for every command. A command line that sweeps (None) is left to Hydra: a swept preset could set the mode."""
    if mode is None:
        yield
        return
    from hydra._internal.hydra import Hydra

    composed_by_hydra = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: mode
    try:
        yield
    finally:
        Hydra.get_mode = composed_by_hydra


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
