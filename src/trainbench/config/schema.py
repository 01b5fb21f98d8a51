"""The typed schema of a cell: one dataclass per kind of choice in each config group.

A YAML choice extends its kind (`defaults: [/schema/model/vision@_here_]`), so a vision model has no
`num_heads` and a benchmark task no `shape`: what a run records is what that choice means. Each dataclass
checks its own values (`check`); checks across groups live in trainbench.config.judge. Framework configs
live with their adapters (trainbench/frameworks/<name>/__init__.py) and task configs with their tasks
(trainbench/tasks/<name>.py); both extend the bases here. Data and checks only: what a task does with
them (runs, names its run, tags it) is trainbench.tasks.base.Task.

Light on purpose: imported by the parent process, which never imports a deep-learning framework.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from trainbench import flops, untrusted
from trainbench.config.errors import need
from trainbench.config.registry import schema

# Bounds no machine can exceed: the largest device memory sold (141 GB on an H200) sets them.
MAX_BATCH_SIZE = 2**24
MAX_IMAGE_SIZE = 4096
MAX_SAMPLES = 10**9
MAX_SEQ_LEN = 65536
MAX_LAYER_UNITS = 2**20
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
OUTPUT_ACTIVATIONS = (None, "sigmoid")


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def need_count(value: Any, key: str, low: int, high: int, example: str) -> None:
    need(whole(value) and low <= value <= high, key, value, f"must be a whole number from {low} to {high:,}, {example}")


def need_optional_count(value: Any, key: str, low: int, high: int) -> None:
    need(
        value is None or (whole(value) and low <= value <= high),
        key,
        value,
        f"must be null or a whole number from {low} to {high:,}",
    )


def need_encoder_sizes(model: Any, at: str, feed_forward: str) -> None:
    """A transformer encoder's sizes (a ViT's, a BERT's): layers, heads that divide the hidden size, and the
    feed-forward width, named `feed_forward` in its config."""
    for key in ("num_layers", "num_heads"):
        need_count(getattr(model, key), f"{at}.{key}", 1, 1024, "")
    for key in ("hidden_size", feed_forward):
        need_count(getattr(model, key), f"{at}.{key}", 1, MAX_LAYER_UNITS, "")
    need(
        model.hidden_size % model.num_heads == 0,
        f"{at}.num_heads",
        model.num_heads,
        f"must divide model.hidden_size ({model.hidden_size})",
    )


# ----------------------------------------------------------------------------------------------------- base


@dataclass
class Choice:
    """A config group's choice. `name` is the YAML file's name."""

    name: str = MISSING

    def check(self, at: str) -> None:
        """Raise ConfigError for values of the right type that cannot work; `at` is the group's key."""


# ---------------------------------------------------------------------------------------------- framework


@dataclass(frozen=True)
class DoctorFacts:
    """What `trainbench doctor` says and does about a framework, declared by the framework's light package."""

    title: str  # as people write it: PyTorch
    module: str  # its import name, looked for without importing it
    install: str  # how to install it
    gpu_install: Mapping[str, str] = field(default_factory=dict)  # by GPU vendor (hw.gpu_vendor): what loads its GPU
    rank: int = 100  # where its lines come (PyTorch first)
    by_default: bool = True  # checked when --frameworks is not given
    also_on_cpu: bool = False  # on a machine with a GPU, checked on its CPU as well


# The run flags every framework's adapter records: whether it compiled the step (torch.compile, XLA's jit,
# mx.compile), whether convolutions ran NHWC, the autocast dtype, whether fp32 matmuls ran as TF32.
SHARED_RUN_FLAGS = ("trainbench.compile", "trainbench.channels_last", "trainbench.autocast", "trainbench.tf32")


@dataclass
class FrameworkConfig(Choice):
    """Base of every framework's config (each framework's package registers its own kind)."""

    adapter: str = MISSING  # module with the framework's Adapter class, imported only inside a cell's process
    package: str = MISSING  # the distribution whose version identifies the framework (resume compares it)
    # Module whose processes(device) and launch(count, entrypoint, argument) start one process per device
    # (PyTorch's DDP); None: one process drives all of a cell's devices (Keras' distribution APIs).
    rank_launcher: ClassVar[str | None] = None
    # Module whose join() makes one process per node one runtime (JAX) for a cell over device.nodes hosts.
    node_joiner: ClassVar[str | None] = None

    # The framework's builders, keyed by the architecture a model YAML describes (ModelConfig.architecture():
    # the model's name, or its family where one builder takes sizes, e.g. `bert`): the name of the builder in
    # the framework's own terms (a torchvision constructor, a keras.applications class, ...). Declared in the
    # framework's light package, so the parent answers "who builds model X" without importing any framework.
    builders: ClassVar[Mapping[str, str]] = {}
    # The version tags (`sw.*`) its adapter records that name the framework's own releases.
    version_tags: ClassVar[tuple[str, ...]] = ()
    # The tags its adapter records that say how it ran a setting, beyond those every framework records
    # (SHARED_RUN_FLAGS): the report tells them per row where its columns differ. An adapter records its own
    # flags only, never another framework's.
    run_flags: ClassVar[tuple[str, ...]] = ()
    # Its own settings that take true | false | auto (`auto`: on with optimize=fast), and those it has only so
    # that a preset for every framework may name them while it has one way only (Keras' NHWC channels_last):
    # those say nothing about how a run differs, so a comparison leaves them out.
    switches: ClassVar[tuple[str, ...]] = ()
    fixed: ClassVar[tuple[str, ...]] = ()
    apple_gpu_backend: ClassVar[str] = "metal"  # what its runs on an Apple GPU tag as trainbench.backend
    doctor: ClassVar[DoctorFacts | None] = None  # None: `trainbench doctor` does not check it

    def cpu_only_on(self, gpu_vendor: str) -> tuple[str, str] | None:
        """Why `trainbench doctor` checks this framework on the CPU only on a machine with this vendor's GPU, as
        (status, line): e.g. ("warn", "a plug-in is not installed ..."); None: on the GPU."""
        return None

    # What the framework can build, run and compute: answered without importing it (judge asks these).
    def builds(self, model: ModelConfig) -> str | None:
        """The name of this framework's builder for `model`, or None when it has none."""
        return self.builders.get(model.architecture())

    def loads_pretrained(self) -> bool:
        """Whether model.pretrained=true can load a model's weights file in this framework."""
        return False

    def in_force(self, knob: str, optimize: OptimizeConfig) -> Any:
        """This framework's own setting `knob` as a cell runs it (a framework whose switches take `auto` says what
        `auto` means under `optimize`); None where it has no such setting."""
        return getattr(self, knob, None)

    def precisions(self, backend_kind: str) -> tuple[str, ...]:
        """Precisions this framework can run on a `cpu` or `gpu` device."""
        return (
            ("fp32", "mixed_bf16", "mixed_fp16")
            if backend_kind == "cpu"
            else ("fp32", "tf32", "mixed_bf16", "mixed_fp16")
        )

    def max_devices(self) -> int | None:
        """How many devices one cell of this framework can use (None: as many as there are)."""
        return 1

    def min_memory_mb(self) -> int:
        """The smallest cell.memory_limit_mb with which this framework imports and runs a tiny step."""
        return 512

    def input_pipeline(self) -> str | None:
        """The host input pipeline data.pipeline=loader runs (e.g. torch.utils.data.DataLoader); None: none yet."""
        return None

    def for_probes(self) -> FrameworkConfig:
        """These settings as batch_size=max's probes use them (trainbench.runner.batch_probes): the same, unless
        a setting costs every new batch size time the probes do not need to spend. The cell itself runs with
        the settings as given."""
        return self

    def fit(self) -> str | None:
        """What task.timed_region=fit / build_fit times: `model.fit` (the framework's own fit on host
        arrays), `loop` (no fit of its own: trainbench's epoch loop as one block), or None (not supported)."""
        return None

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        """The top-level modules a cell of `model` imports, all installed by trainbench's extra named `package`
        (pyproject.toml): checked before a sweep starts, without importing them."""
        return (self.package,)

    def installs_here(self) -> bool:
        """Whether `package`'s extra installs the framework on this machine. False: a cell records it unavailable
        (the machine cannot run it) instead of the sweep stopping to ask for an install."""
        return True


# ------------------------------------------------------------------------------------------------- device

DEVICE_NAMES = ("auto", "cpu", "gpu")


@schema("device", "device")
@dataclass
class DeviceConfig(Choice):
    count: Any = 1  # devices one cell uses (data-parallel): a whole number >= 1, or "all"
    nodes: int = 1  # hosts one data-parallel cell spans, each with `count` devices (docs/multi-gpu.md, across nodes)

    def check(self, at: str) -> None:
        need(self.name in DEVICE_NAMES, at, self.name, f"choose one of {', '.join(DEVICE_NAMES)}")
        need(
            self.count == "all" or (whole(self.count) and 1 <= self.count <= 1024),
            f"{at}.count",
            self.count,
            "must be a whole number >= 1 or all, e.g. device.count=2",
        )
        need(
            whole(self.nodes) and 1 <= self.nodes <= 4096,
            f"{at}.nodes",
            self.nodes,
            "must be a whole number >= 1, e.g. device.nodes=2",
        )


# -------------------------------------------------------------------------------------------------- model


class SampleShape(Protocol):
    """What one sample gives a model (trainbench.data.Dataset has these)."""

    image_size: int  # pixels per side, after any resize (image data)
    channels: int
    seq_len: int  # tokens per sequence (text data)
    num_classes: int


@dataclass
class ModelConfig(Choice):
    """A network, described once. Which framework builds it, and how, is the framework's business: each keys
    its builders by `architecture()` (FrameworkConfig.builders)."""

    input: ClassVar[str] = "image"  # what the model consumes: image | text

    def architecture(self) -> str:
        """What a framework's builders are keyed by: the model's name, unless one builder takes its sizes."""
        return self.name

    def describe(self) -> str:
        return f"model `{self.name}` ({self.schema_kind} model)"  # type: ignore[attr-defined]

    # A model counts itself where its sizes say it all, so every framework records one figure for it (and
    # one MFU); None leaves the count to the framework's counter on the network it built.
    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        """FLOPs per sample (training: forward + backward), as trainbench.flops counts them."""
        return None

    def num_parameters(self, sample: SampleShape) -> int | None:
        """Trainable parameters of the network every framework builds for this sample shape."""
        return None


@schema("model", "mlp")
@dataclass
class MlpModel(ModelConfig):
    """A multilayer perceptron built by trainbench (no library ships the seed blog's MLP)."""

    hidden_sizes: list[int] = field(default_factory=list)
    depth: int | None = None  # when set, `depth` hidden layers of `width` units replace hidden_sizes
    width: int | None = None
    activation: str = "relu"
    output_activation: str | None = None  # null: logits + softmax cross-entropy; sigmoid: the seed blog's head
    init: str = "torch"  # torch: PyTorch's default Linear init in every framework; glorot: Keras' default

    def architecture(self) -> str:
        return "mlp"  # one builder for every depth and width

    def layers(self) -> list[int]:
        return [self.width or 0] * self.depth if self.depth is not None else list(self.hidden_sizes)

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.mlp_flops_per_sample(self, _features(sample), sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.mlp_parameters(self, _features(sample), sample.num_classes)

    def check(self, at: str) -> None:
        super().check(at)
        if self.depth is not None:
            need_count(self.depth, f"{at}.depth", 1, 1000, "e.g. model.depth=5")
            need(
                self.width is not None,
                f"{at}.depth",
                self.depth,
                "builds depth x width layers: set model.width too (e.g. model.width=1024), or use model=mlp_deep",
            )
        if self.depth is not None or self.width is not None:  # a width model.depth would take later
            need_count(self.width, f"{at}.width", 1, MAX_LAYER_UNITS, "e.g. model.width=1024")
        need(
            all(whole(units) and 1 <= units <= MAX_LAYER_UNITS for units in self.hidden_sizes),
            f"{at}.hidden_sizes",
            self.hidden_sizes,
            f"every layer needs 1 to {MAX_LAYER_UNITS:,} units, e.g. [3000,1000]",
        )
        need(
            self.activation in ACTIVATIONS,
            f"{at}.activation",
            self.activation,
            f"choose one of {', '.join(ACTIVATIONS)}",
        )
        need(
            self.output_activation in OUTPUT_ACTIVATIONS,
            f"{at}.output_activation",
            self.output_activation,
            "null (logits) or sigmoid",
        )
        need(self.init in ("torch", "glorot"), f"{at}.init", self.init, "torch or glorot")


def _features(sample: SampleShape) -> int:
    """An image flattened: what an MLP's first layer takes."""
    return sample.channels * sample.image_size * sample.image_size


@schema("model", "vision")
@dataclass
class VisionModel(ModelConfig):
    """A library image classifier, named as torchvision names it (the reference architecture), rebuilt to
    match in each framework."""

    channels: int = 3  # input channels the architecture takes
    min_image_size: int = 1  # smaller inputs pool away to nothing
    pretrained: bool = False  # torchvision's ImageNet weights from the local torch hub cache (PyTorch only)
    weights_file: str | None = None  # the weights' file name in $TORCH_HOME/hub/checkpoints (pretrained=true)
    head: str | None = None  # path of the last Linear layer, replaced when fine-tuning on other classes

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.channels, f"{at}.channels", 1, 3, "")
        need_count(self.min_image_size, f"{at}.min_image_size", 1, MAX_IMAGE_SIZE, "")
        need(
            not self.pretrained or (self.weights_file is not None and self.head is not None),
            f"{at}.pretrained",
            self.pretrained,
            f"model `{self.name}` has no pretrained weights file or classifier head in its YAML: "
            "use model.pretrained=false",
        )


@schema("model", "vit")
@dataclass
class VitModel(VisionModel):
    """A Vision Transformer (Dosovitskiy et al. 2020) as torchvision builds it: non-overlapping patches embedded
    by a convolution, a class token, learned position embeddings, pre-norm encoder blocks (LayerNorm eps 1e-6,
    GELU MLP), a final LayerNorm and one Linear head on the class token. One builder per framework at any size."""

    patch_size: int = MISSING  # pixels per patch side; data.image_size must be a multiple of it
    num_layers: int = MISSING
    num_heads: int = MISSING
    hidden_size: int = MISSING
    mlp_size: int = MISSING  # the MLP's inner width

    def architecture(self) -> str:
        return "vit"

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.patch_size, f"{at}.patch_size", 1, MAX_IMAGE_SIZE, "e.g. model.patch_size=16")
        need_encoder_sizes(self, at, "mlp_size")

    def patches(self, image_size: int) -> int:
        return (image_size // self.patch_size) ** 2

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.vit_flops_per_sample(self, sample.image_size, sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.vit_parameters(self, sample.image_size, sample.num_classes)


@schema("model", "transformer")
@dataclass
class TransformerModel(ModelConfig):
    """A BERT-family encoder for sequence classification, randomly initialised (no hub access)."""

    input: ClassVar[str] = "text"
    family: str = MISSING  # the transformers architecture (distilbert | bert) each framework rebuilds
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    seq_len: int = 128  # tokens per sequence; the text data follows it
    num_labels: int = 2  # classes; the synthetic text data follows it

    def architecture(self) -> str:
        return self.family  # one builder per family, at any size

    def flops_per_sample(self, sample: SampleShape, training: bool) -> float | None:
        return flops.transformer_flops_per_sample(self, sample.seq_len, sample.num_classes, training)

    def num_parameters(self, sample: SampleShape) -> int | None:
        return flops.transformer_parameters(self, sample.num_classes)

    def check(self, at: str) -> None:
        super().check(at)
        need_encoder_sizes(self, at, "intermediate_size")
        need_count(self.vocab_size, f"{at}.vocab_size", 1100, 10**7, "(ids below 1000 are BERT's special tokens)")
        need_count(self.max_position_embeddings, f"{at}.max_position_embeddings", 2, MAX_SEQ_LEN, "")
        need_count(
            self.seq_len,
            f"{at}.seq_len",
            2,
            self.max_position_embeddings,
            "(a [CLS] token and at least one more, at most model.max_position_embeddings)",
        )
        need_count(self.num_labels, f"{at}.num_labels", 2, 100_000, "")


# --------------------------------------------------------------------------------------------------- data

PIPELINES = ("device", "loader")


@dataclass
class DataConfig(Choice):
    input: ClassVar[str] = "image"  # what the data gives: image | text
    num_samples: int | None = None  # training samples (synthetic: generated; real: the first N; null: all)
    num_val_samples: int | None = None
    # device: the whole split moved to the device once, batches gathered there (no input pipeline timed);
    # loader: a host input pipeline with workers feeds every step (what users of real datasets run): each
    # sample scaled, resized and normalised on the host, each batch copied to the device inside the epoch
    pipeline: str = "device"
    loader_workers: int = 4  # pipeline=loader: workers preparing samples on the host (0: in the training loop)

    def check(self, at: str) -> None:
        need_optional_count(self.num_samples, f"{at}.num_samples", 1, MAX_SAMPLES)
        need_optional_count(self.num_val_samples, f"{at}.num_val_samples", 0, MAX_SAMPLES)
        need(self.pipeline in PIPELINES, f"{at}.pipeline", self.pipeline, f"choose one of {', '.join(PIPELINES)}")
        need_count(self.loader_workers, f"{at}.loader_workers", 0, 256, "e.g. data.loader_workers=4")


@dataclass
class ImageData(DataConfig):
    image_size: int = 32  # what the model sees; anything else than the stored size resizes every batch
    mean: list[float] = field(default_factory=lambda: [0.5])  # per channel, after scaling pixels to [0, 1]
    std: list[float] = field(default_factory=lambda: [0.25])
    scale_only: bool = False  # true: pixels / 255 only (Keras' usual preprocessing), mean and std unused

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.image_size, f"{at}.image_size", 1, MAX_IMAGE_SIZE, "e.g. data.image_size=224")
        need(len(self.mean) == len(self.std), f"{at}.std", self.std, "needs one value per channel, like data.mean")
        need(all(finite(s) and s > 0 for s in self.std), f"{at}.std", self.std, "every value must be > 0")
        need(all(finite(m) for m in self.mean), f"{at}.mean", self.mean, "every value must be a finite number")

    def channels_given(self) -> int:
        raise NotImplementedError


@schema("data", "synthetic_images")
@dataclass
class SyntheticImages(ImageData):
    """Images generated in memory: no disk, no network."""

    channels: int = 3
    num_classes: int = 10
    learnable: bool = True  # each class drawn around its own pattern, so accuracy is a real check
    num_samples: int | None = 8192
    num_val_samples: int | None = 1024

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.channels, f"{at}.channels", 1, 64, "e.g. data.channels=3")
        need_count(self.num_classes, f"{at}.num_classes", 2, 100_000, "e.g. data.num_classes=10")
        need(len(self.mean) in (1, self.channels), f"{at}.mean", self.mean, f"needs 1 or {self.channels} values")
        need(self.num_samples is not None, f"{at}.num_samples", None, "synthetic data needs a sample count")

    def channels_given(self) -> int:
        return self.channels


# What each real image dataset holds: channels, stored size, classes. Facts, not settings.
IMAGE_DATASETS = {"cifar10": (3, 32, 10), "mnist": (1, 28, 10), "digits": (1, 8, 10)}


@schema("data", "image_files")
@dataclass
class ImageFiles(ImageData):
    """A real image dataset read from files (downloaded when absent and allowed), or bundled (digits)."""

    loader: str = MISSING  # cifar10 | mnist | digits
    root: str = "data"  # folder holding the dataset's own folder (relative to where you launch)
    download: bool = True
    grayscale_to_rgb: bool = False  # repeat a gray channel three times (ImageNet-style models expect RGB)
    val_fraction: float = 0.2  # digits only: the stratified validation share

    def check(self, at: str) -> None:
        super().check(at)
        need(self.loader in IMAGE_DATASETS, f"{at}.loader", self.loader, f"choose one of {', '.join(IMAGE_DATASETS)}")
        need(
            finite(self.val_fraction) and 0 < self.val_fraction < 1,
            f"{at}.val_fraction",
            self.val_fraction,
            "must be between 0 and 1",
        )

    def channels_given(self) -> int:
        stored = IMAGE_DATASETS[self.loader][0]
        return 3 if self.grayscale_to_rgb and stored == 1 else stored

    @property
    def num_classes(self) -> int:
        return IMAGE_DATASETS[self.loader][2]


@dataclass
class TextData(DataConfig):
    input: ClassVar[str] = "text"
    seq_len: int = 128  # tokens per sequence (padded or truncated); follows the model's
    vocab_size: int = 30522  # token ids are below this; follows the model's

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.seq_len, f"{at}.seq_len", 2, MAX_SEQ_LEN, "(a [CLS] token and at least one more)")
        need_count(self.vocab_size, f"{at}.vocab_size", 1100, 10**7, "")


@schema("data", "synthetic_text")
@dataclass
class SyntheticText(TextData):
    num_classes: int = 2
    learnable: bool = True  # each sequence hides marker tokens of its class
    num_samples: int | None = 2048
    num_val_samples: int | None = 256

    def check(self, at: str) -> None:
        super().check(at)
        need_count(self.num_classes, f"{at}.num_classes", 2, 100_000, "")
        need(self.num_samples is not None, f"{at}.num_samples", None, "synthetic data needs a sample count")


@schema("data", "text_files")
@dataclass
class TextFiles(TextData):
    loader: str = MISSING  # sst2
    root: str = "data"
    download: bool = True

    def check(self, at: str) -> None:
        super().check(at)
        need(self.loader == "sst2", f"{at}.loader", self.loader, "sst2")

    @property
    def num_classes(self) -> int:
        return 2


# --------------------------------------------------------------------------------------------------- task


@dataclass
class TaskConfig(Choice):
    """Base of every task's config: what a task is (the ClassVars below) and the checks every task shares. Its
    behaviour (what it records, how it runs) is trainbench.tasks.base.Task, which each task module's dataclass
    extends with its settings."""

    uses_model: ClassVar[bool] = True  # false: model, data and optim mean nothing to it (matmul)
    unused_groups: ClassVar[tuple[str, ...]] = ()
    timed_region: ClassVar[str] = "steps"  # what its headline figure times (trainbench.timed_region)
    sync_every_step: ClassVar[bool] = False  # fit regions: the loss read back after every step
    data_parallel: ClassVar[bool] = False  # true: it can run on several devices at once (device.count > 1)
    input_pipeline: ClassVar[bool] = False  # true: data.pipeline=loader feeds its timed steps
    # How the report shows its runs (trainbench.runs, trainbench.report): the setting tags only this task
    # records, each with its column's heading (shown in a table of its own when it uses no model), and the
    # report metric its figure is (None: the first of the report's metrics a run has).
    setting_tags: ClassVar[dict[str, str]] = {}
    headline: ClassVar[str | None] = None

    def check_timing(self, at: str, regions: tuple[str, ...]) -> None:
        """For tasks whose timed region is a setting: one of `regions` (the first is the default, which never
        synchronizes inside its block), and sync_every_step only with one of the others (a framework's fit)."""
        need(
            self.timed_region in regions, f"{at}.timed_region", self.timed_region, f"choose one of {', '.join(regions)}"
        )
        fits = " or ".join(regions[1:])
        need(
            not self.sync_every_step or self.timed_region != regions[0],
            f"{at}.sync_every_step",
            self.sync_every_step,
            f"reproduces the per-step read-back inside a framework's fit: use it with task.timed_region={fits} "
            f"(task.timed_region={regions[0]} never synchronizes inside its block)",
        )

    def check_cell(self, cell: CellConfig) -> None:
        """Raise ConfigError for what this task cannot do with the cell's other groups (judged at compose time)."""
        if self.uses_model and not self.input_pipeline:
            need(
                cell.data.pipeline == "device",
                "data.pipeline",
                cell.data.pipeline,
                f"task={self.name} times steps on batches already on the device, so no input pipeline is "
                "timed: use data.pipeline=device, or task=train to time a loader",
            )


# ---------------------------------------------------------------------------------------------- precision

AUTOCAST_DTYPES = (None, "bfloat16", "float16")


@schema("precision", "precision")
@dataclass
class PrecisionConfig(Choice):
    tf32: bool = False  # TF32 tensor-core math for fp32 matmuls and convolutions (NVIDIA Ampere and newer)
    autocast: str | None = None  # null | bfloat16 | float16: mixed precision (fp32 weights and optimizer state)

    def check(self, at: str) -> None:
        need(self.autocast in AUTOCAST_DTYPES, f"{at}.autocast", self.autocast, "null, bfloat16 or float16")


# -------------------------------------------------------------------------------------------------- optim


@dataclass
class OptimConfig(Choice):
    lr: float = 0.01
    weight_decay: float = 0.0  # L2 penalty (SGD, Adam: added to the gradient as PyTorch does; AdamW: decoupled)

    def check(self, at: str) -> None:
        need(finite(self.lr) and 0 < self.lr <= 100, f"{at}.lr", self.lr, "must be a finite number > 0 (and <= 100)")
        need(
            finite(self.weight_decay) and 0 <= self.weight_decay <= 10,
            f"{at}.weight_decay",
            self.weight_decay,
            "must be a finite number >= 0",
        )


@schema("optim", "sgd")
@dataclass
class SgdConfig(OptimConfig):
    momentum: float = 0.9

    def check(self, at: str) -> None:
        super().check(at)
        need(finite(self.momentum) and 0 <= self.momentum < 1, f"{at}.momentum", self.momentum, "must be in [0, 1)")


@schema("optim", "adam")
@dataclass
class AdamConfig(OptimConfig):
    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def check(self, at: str) -> None:
        super().check(at)
        for key in ("beta1", "beta2"):
            value = getattr(self, key)
            need(finite(value) and 0 <= value < 1, f"{at}.{key}", value, "must be in [0, 1)")
        need(finite(self.eps) and 0 < self.eps < 1, f"{at}.eps", self.eps, "must be a small number > 0, e.g. 1e-8")


# ----------------------------------------------------------------------------------------------- optimize


@schema("optimize", "optimize")
@dataclass
class OptimizeConfig(Choice):
    """How hard each framework is asked to go: `none` runs models as written, `fast` asks for its best. Each
    framework expands `fast` into its own knobs (its config's `auto` values, e.g. framework.channels_last)."""

    compile: bool = False  # PyTorch: torch.compile; TensorFlow: XLA (jit_compile); JAX always compiles

    def fast(self) -> bool:
        """Whether each framework is asked for its best: what a framework knob left at `auto` follows."""
        return self.name == "fast"


# ------------------------------------------------------------------------------------------ run settings


@dataclass
class TrackingConfig:
    uri: str | None = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///<project root>/mlflow.db
    experiment: str = "trainbench"  # MLflow experiment name (ignored under `mlflow run`)
    system_metrics_interval_s: float = 10.0  # MLflow system metrics every N seconds; 0 turns them off
    # a tracking server that stops answering mid-sweep is waited for this long (what it is sent meanwhile is
    # kept and sent once it answers) before the sweep gives up on it: a restart, a deploy, a host reboot
    outage_s: float = 300.0

    def check(self, at: str) -> None:
        need(
            finite(self.outage_s) and 0 <= self.outage_s <= 86400,
            f"{at}.outage_s",
            self.outage_s,
            "must be seconds from 0 to 86400, e.g. tracking.outage_s=300",
        )
        need(
            bool(self.experiment.strip()) and len(self.experiment) <= 200 and self.experiment.isprintable(),
            f"{at}.experiment",
            self.experiment,
            "must be a printable name of 1 to 200 characters",
        )
        escape = untrusted.path_problem(self.experiment)
        need(
            escape is None,
            f"{at}.experiment",
            self.experiment,
            f"must be a name, not a path: it holds {escape} (a SQLite store keeps the runs' files in a folder of "
            "this name beside it), e.g. tracking.experiment=my_sweeps",
        )
        need(
            self.uri is None or (bool(self.uri.strip()) and len(self.uri) <= 2000),
            f"{at}.uri",
            self.uri,
            "null or a tracking URI, e.g. http://host:5000 or sqlite:///path/mlflow.db",
        )
        need(
            finite(self.system_metrics_interval_s) and 0 <= self.system_metrics_interval_s <= 3600,
            f"{at}.system_metrics_interval_s",
            self.system_metrics_interval_s,
            "must be 0 (off) or seconds up to 3600",
        )


# A cell's process needs about a second to start Python and its framework: a shorter limit could only fail every
# cell. A year is longer than any benchmark; beyond it a number is a typo (or 1e300), not a limit.
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 365 * 24 * 3600.0


@dataclass
class CellLimits:
    timeout_s: float | None = None  # stop a cell that runs longer (recorded failed)
    memory_limit_mb: int | None = None  # cap the cell's host memory (Linux); a cell over it is tagged oom
    max_batch_size: int = 65536  # batch_size=max searches up to this (trainbench.runner.batch_search)
    cpus: int | None = None  # pin the cell to this many cores (cells running side by side get different ones)
    # stop a cell that shows no sign of progress for this long (no event, no output line, no CPU time: a stopped
    # or deadlocked process), recorded `hung`; null: never. A compile or a long epoch keeps a core busy.
    hung_after_s: float | None = 600.0

    def check(self, at: str) -> None:
        need(
            self.timeout_s is None or (finite(self.timeout_s) and MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S),
            f"{at}.timeout_s",
            self.timeout_s,
            f"must be null (no limit) or seconds from {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} (a year), "
            "e.g. cell.timeout_s=3600",
        )
        need(
            self.hung_after_s is None or (finite(self.hung_after_s) and 2 <= self.hung_after_s <= 10**7),
            f"{at}.hung_after_s",
            self.hung_after_s,
            "must be null (never) or seconds >= 2, e.g. cell.hung_after_s=600",
        )
        need_optional_count(self.memory_limit_mb, f"{at}.memory_limit_mb", 1, 2**24)
        need_count(self.max_batch_size, f"{at}.max_batch_size", 1, MAX_BATCH_SIZE, "")
        need_optional_count(self.cpus, f"{at}.cpus", 1, 4096)


@dataclass
class SweepSettings:
    resume: Any = False  # true: skip cells already finished here; failed: re-run only failed/killed/lost cells
    dry_run: bool = False  # print the sweep's cells and exit without running or recording anything
    heartbeat_s: float = 15.0  # a running cell's run is marked alive this often
    lost_after_s: float = 300.0  # a RUNNING run without a heartbeat for this long is closed as `lost`

    def check(self, at: str) -> None:
        # `is`, not `in`: 0 == False in Python, so `0 in (False, True, "failed")` holds, and runner.resume, which
        # tests `mode is False`, would then resume
        need(
            self.resume is True or self.resume is False or self.resume == "failed",
            f"{at}.resume",
            self.resume,
            "must be false, true or failed, e.g. sweep.resume=true",
        )
        need(
            finite(self.heartbeat_s) and 0.5 <= self.heartbeat_s <= 3600,
            f"{at}.heartbeat_s",
            self.heartbeat_s,
            "must be seconds from 0.5 to 3600",
        )
        need(
            finite(self.lost_after_s) and self.lost_after_s >= 2 * self.heartbeat_s,
            f"{at}.lost_after_s",
            self.lost_after_s,
            "must be at least twice sweep.heartbeat_s",
        )


@dataclass
class CellConfig:
    """One cell: framework x device x model x data x task x precision x batch size (and how it runs)."""

    framework: FrameworkConfig = MISSING
    device: DeviceConfig = MISSING
    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    task: TaskConfig = MISSING
    precision: PrecisionConfig = MISSING
    optim: OptimConfig = MISSING
    optimize: OptimizeConfig = MISSING
    batch_size: Any = 64  # a whole number >= 1, or "max" (the largest that fits)
    seed: int = 0
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    cell: CellLimits = field(default_factory=CellLimits)
    sweep: SweepSettings = field(default_factory=SweepSettings)


GROUPS = ("framework", "device", "model", "data", "task", "precision", "optim", "optimize")

ConfigStore.instance().store(group="schema", name="cell", node=CellConfig, provider="trainbench")
SETTINGS = ("tracking", "cell", "sweep")


def replace(cell: CellConfig, **changes: Any) -> CellConfig:
    """A copy of `cell` with top-level fields or `group={field: value}` changes applied."""
    updated: dict[str, Any] = {}
    for key, value in changes.items():
        current = getattr(cell, key)
        updated[key] = dataclasses.replace(current, **value) if isinstance(value, dict) else value
    return dataclasses.replace(cell, **updated)
