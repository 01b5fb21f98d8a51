"""A cell's config, typed and judged before any work.

    cell = validate(composed)      # CellConfig with one dataclass per chosen group; raises ConfigError
    params(cell)                   # what its MLflow run records as params
    to_spec(cell) / from_spec(...) # how it travels to the cell's own process, keeping its types

Hydra composes each YAML choice into its schema (trainbench.config.schema and the framework and task
modules), so unknown keys and wrong types are refused while composing; `validate` then converts the result
to dataclasses (resolving interpolations such as the text data's `${model.seq_len}`) and judges it: each
group's own ranges, then what cannot work across groups (trainbench.config.judge).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from trainbench.config.catalogue import flatten
from trainbench.config.errors import ConfigError, PlainError, first_line, need
from trainbench.config.registry import SCHEMAS, kind_of
from trainbench.config.schema import (
    GROUPS,
    CellConfig,
    CellLimits,
    SweepSettings,
    TrackingConfig,
    replace,
)
from trainbench.locations import CONF_DIR, PROJECT_ROOT, choices

__all__ = [
    "CONF_DIR",
    "PROJECT_ROOT",
    "CellConfig",
    "ConfigError",
    "PlainError",
    "choices",
    "config_hash",
    "from_spec",
    "need",
    "params",
    "replace",
    "to_spec",
    "validate",
]

SETTING_TYPES = {
    "tracking": TrackingConfig,
    "cell": CellLimits,
    "sweep": SweepSettings,
}


def validate(composed: DictConfig) -> CellConfig:
    """The typed cell of a composed config, judged; raises ConfigError naming the key."""
    from trainbench.config.judge import judge

    try:
        cell = to_cell(composed)
    except OmegaConfBaseException as error:  # an interpolation that does not resolve, in any node
        key = getattr(error, "full_key", None) or "config"
        raise ConfigError(
            key,
            OmegaConf.select(composed, key, default=None, throw_on_resolution_failure=False)
            if key != "config"
            else None,
            first_line(error),
        ) from None
    judge(cell)
    return cell


def to_cell(composed: DictConfig) -> CellConfig:
    plain = composed
    if "hydra" in composed:  # a config composed with Hydra's own node (the sweeper's): drop it, keep the type
        plain = composed.copy()
        with open_dict(plain):
            del plain["hydra"]
    for group in GROUPS:
        node = plain._get_node(group)  # noqa: SLF001  (None or a MISSING value: a group nobody chose)
        if node is None or OmegaConf.is_missing(plain, group) or node._is_none():  # noqa: SLF001
            raise PlainError(group, f"`{group}` must be chosen: {group}=<one of {', '.join(choices(group))}>")
    _refuse_added_keys(plain)
    _check_input_kinds(plain)
    try:
        cell = OmegaConf.to_object(plain)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "config"
        raise ConfigError(
            key,
            OmegaConf.select(plain, key, default=None, throw_on_missing=False) if key != "config" else None,
            first_line(error),
        ) from None
    if not isinstance(cell, CellConfig):
        raise PlainError("config", "the composed config is not a trainbench cell (is conf/config.yaml intact?)")
    return cell


def _refuse_added_keys(plain: DictConfig) -> None:
    """A key added with `+` or `++` (`+cell.timeout=5`) lands in the composed config, because Hydra opens the
    typed node to add it, and converting to dataclasses then drops it without a word: refuse it as the same key
    without `+` is refused, with the same did-you-mean."""
    added = _added_keys(plain)
    if not added:
        return
    from trainbench.config.catalogue import choices_having, describe_group, known_keys
    from trainbench.config.errors import unknown_key

    chosen = [f"{group}={plain[group].get('name')}" for group in GROUPS]
    raise unknown_key(added[0], known_keys(), lambda group: describe_group(group, chosen), choices_having)


def _added_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """The dotted keys under `node` that its dataclass does not have."""
    cls = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(cls):
        return []
    fields = {f.name for f in dataclasses.fields(cls)}
    added = []
    for key in node:
        if key not in fields:
            added.append(f"{prefix}{key}")
            continue
        child = node._get_node(key)  # noqa: SLF001  (the node itself: a value may be an unresolved interpolation)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():  # noqa: SLF001
            added += _added_keys(child, f"{prefix}{key}.")
    return added


def _check_input_kinds(plain: DictConfig) -> None:
    """Model x data input kind, before interpolations resolve: text data reads `${model.seq_len}`, which a
    vision model does not have, and that error would name the wrong key."""
    task_type = OmegaConf.get_type(plain, "task")
    if not getattr(task_type, "uses_model", True):
        return
    model_type, data_type = OmegaConf.get_type(plain, "model"), OmegaConf.get_type(plain, "data")
    model_input, data_input = getattr(model_type, "input", None), getattr(data_type, "input", None)
    if model_input and data_input and model_input != data_input:
        fitting = [name for name in choices("data") if _data_input(name) == model_input]
        raise ConfigError(
            "data",
            plain.data.get("name"),
            f"model `{plain.model.get('name')}` takes {model_input} input but data "
            f"`{plain.data.get('name')}` gives {data_input}: choose data={' or data='.join(fitting)}",
        )


def _data_input(name: str) -> str | None:
    text = (CONF_DIR / "data" / f"{name}.yaml").read_text()
    for kind, cls in SCHEMAS["data"].items():
        if f"/schema/data/{kind}@" in text:
            return getattr(cls, "input", None)
    return None


def groups_in_use(cell: CellConfig) -> tuple[str, ...]:
    """The groups that shape what the cell measures: a matmul has no model, data or optimizer."""
    return tuple(g for g in GROUPS if g not in getattr(cell.task, "unused_groups", ()))


def config_hash(cell: CellConfig) -> str:
    """Identical cells share this hash, wherever and whenever they ran (run settings left out)."""
    relevant: dict[str, Any] = {
        g: {"kind": kind_of(getattr(cell, g)), **dataclasses.asdict(getattr(cell, g))} for g in groups_in_use(cell)
    }
    relevant.update(batch_size=cell.batch_size, seed=cell.seed)
    if "framework" in relevant:  # a class attribute since it is no setting; hashed as when it was a field
        relevant["framework"]["adapter"] = type(cell.framework).adapter
    if relevant.get("device", {}).get("nodes") == 1:
        del relevant["device"]["nodes"]  # one host: the hash runs recorded before device.nodes existed have
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]


def params(cell: CellConfig) -> dict[str, Any]:
    """The cell's MLflow params: the fields of its chosen groups and its run limits, as they ran. Values the
    cell decides when it runs (a real dataset's sample count when `num_samples` is null) are left out here
    and logged by the cell itself."""
    flat: dict[str, Any] = {}
    for group in groups_in_use(cell):
        flat.update(flatten(dataclasses.asdict(getattr(cell, group)), f"{group}."))
    flat.update(batch_size=cell.batch_size, seed=cell.seed)
    flat.update(flatten(dataclasses.asdict(cell.cell), "cell."))
    if flat.get("device.nodes") == 1:
        del flat["device.nodes"]  # one host: recorded as runs recorded before device.nodes existed were (config_hash)
    flat.update(thread_settings())
    return {key: value for key, value in flat.items() if value is not None}


# Environment variables that set how many threads a framework's math uses: a user's choice that changes the
# figure (OMP_NUM_THREADS=1 can double an MLP's rate on two cores), so part of the setting. Unset ones are not
# recorded: a run without them ran at the framework's default, as runs recorded before this param did.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "XLA_FLAGS",
)


def thread_settings() -> dict[str, str]:
    """threads.<VARIABLE>: the thread-count variables set in the environment the cells inherit."""
    import os

    return {f"threads.{name}": os.environ[name] for name in THREAD_VARIABLES if os.environ.get(name)}


def to_spec(cell: CellConfig) -> dict[str, Any]:
    """A JSON-able form of the cell that keeps each group's kind, for the cell's own process."""
    return {"kinds": {g: kind_of(getattr(cell, g)) for g in GROUPS}, "cell": dataclasses.asdict(cell)}


def from_spec(spec: dict[str, Any]) -> CellConfig:
    from trainbench.config import plugins

    values = dict(spec["cell"])
    for group, kind in spec["kinds"].items():
        values[group] = plugins.SCHEMAS[group][kind](**values[group])
    for key, cls in SETTING_TYPES.items():
        values[key] = cls(**values[key])
    return CellConfig(**values)
