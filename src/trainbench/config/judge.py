"""What cannot work across groups, judged before a run is created or a framework imported.

Each group's dataclass checks its own values (`check`); this module checks the pairs: model x data
(input kind, channels, image size), model x framework (each framework says what it can build),
precision x framework x device (TF32 only where it exists), pretrained x model, and memory limits against
what the framework needs. What only the machine can answer (is there a GPU?) is left to the cell, which
records `unavailable`.
"""

from __future__ import annotations

from collections.abc import Callable

from trainbench.config.errors import ConfigError, PlainError, need
from trainbench.config.schema import (
    GROUPS,
    SETTINGS,
    CellConfig,
    FrameworkConfig,
    ImageData,
    ImageFiles,
    MlpModel,
    SyntheticImages,
    TextData,
    TransformerModel,
    VisionModel,
    VitModel,
    whole,
)

# torchvision's ViT weights (ImageNet at 224 px) hold one position embedding per 16 px patch of 224 px images.
PRETRAINED_VIT_IMAGE_SIZE = 224


def judge(cell: CellConfig) -> None:
    """Raise ConfigError for the first thing about `cell` that cannot work."""
    _own_package(cell)
    for group in GROUPS:
        getattr(cell, group).check(group)
    for setting in SETTINGS:
        getattr(cell, setting).check(setting)
    need(
        cell.batch_size == "max" or (whole(cell.batch_size) and 1 <= cell.batch_size <= cell.cell.max_batch_size),
        "batch_size",
        cell.batch_size,
        f"must be a whole number from 1 to cell.max_batch_size ({cell.cell.max_batch_size:,}), e.g. batch_size=32, "
        "or max (the largest that fits)",
    )
    need(whole(cell.seed) and 0 <= cell.seed < 2**32, "seed", cell.seed, "must be a whole number from 0 to 2**32-1")
    if getattr(cell.task, "uses_model", True):
        _model_and_data(cell)
        _model_and_framework(cell)
    check_cell = getattr(cell.task, "check_cell", None)
    if check_cell is not None:  # what the task needs of the other groups (timed region, input pipeline)
        check_cell(cell)
    _precision(cell)
    _devices(cell)
    _memory(cell)
    _data_root(cell)


def _model_and_data(cell: CellConfig) -> None:
    model, data = cell.model, cell.data
    if isinstance(data, ImageData):
        given = data.channels_given()
        if isinstance(model, VisionModel) and given != model.channels:
            fix = " data.grayscale_to_rgb=true" if isinstance(data, ImageFiles) and given == 1 else ""
            raise ConfigError(
                "data",
                data.name,
                f"model `{model.name}` takes {model.channels}-channel images but data "
                f"`{data.name}` gives {given}-channel ones" + (f": add{fix}" if fix else ""),
            )
        if isinstance(model, VisionModel):
            need(
                data.image_size >= model.min_image_size,
                "data.image_size",
                data.image_size,
                f"{model.name} needs images of at least {model.min_image_size} px, e.g. data.image_size=224",
            )
        if isinstance(model, VitModel):
            need(
                data.image_size % model.patch_size == 0,
                "data.image_size",
                data.image_size,
                f"{model.name} cuts images into {model.patch_size} px patches: use a multiple of "
                f"{model.patch_size}, e.g. data.image_size=224",
            )
            need(
                not model.pretrained or data.image_size == PRETRAINED_VIT_IMAGE_SIZE,
                "data.image_size",
                data.image_size,
                f"torchvision's {model.name} weights hold position embeddings for "
                f"{PRETRAINED_VIT_IMAGE_SIZE} px images: use data.image_size={PRETRAINED_VIT_IMAGE_SIZE}, "
                "or model.pretrained=false",
            )
        if isinstance(data, SyntheticImages) and data.num_samples is not None:
            _fits_in_memory(data.num_samples + (data.num_val_samples or 0), data.channels * data.image_size**2)
    if isinstance(model, TransformerModel) and isinstance(data, TextData):
        need(
            data.seq_len <= model.max_position_embeddings,
            "data.seq_len",
            data.seq_len,
            f"must be <= model.max_position_embeddings ({model.max_position_embeddings})",
        )
        need(
            data.vocab_size <= model.vocab_size,
            "data.vocab_size",
            data.vocab_size,
            f"must be <= model.vocab_size ({model.vocab_size}): the model embeds only that many ids",
        )
    if isinstance(model, MlpModel) and isinstance(data, ImageData):
        widths = [data.channels_given() * data.image_size**2, *model.layers(), 2]
        weights = sum(a * b for a, b in zip(widths, widths[1:], strict=False))
        # fp32 weights, gradients and two optimizer slots
        need(
            weights * 16 <= _host_memory(),
            "model",
            model.name,
            f"{weights:,} weights would need {weights * 16 / 2**30:,.1f} GiB with their gradients and optimizer "
            "state: choose fewer or narrower layers, or a smaller data.image_size",
        )


def _fits_in_memory(samples: int, bytes_per_sample: int) -> None:
    """Synthetic data is generated in host memory: refuse what no machine here could ever hold."""
    total = _host_memory()
    need(
        samples * bytes_per_sample <= total,
        "data.num_samples",
        samples,
        f"{samples:,} samples of {bytes_per_sample:,} bytes would need {samples * bytes_per_sample / 2**30:,.1f} GiB; "
        f"this machine has {total / 2**30:,.1f} GiB: choose fewer samples or a smaller data.image_size",
    )


def _host_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def _model_and_framework(cell: CellConfig) -> None:
    framework, model = cell.framework, cell.model
    if framework.builds(model) is None:
        able = frameworks_that(lambda other: other.builds(model) is not None)
        raise PlainError(
            "model",
            f"`framework`={framework.name!r} cannot build model `{model.name}`: "
            f"choose {able or 'framework=(none has a builder)'}, "
            f"or another model",
        )
    if isinstance(model, VisionModel) and model.pretrained:
        able = frameworks_that(lambda other: other.loads_pretrained())
        need(
            framework.loads_pretrained(),
            "model.pretrained",
            True,
            f"pretrained weights load in {able or 'no framework'} only; "
            f"framework={framework.name} starts from random weights: use model.pretrained=false",
        )


def _spans_nodes(framework: FrameworkConfig) -> bool:
    """Whether a cell of this framework can span hosts: it runs a process per device, or joins one per node."""
    return framework.rank_launcher is not None or framework.node_joiner is not None


def frameworks_that(able: Callable[[FrameworkConfig], bool]) -> str:
    """`framework=a or framework=b`: the frameworks (conf/framework/) whose default config `able` accepts, for a
    refusal's way out; "" when none does."""
    import trainbench.frameworks.shipped  # noqa: F401  (registers each shipped framework's config)
    from trainbench.config.registry import SCHEMAS
    from trainbench.locations import choices

    return " or ".join(f"framework={name}" for name in choices("framework") if able(_framework_named(name, SCHEMAS)))


def _framework_named(name: str, schemas: dict[str, dict[str, type]]) -> FrameworkConfig:
    """The default config of framework `name` (kind and name are the same for every framework YAML)."""
    cls = schemas["framework"].get(name, FrameworkConfig)
    framework: FrameworkConfig = cls()
    return framework


def _precision(cell: CellConfig) -> None:
    precision, device, framework = cell.precision, cell.device, cell.framework
    if device.name == "cpu":
        allowed = framework.precisions("cpu")
        if precision.name not in allowed:
            why = (
                "TF32 is an NVIDIA tensor-core mode (Ampere and newer); a CPU computes fp32"
                if precision.tf32 and precision.autocast is None
                else f"{framework.name} on a CPU runs {', '.join(allowed)}"
            )
            raise ConfigError("precision", precision.name, f"{why}: use precision={' or precision='.join(allowed)}")
    elif precision.name not in framework.precisions("gpu"):
        allowed = framework.precisions("gpu")
        raise ConfigError("precision", precision.name, f"{framework.name} runs {', '.join(allowed)}")


def _devices(cell: CellConfig) -> None:
    limit = cell.framework.max_devices()
    count = cell.device.count
    if count != 1 and not getattr(cell.task, "data_parallel", False):
        raise ConfigError("device.count", count, f"task={cell.task.name} runs on one device: use device.count=1")
    nodes = cell.device.nodes
    if nodes != 1 and not getattr(cell.task, "data_parallel", False):
        raise ConfigError("device.nodes", nodes, f"task={cell.task.name} runs on one device: use device.nodes=1")
    if nodes != 1 and not _spans_nodes(cell.framework):
        across = frameworks_that(_spans_nodes)
        raise ConfigError(
            "device.nodes",
            nodes,
            f"framework={cell.framework.name} runs a cell on one host: use device.nodes=1"
            + (f", or {across}" if across else ""),
        )
    if nodes != 1 and cell.batch_size == "max":
        raise ConfigError(
            "batch_size",
            "max",
            "the search probes batches on one host: run it with device.nodes=1, then batch_size=N with device.nodes",
        )
    if nodes != 1 and getattr(cell.task, "timed_region", "") in ("fit", "build_fit"):
        raise ConfigError(
            "task.timed_region",
            cell.task.timed_region,
            "a framework's own fit runs on one host here (Keras' fit across processes takes only a tf.data "
            "pipeline sharded per host): use task.timed_region=epoch with device.nodes > 1",
        )
    if count != "all" and limit is not None:
        need(
            count <= limit,
            "device.count",
            count,
            f"framework={cell.framework.name} runs a cell on at most {limit} device(s) here",
        )


def _memory(cell: CellConfig) -> None:
    limit = cell.cell.memory_limit_mb
    if limit is not None:
        least = cell.framework.min_memory_mb()
        need(
            limit >= least,
            "cell.memory_limit_mb",
            limit,
            f"{cell.framework.name} needs at least {least} MB to import and run a tiny step (the floor measured by "
            "benchmarks/memory_floor.py, +25%; each thread's stack counts too, so machines with many cores need "
            "more): use null or a larger limit",
        )


def _data_root(cell: CellConfig) -> None:
    """A data.root that is a file (or lies under one) would only surface as an error deep in a dataset's reader."""
    root = getattr(cell.data, "root", None)
    if not isinstance(root, str) or not root:
        return
    from pathlib import Path

    path = Path(root).expanduser()
    for part in (path, *path.parents):
        if part.exists():
            need(
                part.is_dir(),
                "data.root",
                root,
                f"{'is' if part == path else 'lies under'} a file, not a folder ({part}): name the folder that holds "
                "(or will hold) the dataset, e.g. data.root=~/data",
            )
            return


def _own_package(cell: CellConfig) -> None:
    """framework.package names the framework's distribution (recorded, compared on resume); it is looked up as a
    module before the sweep starts, so a value from the command line or a file would choose what is imported."""
    import dataclasses

    declared = next(f.default for f in dataclasses.fields(cell.framework) if f.name == "package")
    need(
        cell.framework.package == declared,
        "framework.package",
        cell.framework.package,
        f"must stay {declared} (framework={cell.framework.name}'s distribution, not a setting); choose another "
        "framework with framework=, e.g. framework=jax",
    )
