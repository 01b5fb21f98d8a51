"""Which runs measured the same quantity: a run's comparison setting, and what tells two columns apart.

A run's **setting** is its whole composed config as recorded in its params, less two short lists:
- SPEED_NEUTRAL: fields that do not change what is measured (a seed, where files are, limits that stop a
  cell but never slow it), each with the reason;
- COMPARED: what the comparison is about, so never a row: the framework (its package and knobs) and the
  device asked for (the machine that ran is `trainbench.measure.hardware.label`).
Every other field splits rows: a field added tomorrow separates runs until someone shows it is speed-neutral
and adds it here with why. Two runs share a row of the report only when their settings are equal; a column
is a machine (hardware.label), the backend that ran and the framework at its major.minor release.

Light on purpose: the sweep's process imports it (no MLflow, no deep-learning framework).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainbench.config.schema import FrameworkConfig

# Config fields that do not change the measured quantity, and why. Documented in docs/mlflow-schema.md.
SPEED_NEUTRAL = {
    "seed": "other random numbers, the same work",
    "cell.timeout_s": "stops a cell that runs too long; never slows one",
    "cell.memory_limit_mb": "stops a cell that needs more memory; never slows one",
    "cell.hung_after_s": "stops a cell that shows no progress; never slows one",
    "cell.max_batch_size": "bounds batch_size=max's search; the batch that ran is in the setting",
    "data.root": "where the dataset's files are",
    "data.download": "whether missing files may be fetched, before any cell starts",
    "model.pretrained": "the weights' values, not their shapes: the same work",
    "model.weights_file": "the name of the file the pretrained weights come from",
    "model.head": "the name of the layer pretrained weights replace",
    "task.drift_threshold_pct": "when a tag says a run slowed down, decided after measuring",
    "debug.inject_fault": "test-only faults; a faulted cell never finishes",
    "debug.fault_rank": "test-only faults; a faulted cell never finishes",
}
# What the comparison compares: columns, never rows.
COMPARED = ("device.name",)
COMPARED_PREFIXES = ("framework.",)
# The framework's own params that name it rather than configure it.
FRAMEWORK_NAMES = ("framework.name", "framework.package", "framework.adapter")
# Params that runs recorded before the config took its present shape, and what they are now (`recorded`
# maps them): every run of a setting compares with every other, whenever it was recorded.
# - Model YAMLs named each framework's builder; each framework now keys its own by model.name (or model.family),
#   and PyTorch's compile mode for `auto` by the model's architecture: the same network, the same work.
RETIRED_PARAMS = ("model.torchvision", "model.keras", "model.mlx", "model.keras_hub", "model.torch_compile_mode")
# - One framework's speed-ups sat in the shared optimize group: now framework.<knob> of each framework that has
#   the knob, where a switch's `auto` means what optimize=fast used to set (on with fast, off with none); other
#   frameworks ignored them.
MOVED_FROM_OPTIMIZE = ("compile_mode", "channels_last", "fused_optimizer", "capture", "coordinate_descent_tuning")
# What a real dataset holds when its config says null (all of it): (training, validation) samples. A run
# logs the count it loaded; a reference composed from a preset has only the null.
FULL_SPLITS = {"cifar10": (50000, 10000), "mnist": (60000, 10000)}
UNKNOWN_RELEASE = "version unknown"
# scikit-learn's bundled digits (trainbench.data.DIGITS_SAMPLES), split by data.val_fraction rounded up as
# train_test_split does: the counts a digits run logs, which its dry run (config null) must arrive at too.
DIGITS_SAMPLES = 1797


def setting(params: Mapping[str, str], tags: Mapping[str, str]) -> dict[str, str]:
    """The run's comparison setting: {config key: normalised value}, sorted. `tags` give what was decided
    while it ran: the batch size batch_size=max found, the devices device.count=all found."""
    values = {key: normal(value) for key, value in recorded(params).items() if not neutral(key) and not compared(key)}
    if values.get("batch_size") == "max" and tags.get("trainbench.batch_size", "max") != "max":
        values["batch_size"] = normal(tags["trainbench.batch_size"])
    if "device.count" in values and tags.get("trainbench.num_devices"):
        values["device.count"] = normal(tags["trainbench.num_devices"])
    full = FULL_SPLITS.get(values.get("data.name", "")) or digits_split(values)
    if full:
        for key, size in zip(("data.num_samples", "data.num_val_samples"), full, strict=True):
            values.setdefault(key, str(size))
    return dict(sorted(values.items()))


def digits_split(values: Mapping[str, str]) -> tuple[int, int] | None:
    """(training, validation) samples of data=digits at its data.val_fraction; None for another data set."""
    if values.get("data.name") != "digits":
        return None
    try:
        val = math.ceil(float(values.get("data.val_fraction", "0.2")) * DIGITS_SAMPLES)
    except ValueError:
        return None
    return DIGITS_SAMPLES - val, val


def recorded(params: Mapping[str, str]) -> dict[str, str]:
    """A run's params under today's names (RETIRED_PARAMS dropped, MOVED_FROM_OPTIMIZE moved), so that a run
    recorded before a config change and one after it compare as the setting they share. A framework's fixed
    settings (FrameworkConfig.fixed) are dropped: no choice, so no setting."""
    current = {key: value for key, value in params.items() if key not in RETIRED_PARAMS}
    config = framework_config(normal(params.get("framework.name", "")))
    fixed = config.fixed if config is not None else ()
    own = {field.name for field in dataclasses.fields(config)} - set(fixed) if config is not None else set()
    fast = normal(params.get("optimize.name", "")) == "fast"
    for knob in MOVED_FROM_OPTIMIZE:
        old = current.pop(f"optimize.{knob}", None)
        if old is None or knob not in own or f"framework.{knob}" in current:
            continue
        value = normal(old)
        if config is not None and knob in config.switches and value == normal(fast):
            value = "auto"  # what optimize=fast (or none) set by itself: the new `auto`
        current[f"framework.{knob}"] = value
    for knob in fixed:
        current.pop(f"framework.{knob}", None)
    return current


def framework_config(name: str) -> type[FrameworkConfig] | None:
    """The config class a framework registers (its declarations: knobs, switches, run flags), None for a name no
    framework of this checkout registers (a published row's)."""
    import trainbench.frameworks.shipped  # noqa: F401  (registers each shipped framework)
    from trainbench.config.registry import SCHEMAS
    from trainbench.config.schema import FrameworkConfig

    config = SCHEMAS.get("framework", {}).get(name)
    return config if isinstance(config, type) and issubclass(config, FrameworkConfig) else None


def setting_key(values: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


def setting_id(values: Mapping[str, str]) -> str:
    """A short name for a setting (12 hex digits), the same on every machine: what `sweep.dry_run` prints."""
    return hashlib.sha256(json.dumps(sorted(values.items())).encode()).hexdigest()[:12]


def neutral(key: str) -> bool:
    return key in SPEED_NEUTRAL


def compared(key: str) -> bool:
    return key in COMPARED or key.startswith(COMPARED_PREFIXES)


def normal(value: Any) -> str:
    """One spelling per value: `True` and `true`, `224` and `224.0`."""
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def step_compiled(tags: dict[str, str]) -> bool:
    """Whether a run's step was compiled (XLA, torch.compile): the tag trainbench.compile, which the cell writes
    once its framework says what is in force. Never for a published reference, whose tag is only what its row's
    command asks for."""
    return tags.get("trainbench.kind") != "reference" and tags.get("trainbench.compile") == "true"


def release(version: str | None) -> str:
    """A framework version as compared: major.minor ("2.14.1+cu130" -> "2.14"), a source's own words when
    they are not a version ("NGC 21.03"), or "version unknown"."""
    text = (version or "").strip()
    if not text:
        return UNKNOWN_RELEASE
    match = re.match(r"v?(\d+)\.(\d+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else text


def framework_knobs(params: Mapping[str, str]) -> dict[str, str]:
    """The framework's own settings (framework.cudnn_benchmark=true ...): part of a column, not of a row."""
    return {
        key.removeprefix("framework."): normal(value)
        for key, value in sorted(recorded(params).items())
        if key.startswith("framework.") and key not in FRAMEWORK_NAMES
    }


def differences(settings: list[Mapping[str, str]], leave_out: tuple[str, ...] = ()) -> list[str]:
    """The keys that tell `settings` apart, sorted: where a group's choice differs (`optim.name`), that key
    alone, not the fields that choice brings with it (a key some lack counts as differing)."""
    keys = sorted({key for s in settings for key in s} - set(leave_out))
    differ = [key for key in keys if len({s.get(key) for s in settings}) > 1]
    chosen = {key.removesuffix(".name") for key in differ if key.endswith(".name")}
    return [
        key
        for key in differ
        if key.endswith(".name") or key.split(".", 1)[0] not in chosen or _differs_within_choice(settings, key)
    ]


def _differs_within_choice(settings: list[Mapping[str, str]], key: str) -> bool:
    """Whether `key` differs between settings that made the same choice of its group (data=synthetic with 256
    and with 512 samples): then the choice alone would leave those rows reading alike."""
    group = f"{key.split('.', 1)[0]}.name"
    by_choice: dict[str | None, set[str | None]] = {}
    for values in settings:
        by_choice.setdefault(values.get(group), set()).add(values.get(key))
    return any(len(found) > 1 for found in by_choice.values())


def describe(values: Mapping[str, str], keys: list[str]) -> str:
    """The keys given as a user types them: `optim=adam, task.epochs=2` (absent ones: `key=-`)."""
    return ", ".join(f"{key.removesuffix('.name')}={values.get(key, '-')}" for key in keys)
