"""A reference cell's rows -> the run a local cell would have recorded.

The CSV's own names are translated here, once: model and dataset names to trainbench's
(`mlp_depth10_1024` -> `mlp_deep` with `model.depth=10`), metrics to schema metrics (`throughput` ->
`samples_per_s`), accelerator strings to the `hw.label` a local run on that hardware would get, and the
settings that change the measured quantity to the comparison tags of trainbench.store.runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainbench import untrusted
from trainbench.references.commands import command_words, not_a_cell_override
from trainbench.references.reading import SUBJECT_COLUMNS, BadReferences, CsvRow
from trainbench.references.validating import (
    TRAIN_TIME,
    XLA_SUFFIX,
    backend_of,
    metric_rule,
    precision_of,
)
from trainbench.store.run_naming import run_name
from trainbench.store.runs import FULL_TRAIN_SIZES, SETTING_NAME_TAG, setting_name

# What makes two rows figures of the same reference cell (and so of the same run).
IDENTITY = ("source", "series", *SUBJECT_COLUMNS)
# Settings of the whole cell: its rows must agree (blank rows take the others' value).
CELL_SETTINGS = ("timed_region", "pipeline", "channels_last", "power_scope", "reproduce")
NOTES_SEPARATOR = " -- "  # reference.citation: the `reference` column(s), then the rows' notes
MAX_TAG_LENGTH = 5000  # MLflow's limit is 8000; the long tags here are free text

# Published models trainbench has no YAML for (yet): imported under these names, which a future
# conf/model/ file should use too.
EXTERNAL_MODELS = {"distilbert": "text", "bert_large": "text"}
NATIVE_IMAGE_SIZES = {"cifar10": 32, "mnist": 28}
# GPUs sold in one memory size only: their reference runs can name it, as a local run's hw.label does.
ONE_MEMORY_SIZE_GB = {
    "NVIDIA GeForce RTX 3090": 24,
    "NVIDIA GeForce RTX 4090": 24,
    "NVIDIA H100 PCIe": 80,
    "NVIDIA H200": 141,
    "Tesla K80": 12,  # per GPU of the board (NVML sees two)
}
# Accelerator strings whose NVML name (what a local run's hw.gpu / hw.label says) is known.
NVML_NAMES = {
    "NVIDIA A100 80GB SXM4": "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB": "NVIDIA A100-SXM4-80GB",  # DGX A100: every GPU is the SXM4 module
    "NVIDIA Tesla K80": "Tesla K80",
    "NVIDIA Tesla P100": "Tesla P100-PCIE-16GB",  # Kaggle's P100
}
APPLE = re.compile(r"^(Apple M\d+(?: Pro| Max| Ultra)?)(?:\s+(\d+)-core)?(?:\s+(GPU|CPU))?$")
DEFAULT_TIMED_REGION = {"train": "epoch", "benchmark": "steps", "matmul": "steps"}


@dataclass
class ReferenceRun:
    """One reference cell, ready to be written: what a run of the real tool would have recorded."""

    key: str
    name: str
    params: dict[str, Any]
    tags: dict[str, str]
    metrics: list[tuple[str, float, int]] = field(default_factory=list)  # (name, value, step)
    lines: list[int] = field(default_factory=list)

    @property
    def content_hash(self) -> str:
        return digest({"params": self.params, "tags": self.tags, "metrics": sorted(self.metrics)})


@dataclass(frozen=True)
class Workload:
    """What was trained, in trainbench's names."""

    model: str
    model_params: dict[str, Any]
    data: str
    data_params: dict[str, Any]
    samples_per_epoch: int | None  # the training set's size, where the dataset name says it
    image_size: int | None
    seq_len: int | None


@dataclass
class Figures:
    """The schema metrics of one reference cell, with where each came from."""

    values: dict[tuple[str, int], float] = field(default_factory=dict)  # (metric, step) -> value
    lines: dict[tuple[str, int], int] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # CSV metric -> its unit, as published
    derived: dict[str, str] = field(default_factory=dict)  # schema metric -> how it was computed
    epochs: int | None = None

    def add(self, metric: str, step: int, value: float, line: int) -> None:
        if (metric, step) in self.values:
            raise BadReferences(
                f"line {line}: gives {metric}"
                + (f" of epoch {step}" if step else "")
                + f" again for the same reference cell as line {self.lines[(metric, step)]}"
            )
        self.values[(metric, step)], self.lines[(metric, step)] = value, line

    def derive(self, metric: str, step: int, value: float, how: str) -> None:
        """A metric computed from published ones, unless the source published it too."""
        if (metric, step) not in self.values:
            self.values[(metric, step)] = value
            self.derived[metric] = how

    def targets(self) -> set[str]:
        return {metric for metric, _ in self.values}

    def history(self, metric: str) -> list[tuple[int, float]]:
        return sorted((step, value) for (name, step), value in self.values.items() if name == metric)


def group(rows: list[CsvRow]) -> list[list[CsvRow]]:
    """The rows of each reference cell, in the order the cells first appear."""
    cells: dict[tuple[str, ...], list[CsvRow]] = {}
    for row in rows:
        cells.setdefault(tuple(row[k] for k in IDENTITY), []).append(row)
    return list(cells.values())


def reference_run(rows: list[CsvRow]) -> ReferenceRun:
    """The run a reference cell's rows become. Raises BadReferences naming the line at fault."""
    first = rows[0]
    settings = cell_settings(rows)
    workload = map_workload(first["model"], first["dataset"])
    figures = collect_figures(rows, workload.samples_per_epoch)
    task = task_of(first["model"], figures)
    if task == "train":
        derive_training_metrics(figures, workload.samples_per_epoch)
    backend = backend_of(first)
    assert backend is not None  # validated
    params = reference_params(first, workload, task, figures, settings)
    tags = reference_tags(rows, workload, task, figures, settings, backend)
    if settings.get("reproduce"):
        composed_params, composed_tags = reproduced(first, settings["reproduce"], workload, task, figures, settings)
        params, tags = composed_params, {**tags, **composed_tags, "reference.reproduce": settings["reproduce"]}
    key = digest([first[k] for k in IDENTITY])
    tags["reference.key"] = key
    tags[SETTING_NAME_TAG] = setting_name(tags, params)
    name = run_name(
        framework=tags["trainbench.framework"],
        backend=backend,
        task=task,
        model=workload.model,
        batch_size=params.get("batch_size"),
        matmul_shape=tags.get("trainbench.matmul_shape"),
        precision=tags["trainbench.precision"],
    )
    metrics = [(metric, value, step) for (metric, step), value in figures.values.items()]
    return ReferenceRun(key, name, params, tags, metrics, [row.line for row in rows])


def cell_settings(rows: list[CsvRow]) -> dict[str, str]:
    """timed_region, pipeline, channels_last, power_scope of the cell; rows that set one must agree."""
    settings: dict[str, str] = {}
    where: dict[str, int] = {}
    for row in rows:
        for column in CELL_SETTINGS:
            value = row[column]
            if value and settings.setdefault(column, value) != value:
                raise BadReferences(
                    f"line {row.line}: `{column}`={value!r} differs from {settings[column]!r} on line "
                    f"{where[column]}, a row of the same reference cell; one cell has one {column}"
                )
            where.setdefault(column, row.line)
    return settings


def collect_figures(rows: list[CsvRow], samples_per_epoch: int | None) -> Figures:
    figures = Figures()
    for row in rows:
        rule = metric_rule(row["metric"])
        assert rule is not None  # validated
        value = float(row["value"])
        if row["metric"] == "time_per_sample_us" and row["epoch"]:
            _add_epoch_time_per_sample(figures, row, value, samples_per_epoch)
        else:
            step = (int(row["epoch"]) if row["epoch"] else 1) if rule.per_epoch else 0
            figures.add(rule.target, step, rule.convert(value) if rule.convert else value, row.line)
            if rule.convert:
                figures.derived[rule.target] = rule.derivation
            if rule.per_epoch:
                figures.epochs = max(figures.epochs or 0, step)
        trained = TRAIN_TIME.match(row["metric"])
        if trained:
            figures.epochs = int(trained.group(1))
        if row["unit"]:
            figures.units[row["metric"]] = row["unit"]
    return figures


def _add_epoch_time_per_sample(figures: Figures, row: CsvRow, us: float, samples: int | None) -> None:
    """A per-sample time of one epoch (what Keras prints) is that epoch's time over the training set."""
    if not samples:
        raise BadReferences(
            f"line {row.line}: time_per_sample_us of epoch {row['epoch']} needs the training set's "
            f"size, which dataset {row['dataset']!r} does not say; use cifar10, mnist or "
            "<name>_<samples>_<size>, or give epoch_time_s"
        )
    epoch = int(row["epoch"])
    figures.add("epoch_time_s", epoch, us * samples / 1e6, row.line)
    figures.derived["epoch_time_s"] = f"time_per_sample_us x {samples} samples per epoch / 1e6"
    figures.epochs = max(figures.epochs or 0, epoch)


def task_of(model: str, figures: Figures) -> str:
    targets = figures.targets()
    if model == "matmul" or ("peak_tflops" in targets and "samples_per_s" not in targets):
        return "matmul"
    return "train" if figures.epochs else "benchmark"  # epochs: per-epoch figures, or a time over N epochs


def derive_training_metrics(figures: Figures, samples: int | None) -> None:
    """samples_per_s, first_epoch_time_s and epoch_samples_per_s from epoch times, by trainbench's own rule:
    throughput is over the epochs after the first when there are several."""
    times = figures.history("epoch_time_s")
    if not times:
        return
    if times[0][0] == 1:
        figures.derive("first_epoch_time_s", 0, times[0][1], "epoch_time_s of epoch 1")
    if not samples:
        return
    steady = times[1:] or times
    figures.derive(
        "samples_per_s",
        0,
        samples * len(steady) / sum(t for _, t in steady),
        f"{samples} samples x {len(steady)} epoch(s) / their epoch_time_s"
        + (" (the epochs after the first)" if len(times) > 1 else ""),
    )
    for epoch, seconds in times:
        figures.derive("epoch_samples_per_s", epoch, samples / seconds, f"{samples} samples / epoch_time_s")


def reference_params(
    first: CsvRow, workload: Workload, task: str, figures: Figures, settings: dict[str, str]
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "framework.name": first["framework"].lower(),
        "device.name": first["device_kind"],
        "model.name": workload.model,
        **workload.model_params,
        "data.name": workload.data,
        **workload.data_params,
        "task.name": task,
        "precision.name": precision_of(first["precision"]),
    }
    if first["batch_size"]:
        params["batch_size"] = int(first["batch_size"])
    if task == "train" and figures.epochs:
        params["task.epochs"] = figures.epochs
    params["task.timed_region"] = settings.get("timed_region") or DEFAULT_TIMED_REGION[task]
    if task != "matmul":
        params["data.pipeline"] = settings.get("pipeline") or "device"
    params["optimize.compile"] = compiled(first)
    if switches(params["framework.name"], "channels_last"):  # one without the switch has a single layout
        params["framework.channels_last"] = channels_last_knob(settings, compiled(first))
    return params


def switches(framework: str, knob: str) -> bool:
    """Whether `framework` declares `knob` a setting of its own that it can switch (FrameworkConfig.switches)."""
    from trainbench.store.setting import framework_config

    config = framework_config(framework)
    return config is not None and knob in config.switches


def channels_last_knob(settings: dict[str, str], fast: bool) -> str:
    """framework.channels_last as a local cell of the row's setting is configured: `auto` where optimize=fast
    (compiled rows) or none sets it by itself, else the row's own value."""
    wanted = settings.get("channels_last") == "true"
    return "auto" if wanted == fast else str(wanted).lower()


def reproduced(
    first: CsvRow, command: str, workload: Workload, task: str, figures: Figures, settings: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The params and setting tags of the one cell `python src/run.py <command>` runs, after checking that
    the cell measures what the row says (model, data, batch, precision, timing, ...): a reference run is then
    the same setting as a local run of its command, by construction. Raises BadReferences naming the line."""
    from trainbench.config import ConfigError, params
    from trainbench.tasks.base import task_of

    where = f"line {first.line}: `reproduce`={command!r}"
    for word in command_words(command):  # the report prints the command for anyone to run: Hydra's keys run code
        why = not_a_cell_override(word)
        if why is not None:
            raise BadReferences(f"{where} holds {word!r}, {why}")
    try:
        cells = composed(command)
    except ConfigError as error:
        raise BadReferences(f"{where} does not compose: {error}") from None
    if len(cells) != 1:
        raise BadReferences(f"{where} composes {len(cells)} cells; narrow it to this row's one (e.g. device=...)")
    cell_task = task_of(cells[0])
    cell = cell_task.prepared(cells[0])
    tags = {**cell_task.tags(cell), "trainbench.compile": str(cell.optimize.compile).lower()}
    wanted = expected_cell(first, workload, task, figures, settings)
    got = {key: _composed(cell, key) for key in wanted}
    wrong = [key for key in wanted if got[key] != wanted[key]]
    if wrong:
        key = wrong[0]
        raise BadReferences(f"{where} composes a cell with {key}={got[key]!r}, but the row says {wanted[key]!r}")
    # The published figure ran with thread settings of its own, unstated: the importing process's environment
    # (threads.*) is not its setting, and would be kept in the composed-runs cache whatever the next import's.
    ran = {key: value for key, value in params(cell).items() if not key.startswith("threads.")}
    return ran, {key: str(value) for key, value in tags.items() if value is not None}


@functools.lru_cache(maxsize=256)
def composed(command: str) -> list[Any]:
    """The cells of a `reproduce` command, composed once per import however many rows share it (several
    machines of one study ran the same command)."""
    import shlex

    from trainbench.config.compose import cells_for

    return cells_for(shlex.split(command))


def expected_cell(
    first: CsvRow, workload: Workload, task: str, figures: Figures, settings: dict[str, str]
) -> dict[str, Any]:
    """What the row says the cell is, in the composed config's names."""
    expected: dict[str, Any] = {
        "framework.name": first["framework"].lower(),
        "device.name": first["device_kind"],
        "task.name": task,
        "precision.name": precision_of(first["precision"]),
        "optimize.compile": compiled(first),
        "task.timed_region": settings.get("timed_region") or DEFAULT_TIMED_REGION[task],
    }
    if task == "matmul":
        return {**expected, "task.shape": workload.model_params["task.shape"]}
    expected.update(
        {
            "model.name": workload.model,
            "data.name": workload.data,
            "batch_size": int(first["batch_size"]),
            "data.pipeline": settings.get("pipeline") or "device",
        }
    )
    expected.update({key: value for key, value in workload.model_params.items() if key.startswith("model.")})
    if workload.image_size:
        expected["data.image_size"] = workload.image_size
    if workload.seq_len:
        expected["model.seq_len"] = workload.seq_len
    if task == "train":
        expected["task.epochs"] = figures.epochs
        expected["data.num_samples"] = workload.samples_per_epoch
    if switches(first["framework"].lower(), "channels_last") and settings.get("channels_last"):
        expected["framework.channels_last"] = settings["channels_last"] == "true"
    return expected


def _composed(cell: Any, key: str) -> Any:
    """A composed cell's value for a dotted key; a real dataset's null sample count is all of it."""
    from trainbench.store.setting import FULL_SPLITS

    if key == "batch_size":
        return cell.batch_size
    group, _, name = key.partition(".")
    if group == "framework":  # the framework's own setting as in force (`auto` resolved)
        return cell.framework.in_force(name, cell.optimize)
    value = getattr(getattr(cell, group), name, None)
    if key == "data.num_samples" and value is None:
        return FULL_SPLITS.get(cell.data.name, (None,))[0]
    return value


def reference_tags(
    rows: list[CsvRow], workload: Workload, task: str, figures: Figures, settings: dict[str, str], backend: str
) -> dict[str, str]:
    first = rows[0]
    citation = "; ".join(unique(r["reference"] for r in rows))
    notes = "; ".join(unique(r["notes"] for r in rows if r["notes"]))
    if notes:
        citation += NOTES_SEPARATOR + notes
    tags: dict[str, Any] = {
        "trainbench.kind": "reference",
        "trainbench.outcome": "finished",
        "trainbench.framework": first["framework"].lower(),
        "trainbench.framework_version": first["framework_version"] or None,
        "trainbench.device": first["device_kind"],
        "trainbench.backend": backend,
        **comparison_tags(first, workload, task, figures, settings),
        **hardware_tags(first["accelerator"], first["system"], backend),
        "power.scope": settings.get("power_scope") if figures.targets() & {"avg_power_w"} else None,
        "reference.source": first["source"],
        "reference.series": first["series"] or None,
        "reference.citation": citation[:MAX_TAG_LENGTH],
        "reference.source_line": "; ".join(unique(r["source_line"] for r in rows if r["source_line"]))[:MAX_TAG_LENGTH]
        or None,
        # the CSV's own words, for whoever traces a figure back to its source
        "reference.system": first["system"],
        "reference.accelerator": first["accelerator"],
        "reference.model": first["model"],
        "reference.dataset": first["dataset"],
        "reference.precision": first["precision"],
        "reference.units": ", ".join(f"{k}={v}" for k, v in sorted(figures.units.items())) or None,
        "reference.derived": "; ".join(f"{k} = {v}" for k, v in sorted(figures.derived.items())) or None,
        # the run page's description, which MLflow's UI renders as Markdown: the CSV's words as plain text
        "mlflow.note.content": untrusted.markdown_text(citation)[:MAX_TAG_LENGTH],
    }
    return {key: str(value) for key, value in tags.items() if value is not None}


def comparison_tags(
    first: CsvRow, workload: Workload, task: str, figures: Figures, settings: dict[str, str]
) -> dict[str, Any]:
    """The tags of trainbench.store.runs.SETTING_TAGS, as a local cell of the same setting records them."""
    train = task == "train"
    matmul = task == "matmul"
    return {
        "trainbench.task": task,
        "trainbench.model": workload.model,
        "trainbench.data": workload.data,
        "trainbench.image_size": None if matmul else workload.image_size,
        "trainbench.seq_len": None if matmul else workload.seq_len,
        "trainbench.samples_per_epoch": workload.samples_per_epoch if train else None,
        "trainbench.epochs": figures.epochs if train else None,
        "trainbench.precision": precision_of(first["precision"]),
        "trainbench.batch_size": first["batch_size"] or None,
        "trainbench.compile": str(compiled(first)).lower(),
        "trainbench.channels_last": settings.get("channels_last", "false"),
        "trainbench.optimize": "fast" if compiled(first) else "none",
        "trainbench.pipeline": settings.get("pipeline", "device"),
        "trainbench.timed_region": settings.get("timed_region") or DEFAULT_TIMED_REGION[task],
        "trainbench.num_devices": 1,
        "trainbench.matmul_shape": workload.model_params.get("task.shape") if matmul else None,
    }


def compiled(row: CsvRow) -> bool:
    return row["precision"].lower().endswith(XLA_SUFFIX)


# ------------------------------------------------------------------------------------------------- names


def map_workload(model_name: str, dataset_name: str) -> Workload:
    model, model_params = map_model(model_name)
    data, data_params = map_dataset(dataset_name)
    text = EXTERNAL_MODELS.get(model) == "text" or data_params.get("data.input") == "text"
    samples = data_params.get("data.num_samples") or FULL_TRAIN_SIZES.get(data)
    image_size = None if text else data_params.get("data.image_size") or NATIVE_IMAGE_SIZES.get(data)
    return Workload(
        model, model_params, data, data_params, samples, image_size, data_params.get("data.seq_len") if text else None
    )


def map_model(name: str) -> tuple[str, dict[str, Any]]:
    """A published model name -> (trainbench model name, model.* / task.* params)."""
    deep = re.fullmatch(r"mlp_depth(\d+)_(\d+)", name)
    if deep:  # depth x Dense(width): trainbench's mlp_deep
        return "mlp_deep", {"model.depth": int(deep.group(1)), "model.width": int(deep.group(2))}
    shaped = re.fullmatch(r"mlp((?:_\d+)+)", name)
    if shaped:  # mlp_3000_1000: Dense(3000)-Dense(1000): trainbench's mlp with those hidden sizes
        return "mlp", {"model.hidden_sizes": [int(s) for s in shaped.group(1).strip("_").split("_")]}
    if name == "matmul":  # the matmul task: no model (local matmul cells name theirs by task.shape)
        return "matmul", {"task.shape": "square"}
    if name in EXTERNAL_MODELS:
        return name, {"model.input": EXTERNAL_MODELS[name]}
    return name, {}  # trainbench's own names (resnet50, vgg16, ...) and a user's own models


def map_dataset(name: str) -> tuple[str, dict[str, Any]]:
    """A published dataset name -> (trainbench data name, data.* params)."""
    if name == "synthetic_224":  # ImageNet-shaped random images: trainbench's synthetic_imagenet
        return "synthetic_imagenet", {"data.image_size": 224}
    subset = re.fullmatch(r"(mnist|cifar10)_(\d+)_(\d+)", name)
    if subset:  # mnist_1000_224: the first 1000 images resized to 224 px (the MPS study's setting)
        params: dict[str, Any] = {"data.num_samples": int(subset.group(2)), "data.image_size": int(subset.group(3))}
        if subset.group(1) == "mnist":
            params["data.grayscale_to_rgb"] = True
        return subset.group(1), params
    sequences = re.fullmatch(r"synthetic_seq(\d+)", name)
    if sequences:  # random token sequences of that length: trainbench's synthetic_text
        length = int(sequences.group(1))
        return "synthetic_text", {"data.input": "text", "data.seq_len": length, "model.seq_len": length}
    sized = re.fullmatch(r"(imagenet)_(\d+)", name)
    if sized:
        return sized.group(1), {"data.image_size": int(sized.group(2))}
    return name, {}


def hardware_tags(accelerator: str, system: str, backend: str) -> dict[str, Any]:
    """hw.* tags, with the hw.label a local run on that hardware gets (trainbench.measure.hardware.label): the GPU's
    memory and the Apple GPU's or the CPU's cores where the accelerator string says them ("32-core GPU")."""
    from trainbench.measure.hardware import label

    name = re.sub(r"\s*\([^)]*\)\s*$", "", accelerator).strip()  # "(tensorflow-metal)", "(AVX2 ...)"
    apple = APPLE.fullmatch(name)
    if apple:
        chip, cores = apple.group(1), apple.group(2)
        on_gpu = backend in ("mps", "metal")
        memory = re.search(r"(\d+)\s*GB\b", system)  # unified memory, when the system names it
        tags = {
            "hw.chip": chip,
            "hw.cpu": chip,
            "hw.machine": "arm64",
            "hw.gpu": chip,  # what a local Mac's hw.gpu says (ioreg's model: the chip)
            "hw.gpu_cores": cores if on_gpu else None,
            "hw.cpu_cores": cores if not on_gpu else None,
            "hw.memory_gb": memory.group(1) if memory else None,
        }
        known = {k: str(v) for k, v in tags.items() if v is not None}
        return {**tags, "hw.label": label("metal" if on_gpu else "cpu", known)}
    if backend == "cuda":
        gpu = NVML_NAMES.get(name, name)
        memory = re.search(r"(\d+)\s*GB", gpu)
        size = memory.group(1) if memory else ONE_MEMORY_SIZE_GB.get(gpu)
        tags = {"hw.gpu": gpu, "hw.gpu_vendor": "nvidia", "hw.gpu_memory_gb": size}
        return {**tags, "hw.label": label("cuda", {k: str(v) for k, v in tags.items() if v is not None})}
    cores = re.search(r"\b(\d+)-core\b", name)
    tags = {"hw.cpu": re.sub(r"\s*\b\d+-core\b", "", name), "hw.cpu_cores": cores.group(1) if cores else None}
    return {**tags, "hw.label": label("cpu", {k: str(v) for k, v in tags.items() if v is not None})}


def unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
