"""What the conf/ tree offers: its groups, the choices of each and the schema each choice extends, and every key
of the default config. The did-you-mean lines of a bad key read it (trainbench.config.errors.unknown_key).

Below trainbench.config and trainbench.config.compose, which both import it; it imports neither.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from omegaconf import OmegaConf

from trainbench.locations import CONF_DIR, choices


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"name": "mlp"}} -> {"model.name": "mlp"}: the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def choices_groups() -> tuple[str, ...]:
    from trainbench.config.schema import GROUPS

    return GROUPS


def known_keys() -> tuple[str, ...]:
    """Every key of the default config, dotted (for suggestions)."""
    return tuple(default_values())


@functools.lru_cache(maxsize=1)
def default_values() -> dict[str, Any]:
    """Every key of the default config, dotted, with its value (interpolations as written)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        composed = compose(config_name="config")
    else:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            composed = compose(config_name="config")
        GlobalHydra.instance().clear()
    tree = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(tree, dict)
    return flatten(tree)


def preset_groups() -> tuple[str, ...]:
    """Config groups whose choices are presets added with `+` (experiment, tf_metal_cell, ...): not settings."""
    return tuple(
        sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in choices_groups() + ("schema",))
    )


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
    from trainbench.config.plugins import SCHEMAS

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
