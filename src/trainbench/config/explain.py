"""Whatever Hydra or OmegaConf says about a composition, as one ConfigError naming the key, the value and what to do."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

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
from trainbench.config.overrides import EXAMPLES, as_override_value, field_default, settings_under, with_article
from trainbench.locations import choices


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
                f"`{key}` cannot be removed: every cell needs {with_article(group)}; choose one of {', '.join(choices(group))}",
            )
        if group in preset_groups():
            return PlainError(key, f"`{key}` cannot be removed: no {key} was added (+{key}=NAME adds one)")
        return PlainError(key, f"`{key}` cannot be removed (it is not in the config, or a cell needs it)")
    under = settings_under(key) if key else None
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
        example = field_default(field)
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


def _field(detail: BaseException, key: str) -> Any:
    """The dataclass field behind a key OmegaConf refused a value for (its type says whether null is allowed)."""
    cls = getattr(detail, "object_type", None)
    name = key.rsplit(".", 1)[-1]
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    return next((f for f in dataclasses.fields(cls) if f.name == name), None)


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
