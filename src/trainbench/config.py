"""The config schema and its validation: every cell of a run is composed and checked before any work.

The schema is a tree of dataclasses. Merging a composed Hydra config into it rejects unknown keys and
wrong types (OmegaConf does that, naming the key); `check_ranges` then rejects values of the right type
that cannot work (batch_size 0, a device that does not exist). Choices that are files in `conf/`
(model, framework, data, ...) are listed from the folder, so adding a model is adding a YAML.

This module must stay light: the parent process imports it, and the parent never imports a
deep-learning framework.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = PROJECT_ROOT / "conf"

DEVICES = ("auto", "cpu", "gpu")
OPTIMIZERS = ("sgd", "adam", "adamw")
AUTOCAST_DTYPES = ("bfloat16", "float16")
FAULTS = ("abort", "raise", "sleep")
MATMUL_SHAPES = ("square", "vector")


class ConfigError(ValueError):
    """A config value that cannot work. str() is the one line shown to the user."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"`{key}`={value!r} is not valid: {expected}")


@dataclass
class FrameworkConfig:
    name: str
    adapter: str  # module implementing trainbench.frameworks.base.Framework


@dataclass
class DeviceConfig:
    name: str


@dataclass
class ModelConfig:
    name: str
    input: str = "image"
    builder: str | None = None  # trainbench's own builder, where no library has the model
    torchvision: str | None = None
    keras: str | None = None
    hidden_sizes: list[int] = field(default_factory=list)
    depth: int | None = None
    width: int | None = None
    activation: str = "relu"
    output_activation: str | None = None
    pretrained: bool = False
    min_image_size: int = 1  # smaller inputs pool away to nothing (alexnet: 63 px)
    # Transformer encoders (input: text): the architecture family and its dimensions
    transformers: str | None = None  # distilbert | bert: a transformers config + *ForSequenceClassification
    keras_hub: str | None = None  # keras-hub backbone class for the Keras frameworks
    num_layers: int | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    intermediate_size: int | None = None
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    seq_len: int = 128
    num_labels: int = 2


@dataclass
class DataConfig:
    name: str
    input: str = "image"  # image | text: what the data gives (must be what the model takes)
    root: str = "data"
    download: bool = True
    image_size: int = 32  # what the model sees; real datasets resize to it on the device
    channels: int = 3
    num_classes: int = 10
    learnable: bool = True
    grayscale_to_rgb: bool = False
    num_samples: int | None = None
    num_val_samples: int | None = None
    val_fraction: float = 0.2
    seq_len: int = 128  # text: tokens per sequence (padded or truncated)
    vocab_size: int = 30522  # text: token ids are below this
    mean: list[float] = field(default_factory=lambda: [0.5])
    std: list[float] = field(default_factory=lambda: [0.25])


@dataclass
class TaskConfig:
    name: str
    warmup_steps: int = 5
    steps: int = 20
    repeats: int = 1
    settle_cv_pct: float | None = None
    max_warmup_steps: int = 200
    drift_threshold_pct: float = 5.0
    shape: str = "square"  # matmul: square (n x n @ n x n) | vector (1 x n @ n x 1)
    sizes: list[int] | None = None  # matmul: the n to sweep (null: the shape's defaults)


@dataclass
class PrecisionConfig:
    name: str
    tf32: bool = False
    autocast: str | None = None


@dataclass
class OptimConfig:
    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0


@dataclass
class TrackingConfig:
    uri: str | None = None
    experiment: str = "trainbench"


@dataclass
class CellRunConfig:
    timeout_s: float | None = None
    memory_limit_mb: int | None = None
    max_batch_size: int = 65536


@dataclass
class DebugConfig:
    inject_fault: str | None = None


@dataclass
class CellConfig:
    framework: FrameworkConfig
    device: DeviceConfig
    model: ModelConfig
    data: DataConfig
    task: TaskConfig
    precision: PrecisionConfig
    batch_size: Any = 64  # a whole number >= 1, or "max"
    epochs: int = 3
    seed: int = 0
    compile: bool = False
    channels_last: bool = False
    optim: OptimConfig = field(default_factory=OptimConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cell: CellRunConfig = field(default_factory=CellRunConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)


def choices(group: str) -> list[str]:
    """The options of a config group: the YAML files in conf/<group>/."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Check a composed cell config; return it as a plain dict. Raises ConfigError naming the key."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    try:
        # Interpolations resolve after the merge, so `${model.seq_len}` finds the schema's default
        # even for a model that does not set it.
        typed = OmegaConf.merge(OmegaConf.structured(CellConfig), plain)
        checked = OmegaConf.to_container(typed, resolve=True)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or "config"
        reason = str(error).splitlines()[0]
        raise ConfigError(key, _value_at(plain, key), reason) from None
    check_ranges(checked)
    return checked


def check_ranges(cfg: dict[str, Any]) -> None:
    """Values of the right type that still cannot work."""

    def need(ok: bool, key: str, expected: str) -> None:
        if not ok:
            raise ConfigError(key, _value_at(cfg, key), expected)

    for group in ("framework", "model", "data", "task", "precision"):
        name = cfg[group]["name"]
        need(name in choices(group), f"{group}.name", f"choose one of {', '.join(choices(group))}")
    need(cfg["device"]["name"] in DEVICES, "device", f"choose one of {', '.join(DEVICES)}")
    batch = cfg["batch_size"]
    need(batch == "max" or (isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1), "batch_size",
         "must be a whole number >= 1, e.g. batch_size=32, or max (the largest that fits)")
    need(cfg["epochs"] >= 0, "epochs", "must be >= 0 (0 builds and records the model without training)")
    task = cfg["task"]
    need(task["steps"] >= 1, "task.steps", "must be >= 1")
    need(task["warmup_steps"] >= 0, "task.warmup_steps", "must be >= 0")
    need(task["repeats"] >= 1, "task.repeats", "must be >= 1")
    need(task["settle_cv_pct"] is None or task["settle_cv_pct"] > 0, "task.settle_cv_pct", "must be null or > 0")
    optim = cfg["optim"]
    need(optim["name"] in OPTIMIZERS, "optim.name", f"choose one of {', '.join(OPTIMIZERS)}")
    need(optim["lr"] > 0, "optim.lr", "must be > 0")
    autocast = cfg["precision"]["autocast"]
    need(autocast in (None, *AUTOCAST_DTYPES), "precision.autocast", f"null or one of {', '.join(AUTOCAST_DTYPES)}")
    model = cfg["model"]
    need(
        bool(model["builder"] or model["torchvision"] or model["keras"] or model["transformers"]),
        "model",
        "a model YAML must name a builder, a torchvision constructor, a Keras class or a transformers family",
    )
    data = cfg["data"]
    if task["name"] != "matmul":
        need(
            data["input"] == model["input"],
            "data",
            f"model `{model['name']}` takes {model['input']} input but data `{data['name']}` gives "
            f"{data['input']}: choose data={' or data='.join(_data_for(model['input']))}",
        )
    need(task["shape"] in MATMUL_SHAPES, "task.shape", f"choose one of {', '.join(MATMUL_SHAPES)}")
    if task["sizes"] is not None:
        need(bool(task["sizes"]) and min(task["sizes"]) >= 1, "task.sizes", "a list of matrix sizes >= 1")
    need(data["seq_len"] >= 2, "data.seq_len", "must be >= 2 (a [CLS] token and at least one more)")
    need(data["seq_len"] <= model["max_position_embeddings"], "data.seq_len",
         f"must be <= model.max_position_embeddings ({model['max_position_embeddings']})")
    if model["depth"] is not None:
        need(model["depth"] >= 1, "model.depth", "must be >= 1")
        need((model["width"] or 0) >= 1, "model.width", "must be >= 1 when model.depth is set")
    need(
        data["input"] != "image" or data["image_size"] >= model["min_image_size"],
        "data.image_size",
        f"{model['name']} needs images of at least {model['min_image_size']} px, e.g. data.image_size=224",
    )
    for key in ("num_samples", "num_val_samples", "image_size"):
        if data[key] is not None:
            need(data[key] >= 1, f"data.{key}", "must be null or >= 1")
    need(0 < data["val_fraction"] < 1, "data.val_fraction", "must be between 0 and 1")
    need(len(data["mean"]) == len(data["std"]), "data.std", "needs one value per channel, like data.mean")
    need(all(s > 0 for s in data["std"]), "data.std", "must be > 0")
    timeout = cfg["cell"]["timeout_s"]
    need(timeout is None or timeout > 0, "cell.timeout_s", "must be null or > 0 seconds")
    need(cfg["cell"]["max_batch_size"] >= 1, "cell.max_batch_size", "must be >= 1")
    memory = cfg["cell"]["memory_limit_mb"]
    need(memory is None or memory >= 256, "cell.memory_limit_mb", "must be null or >= 256 (MB)")
    fault = cfg["debug"]["inject_fault"]
    need(fault in (None, *FAULTS), "debug.inject_fault", f"null or one of {', '.join(FAULTS)}")


def _data_for(kind: str) -> list[str]:
    """The data choices that give `kind` input (read from their YAML files)."""
    return [name for name in choices("data")
            if f"input: {kind}" in (CONF_DIR / "data" / f"{name}.yaml").read_text()
            or (kind == "image" and "input:" not in (CONF_DIR / "data" / f"{name}.yaml").read_text())]


def config_hash(cfg: dict[str, Any]) -> str:
    """Identical cells share this hash, wherever and whenever they ran (tracking settings left out)."""
    relevant = {k: v for k, v in cfg.items() if k not in ("tracking", "cell")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:12]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"name": "mlp"}} -> {"model.name": "mlp"}: the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _value_at(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    if isinstance(node, dict) and "name" in node:  # `device` means device.name on the command line
        return node["name"]
    return node
