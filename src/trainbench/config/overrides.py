"""Overrides as Hydra parses them, each refused in one line when it names no setting, repeats a key, removes what
every cell needs or picks a choice that does not exist.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from trainbench.config.catalogue import (
    choices_groups,
    choices_having,
    default_values,
    describe_group,
    known_keys,
    preset_groups,
    schema_of,
)
from trainbench.config.errors import ConfigError, PlainError, first_line, unknown_key
from trainbench.locations import choices


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
        group = override.key_or_group  # without its @package: `model@_global_=...` chooses from conf/model/ too
        if override.is_delete():
            _refuse_removal(override.get_key_element().lstrip("~"))
        elif group in choices_groups():
            _check_group_values(group, override)
        elif group in preset_groups() or "/" in group:  # +experiment=..., hydra/launcher=...
            _refuse_file_outside_its_group(group, override)
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
            key,
            f"`{key}` cannot be removed: every cell needs {with_article(key)}; choose one of {', '.join(choices(key))}",
        )
    defaults = default_values()
    under = settings_under(key)
    if under:
        shown, example = under
        raise PlainError(
            key, f"`{key}` cannot be removed: every cell has its settings ({shown}); set one instead, e.g. {example}"
        )
    having = choices_having(top, key.split(".", 1)[1]) if top in choices_groups() and "." in key else []
    if key in defaults or having:
        value = defaults[key] if key in defaults else class_default(schema_of(top, having[0]), key)
        example = f"{key}={as_override_value(EXAMPLES.get(key, value))}"
        raise PlainError(key, f"`{key}` cannot be removed: every cell has it; set it instead, e.g. {example}")
    raise unknown_key(key, known_keys(), lambda group: describe_group(group, []), choices_having)


def with_article(group: str) -> str:
    return f"an {group}" if group[0] in "aeiou" else f"a {group}"


def settings_under(key: str) -> tuple[str, str] | None:
    """For a key that holds settings (`cell`): their names, and one of them set, as an example."""
    defaults = default_values()
    under = [k for k in defaults if k.startswith(f"{key}.")]
    if not under:
        return None
    first = next((k for k in under if defaults[k] is not None), under[0])
    shown = ", ".join(k[len(key) + 1 :] for k in under[:8]) + (", ..." if len(under) > 8 else "")
    return shown, f"{first}={as_override_value(EXAMPLES.get(first, defaults[first]))}"


def _refuse_file_outside_its_group(group: str, override: Any) -> None:
    """A preset (or one of Hydra's own groups) is a YAML file of its group's folder (conf/experiment/, or a
    hydra.searchpath folder's experiment/), never a path out of it nor an interpolation that makes one:
    `+experiment=../../../tmp/x` would load any YAML, and a YAML can have Hydra call a function."""
    for value in _group_values(override):
        if isinstance(value, str) and ("${" in value or value.startswith("/") or ".." in value.split("/")):
            options = choices(group)
            raise PlainError(
                group,
                f"`{group}={value[:80]}` is a path or an interpolation, not one of {group}'s files: name one"
                + (f" ({', '.join(options)})" if options else " by its name"),
            )


def _group_values(override: Any) -> list[Any]:
    """The values an override chooses (each of a sweep's); none for glob() and interval() (expanded by Hydra from
    the group's own files, or refused when the sweep is expanded)."""
    from hydra.core.override_parser.types import Glob

    if not override.is_sweep_override():
        return [override.value()]
    if not override.is_discrete_sweep() or isinstance(override.value(), Glob):
        return []
    return list(override.sweep_iterator())


def _check_group_values(group: str, override: Any) -> None:
    """A group's value names a YAML file: a number or a list is never one (Hydra would crash on it)."""
    for value in _group_values(override):
        if not isinstance(value, str) or value not in choices(group):
            shown = value if not isinstance(value, str) else value[:80]
            raise ConfigError(group, shown, f"choose one of {', '.join(choices(group))}")


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


def class_default(cls: type | None, key: str) -> Any:
    name = key.rsplit(".", 1)[-1]
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None) if cls is not None else None
    return field_default(field) if field is not None else None


def field_default(field: Any) -> Any:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    return None if value == "???" else value  # OmegaConf's MISSING: no default


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
