"""Published figures as MLflow runs of the same shape as trainbench's own cells.

    python src/references.py [CSV] [--experiment NAME] [--dry-run]

Each row of the CSV (references/published-results.csv, or a user's own file with the same columns) is one
figure; the rows of one reference cell (same source, system, accelerator, framework and version, model,
dataset, batch size, precision) become one run tagged `trainbench.kind=reference`, with the params, tags
and metric names of docs/mlflow-schema.md, so the MLflow UI and `src/report.py` compare it with local
cells directly. The CSV's own names are translated here, once: model and dataset names to trainbench's
(`mlp_depth10_1024` -> `mlp_deep` with `model.depth=10`), metrics to schema metrics (`throughput` ->
`samples_per_s`), accelerator strings to the `hw.label` a local run on that hardware would get.

The whole file is validated before anything is written: a bad row stops the import naming its line.
Importing again changes nothing: each reference cell carries `reference.key` (a hash of its identity
columns) and `reference.content_hash`; an unchanged cell is skipped, a changed one replaced.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainbench import tracking
from trainbench.config import PROJECT_ROOT, choices

DEFAULT_CSV = PROJECT_ROOT / "references" / "published-results.csv"
EXIT_OK, EXIT_BAD_INPUT = 0, 2

COLUMNS = (
    "source", "reference", "system", "device_kind", "accelerator", "framework", "framework_version",
    "model", "dataset", "batch_size", "precision", "epoch", "metric", "value", "unit", "notes",
)
REQUIRED = ("source", "reference", "system", "device_kind", "accelerator", "framework", "model", "dataset",
            "precision", "metric", "value")
# What makes two rows figures of the same reference cell (and so of the same run).
IDENTITY = ("source", "system", "device_kind", "accelerator", "framework", "framework_version", "model",
            "dataset", "batch_size", "precision")

NOTES_SEPARATOR = " -- "  # reference.citation: the `reference` column(s), then the rows' notes
SAMPLE_UNITS = ("samples/s", "sample/s", "img/s", "images/s", "seq/s", "sequences/s")


@dataclass(frozen=True)
class MetricRule:
    """How one CSV metric becomes a schema metric."""

    target: str
    per_epoch: bool = False  # logged with step = epoch (a blank epoch is the first and only one)
    units: tuple[str, ...] = ("",)  # accepted `unit` values; a blank unit is always accepted
    convert: Callable[[float], float] | None = None
    positive: bool = False  # must be > 0 (times, throughputs: a zero would be a typo or a division)


def _rule(target: str, units: tuple[str, ...] = ("",), **kwargs: Any) -> MetricRule:
    return MetricRule(target, units=units, **kwargs)


METRICS: dict[str, MetricRule] = {
    # the published CSV's own names
    "throughput": _rule("samples_per_s", SAMPLE_UNITS, positive=True),
    "time_per_sample_us": _rule("samples_per_s", ("us", "µs"), convert=lambda us: 1e6 / us, positive=True),
    "power_w": _rule("avg_power_w", ("W",), positive=True),
    # train_time_{N}_epochs_s is matched by pattern below -> total_time_s with param epochs=N
    # schema names, for rows from a trainbench run on a colleague's machine
    "epoch_time_s": _rule("epoch_time_s", ("s",), per_epoch=True, positive=True),
    "epoch_samples_per_s": _rule("epoch_samples_per_s", SAMPLE_UNITS, per_epoch=True, positive=True),
    **{name: _rule(name, per_epoch=True) for name in ("train_loss", "train_accuracy", "val_loss", "val_accuracy")},
    "samples_per_s": _rule("samples_per_s", SAMPLE_UNITS, positive=True),
    **{name: _rule(name, ("s",), positive=True) for name in ("total_time_s", "first_epoch_time_s", "warmup_time_s")},
    **{name: _rule(name, ("ms",), positive=True)
       for name in ("step_time_ms_mean", "step_time_ms_p50", "step_time_ms_p90", "step_time_ms_p99")},
    "step_time_cv_pct": _rule("step_time_cv_pct", ("%",)),
    **{name: _rule(name, ("MB",)) for name in ("peak_device_memory_mb", "peak_host_memory_mb")},
    "energy_j": _rule("energy_j", ("J",), positive=True),
    "avg_power_w": _rule("avg_power_w", ("W",), positive=True),
    "samples_per_j": _rule("samples_per_j"),
    "flops_per_sample": _rule("flops_per_sample"),
    "achieved_tflops": _rule("achieved_tflops", ("TFLOPS",)),
    "peak_tflops": _rule("peak_tflops", ("TFLOPS",), positive=True),
    "mfu": _rule("mfu"),
    "num_parameters": _rule("num_parameters"),
}
DERIVATIONS = {"time_per_sample_us": "1e6 / time_per_sample_us"}
TRAIN_TIME = re.compile(r"^train_time_(\d+)_epochs_s$")
PER_EPOCH_TARGETS = {r.target for r in METRICS.values() if r.per_epoch}

PRECISIONS = {
    "fp32": "fp32", "tf32": "tf32",
    "amp_fp16": "mixed_fp16", "mixed_fp16": "mixed_fp16", "mixed_float16": "mixed_fp16",
    "amp_bf16": "mixed_bf16", "mixed_bf16": "mixed_bf16", "mixed_bfloat16": "mixed_bf16",
}
# Published models trainbench has no YAML for (yet): imported under these names, which a future
# conf/model/ file should use too.
EXTERNAL_MODELS = {"distilbert": "text", "bert_large": "text"}
# Accelerator strings whose NVML name (what a local run's hw.gpu / hw.label says) is known.
NVML_NAMES = {
    "NVIDIA A100 80GB SXM4": "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB": "NVIDIA A100-SXM4-80GB",  # DGX A100: every GPU is the SXM4 module
    "NVIDIA Tesla K80": "Tesla K80",
    "NVIDIA Tesla P100": "Tesla P100-PCIE-16GB",  # Kaggle's P100
}
APPLE = re.compile(r"^(Apple M\d+(?: Pro| Max| Ultra)?)(?:\s+(\d+)-core)?(?:\s+(GPU|CPU))?$")
NVIDIA = re.compile(r"nvidia|tesla|geforce|quadro|\brtx\b|\b[AHLTV]\d{2,3}\b", re.IGNORECASE)


class BadReferences(ValueError):
    """A CSV the importer refuses. str() is the one line shown to the user."""


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
        content = {"params": self.params, "tags": self.tags, "metrics": sorted(self.metrics)}
        return _digest(content)


@dataclass(frozen=True)
class ImportSummary:
    created: int
    replaced: int
    unchanged: int


# ---------------------------------------------------------------------------------------------- reading


def read(path: Path) -> list[ReferenceRun]:
    """Validate every row of the CSV, then group them into reference runs. Raises BadReferences."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as error:
        raise BadReferences(f"cannot read {path}: {error.strerror or error}") from None
    with handle:
        reader = csv.DictReader(handle, restkey="(extra)")
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise BadReferences(f"{path} line 1: missing column(s) {', '.join(missing)}; "
                                f"the header must be {','.join(COLUMNS)}")
        cells: dict[tuple[str, ...], list[tuple[int, dict[str, str]]]] = {}
        errors: list[str] = []
        for row in reader:
            line = reader.line_num
            if not any((v or "").strip() for k, v in row.items() if k != "(extra)"):
                continue  # a blank line
            clean = {k: (row.get(k) or "").strip() for k in COLUMNS}
            problem = _row_problem(row, clean)
            if problem:
                errors.append(f"line {line}: {problem}")
                continue
            cells.setdefault(tuple(clean[k] for k in IDENTITY), []).append((line, clean))
    runs: list[ReferenceRun] = []
    if not errors:
        for rows in cells.values():
            try:
                runs.append(_reference_run(rows))
            except BadReferences as error:
                errors.append(str(error))
    if errors:
        more = f" (and {len(errors) - 1} more bad row(s))" if len(errors) > 1 else ""
        raise BadReferences(f"{path} {errors[0]}{more}; nothing was imported")
    if not runs:
        raise BadReferences(f"{path} has no rows; nothing was imported")
    return runs


def _row_problem(row: dict[str, Any], clean: dict[str, str]) -> str | None:
    if row.get("(extra)"):
        return f"more fields than the {len(COLUMNS)} columns (an unquoted comma in a value?)"
    for key in REQUIRED:
        if not clean[key]:
            return f"`{key}` is empty; it is required"
    if clean["device_kind"] not in ("cpu", "gpu"):
        return _bad("device_kind", clean["device_kind"], "choose one of cpu, gpu")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", clean["framework"].lower()):
        return _bad("framework", clean["framework"], "a framework name such as pytorch or tensorflow")
    batch = clean["batch_size"]
    if (batch or clean["model"] != "matmul") and (not batch.isdigit() or int(batch) < 1):
        return _bad("batch_size", batch, "must be a whole number >= 1 (blank only for model matmul)")
    if clean["epoch"] and (not clean["epoch"].isdigit() or int(clean["epoch"]) < 1):
        return _bad("epoch", clean["epoch"], "must be blank or a whole number >= 1")
    precision = clean["precision"].lower().removesuffix("+xla")
    if precision not in PRECISIONS:
        return _bad("precision", clean["precision"], f"choose one of {', '.join(PRECISIONS)} (optionally +xla)")
    rule = _metric_rule(clean["metric"])
    if rule is None:
        known = ", ".join([*METRICS, "train_time_<N>_epochs_s"])
        return _bad("metric", clean["metric"], f"choose one of {known}")
    try:
        value = float(clean["value"])
    except ValueError:
        return _bad("value", clean["value"], "must be a number")
    if not math.isfinite(value) or (rule.positive and value <= 0):
        return _bad("value", clean["value"], "must be a finite number" + (" > 0" if rule.positive else ""))
    if clean["unit"] and clean["unit"].lower() not in {u.lower() for u in rule.units if u}:
        allowed = ", ".join(u for u in rule.units if u) or "none (leave it blank)"
        return _bad("unit", clean["unit"], f"metric {clean['metric']} takes {allowed}")
    if clean["device_kind"] == "gpu":
        try:
            _backend(clean)
        except BadReferences as error:
            return str(error)
    return None


def _bad(key: str, value: str, expected: str) -> str:
    return f"`{key}`={value!r} is not valid: {expected}"


def _metric_rule(name: str) -> MetricRule | None:
    if name in METRICS:
        return METRICS[name]
    if TRAIN_TIME.match(name):
        return _rule("total_time_s", ("s",), positive=True)
    return None


# ------------------------------------------------------------------------------------------- mapping


def _reference_run(rows: list[tuple[int, dict[str, str]]]) -> ReferenceRun:
    lines = [line for line, _ in rows]
    first = rows[0][1]
    backend = _backend(first)
    model, model_params, task = map_model(first["model"])
    data, data_params = map_dataset(first["dataset"])
    precision = PRECISIONS[first["precision"].lower().removesuffix("+xla")]
    framework = first["framework"].lower()

    metrics: dict[tuple[str, int], tuple[float, int]] = {}  # (target, step) -> (value, line)
    units: dict[str, str] = {}  # CSV metric -> its unit, as published
    derived: dict[str, str] = {}  # schema metric -> how it was computed from the published one
    epochs: int | None = None
    for line, row in rows:
        rule = _metric_rule(row["metric"])
        assert rule is not None  # validated
        value = float(row["value"])
        value = rule.convert(value) if rule.convert else value
        step = (int(row["epoch"]) if row["epoch"] else 1) if rule.per_epoch else 0
        if rule.per_epoch:
            epochs = max(epochs or 0, step)
        trained = TRAIN_TIME.match(row["metric"])
        if trained:
            epochs = int(trained.group(1))
        if (rule.target, step) in metrics:
            earlier = metrics[(rule.target, step)][1]
            raise BadReferences(f"line {line}: gives {rule.target}" + (f" of epoch {step}" if step else "")
                                + f" again for the same reference cell as line {earlier}")
        metrics[(rule.target, step)] = (value, line)
        if row["unit"]:
            units[row["metric"]] = row["unit"]
        if rule.convert:
            derived[rule.target] = DERIVATIONS.get(row["metric"], row["metric"])

    targets = {target for target, _ in metrics}
    if task is None:
        trained_run = targets & PER_EPOCH_TARGETS or any(TRAIN_TIME.match(r["metric"]) for _, r in rows)
        task = "matmul" if targets & {"peak_tflops", "tflops"} and "samples_per_s" not in targets else (
            "train" if trained_run else "benchmark")
    batch_size = int(first["batch_size"]) if first["batch_size"] else None

    params: dict[str, Any] = {
        "framework.name": framework,
        "device.name": first["device_kind"],
        "model.name": model,
        **model_params,
        "data.name": data,
        **data_params,
        "task.name": task,
        "precision.name": precision,
    }
    if batch_size is not None:
        params["batch_size"] = batch_size
    if task == "train" and epochs:
        params["epochs"] = epochs
    if first["precision"].lower().endswith("+xla"):
        params["compile"] = True

    citations = _unique(r["reference"] for _, r in rows)
    notes = _unique(r["notes"] for _, r in rows if r["notes"])
    citation = "; ".join(citations) + (f"{NOTES_SEPARATOR}{'; '.join(notes)}" if notes else "")
    tags = {
        "trainbench.kind": "reference",
        "trainbench.outcome": "finished",
        "trainbench.framework": framework,
        "trainbench.framework_version": first["framework_version"] or None,
        "trainbench.device": first["device_kind"],
        "trainbench.backend": backend,
        "trainbench.task": task,
        "trainbench.model": model,
        "trainbench.data": data,
        "trainbench.batch_size": batch_size,
        "trainbench.precision": precision,
        **hardware_tags(first["accelerator"], first["system"], backend),
        "reference.source": first["source"],
        "reference.citation": citation,
        # the CSV's own words, for whoever traces a figure back to its source
        "reference.system": first["system"],
        "reference.accelerator": first["accelerator"],
        "reference.model": first["model"],
        "reference.dataset": first["dataset"],
        "reference.precision": first["precision"],
        "reference.units": ", ".join(f"{k}={v}" for k, v in sorted(units.items())) or None,
        "reference.derived": "; ".join(f"{k} = {v}" for k, v in sorted(derived.items())) or None,
        "mlflow.note.content": citation,
    }
    identity = [first[k] for k in IDENTITY]
    key = _digest(identity)
    tags = {k: str(v) for k, v in tags.items() if v is not None}
    if task == "matmul":  # as tracking.run_name names a matmul cell
        tags["trainbench.matmul_shape"] = str(params.get("task.shape", "square"))
        name = f"{framework}-matmul_{tags['trainbench.matmul_shape']}-{backend}-{precision}"
    else:
        name = f"{framework}-{model}-{backend}-bs{batch_size}"
    run = ReferenceRun(key=key, name=name, params=params, tags=tags, lines=lines,
                       metrics=[(target, value, step) for (target, step), (value, _) in metrics.items()])
    run.tags["reference.key"] = key
    return run


def map_model(name: str) -> tuple[str, dict[str, Any], str | None]:
    """A published model name -> (trainbench model name, model.* params, task when the name fixes it)."""
    deep = re.fullmatch(r"mlp_depth(\d+)_(\d+)", name)
    if deep:  # depth x Dense(width): trainbench's mlp_deep
        return "mlp_deep", {"model.depth": int(deep.group(1)), "model.width": int(deep.group(2))}, None
    shaped = re.fullmatch(r"mlp((?:_\d+)+)", name)
    if shaped:  # mlp_3000_1000: Dense(3000)-Dense(1000): trainbench's mlp with those hidden sizes
        return "mlp", {"model.hidden_sizes": [int(s) for s in shaped.group(1).strip("_").split("_")]}, None
    if name == "matmul":  # the matmul task: no model (local matmul cells name theirs by task.shape)
        return "matmul", {"task.shape": "square"}, "matmul"
    if name in EXTERNAL_MODELS:
        return name, {"model.input": EXTERNAL_MODELS[name]}, None
    return name, {}, None  # trainbench's own names (resnet50, vgg16, ...) and a user's own models


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


def _backend(row: dict[str, str]) -> str:
    """What ran, as a local run's trainbench.backend would say."""
    if row["device_kind"] == "cpu":
        return "cpu"
    accelerator = row["accelerator"]
    if "(mps)" in accelerator.lower():
        return "mps"
    if "metal" in accelerator.lower():
        return "metal"
    if accelerator.startswith("Apple"):
        return "mps" if row["framework"].lower() == "pytorch" else "metal"
    if NVIDIA.search(accelerator):
        return "cuda"
    raise BadReferences(_bad("accelerator", accelerator,
                             "a gpu row must name an NVIDIA or Apple GPU (cuda, mps and metal are the backends)"))


def hardware_tags(accelerator: str, system: str, backend: str) -> dict[str, Any]:
    """hw.* tags, with the hw.label a local run on that hardware gets (trainbench.hardware.label)."""
    from trainbench.hardware import short_cpu_name

    name = re.sub(r"\s*\([^)]*\)\s*$", "", accelerator).strip()  # "(tensorflow-metal)", "(AVX2 ...)"
    apple = APPLE.fullmatch(name)
    if apple:
        chip, cores = apple.group(1), apple.group(2)
        on_gpu = backend in ("mps", "metal")
        memory = re.search(r"(\d+)\s*GB\b", system)  # unified memory, when the system names it
        return {
            "hw.label": f"{chip} {'GPU' if on_gpu else 'CPU'}",
            "hw.chip": chip,
            "hw.cpu": chip,
            "hw.machine": "arm64",
            "hw.gpu": chip,  # what a local Mac's hw.gpu says (ioreg's model: the chip)
            "hw.gpu_cores": cores if on_gpu else None,
            "hw.cpu_cores": cores if not on_gpu else None,
            "hw.memory_gb": memory.group(1) if memory else None,
        }
    if backend == "cuda":
        gpu = NVML_NAMES.get(name, name)
        memory = re.search(r"(\d+)\s*GB", gpu)
        return {"hw.label": gpu, "hw.gpu": gpu, "hw.gpu_memory_gb": memory.group(1) if memory else None}
    return {"hw.label": short_cpu_name(name), "hw.cpu": name}


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------- writing


def all_runs(client: Any, experiment_ids: list[str], filter_string: str = "") -> list[Any]:
    """Every active run matching the filter, all pages."""
    found: list[Any] = []
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=1000, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


def write(runs: list[ReferenceRun], client: Any, experiment_id: str) -> ImportSummary:
    """Create each reference run unless an identical one exists; replace (delete, create) a changed one."""
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    existing: dict[str, list[Any]] = {}
    for old in all_runs(client, [experiment_id], "tags.`trainbench.kind` = 'reference'"):
        existing.setdefault(old.data.tags.get("reference.key", ""), []).append(old)
    created = replaced = unchanged = 0
    for run in runs:
        content_hash = run.content_hash
        previous = existing.get(run.key, [])
        if len(previous) == 1 and previous[0].data.tags.get("reference.content_hash") == content_hash:
            unchanged += 1
            continue
        for old in previous:
            client.delete_run(old.info.run_id)
        replaced += bool(previous)
        created += not previous
        new = client.create_run(experiment_id, run_name=run.name,
                                tags={**run.tags, "reference.content_hash": content_hash})
        now = get_current_time_millis()
        client.log_batch(
            new.info.run_id,
            metrics=[Metric(name, value, now, step) for name, value, step in run.metrics],
            params=tracking.params_of(run.params),
        )
        # trainbench.outcome=finished is among the tags already: tracking.close would only write it again.
        client.set_terminated(new.info.run_id, tracking.RUN_STATUS["finished"])
    return ImportSummary(created, replaced, unchanged)


# ----------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python src/references.py",
        description="Import published (or your own) training-speed figures into MLflow as reference runs.",
    )
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV,
                        help="figures to import, one per row (default: references/published-results.csv)")
    parser.add_argument("--experiment", default="trainbench", help="MLflow experiment (default: trainbench)")
    parser.add_argument("--dry-run", action="store_true", help="validate and list the runs; write nothing")
    args = parser.parse_args(argv)
    try:
        runs = read(args.csv)
        for note in _model_notes(runs):
            print(f"note: {note}", file=sys.stderr)
        if args.dry_run:
            for run in runs:
                print(f"{run.name:40s} {run.tags['hw.label']:28s} lines {_spans(run.lines)}")
            print(f"{len(runs)} reference runs from {args.csv} are valid; nothing written (--dry-run)")
            return EXIT_OK
        uri = tracking.resolve_tracking_uri(None)
        client = tracking.connect(uri)
        summary = write(runs, client, tracking.experiment_id(client, args.experiment, uri))
    except (BadReferences, tracking.TrackingUnavailable) as error:
        print(f"trainbench: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(runs)} reference runs from {args.csv}: {summary.created} created, {summary.replaced} replaced, "
          f"{summary.unchanged} unchanged (experiment {args.experiment}, {uri})")
    return EXIT_OK


def _model_notes(runs: list[ReferenceRun]) -> list[str]:
    known = set(choices("model")) | set(EXTERNAL_MODELS) | {"matmul"}
    unknown = sorted({r.tags["trainbench.model"] for r in runs} - known)
    return [f"model `{m}` has no conf/model/{m}.yaml; imported under that name" for m in unknown]


def _spans(lines: list[int]) -> str:
    return ",".join(map(str, lines))
