"""Runs read back: every page of a search (`search_all`), a run's setting in words, and the link that opens runs in
the UI. A run's name is trainbench.store.run_naming's.

Which runs measured the same quantity is trainbench.store.setting's answer (the whole config, less what is
speed-neutral or compared); the tags here say the main quantities of a setting in words, for tables, plots
and the UI's columns, as each task declares them. Used by the report, the reference importer, export and import,
and the sweep's summary (the UI link).
Light on purpose: the parent process imports it, so MLflow is imported only inside the functions that
talk to a store, and no deep-learning framework ever.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from trainbench.store.setting import FULL_SPLITS, normal

# ----------------------------------------------------------------------------------------------- listing

PAGE_SIZE = 1000  # MLflow's own maximum per search request


def search_all(
    client: Any, experiment_ids: list[str], filter_string: str = "", order_by: list[str] | None = None
) -> list[Any]:
    """Every active run matching the filter, all pages (one search_runs call stops at 1000 runs)."""
    found: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            experiment_ids, filter_string, max_results=PAGE_SIZE, order_by=order_by, page_token=token
        )
        found.extend(page)
        token = page.token
        if not token:
            return found


# ------------------------------------------------------------------------------------------------ naming


# ------------------------------------------------------------------------------------- settings in words

# The main quantities of a setting, as tags every cell and reference run carries: what tables and plots
# print of a row, and what the UI can filter on. (Two runs share a row only when their whole settings are
# equal: trainbench.store.setting.)
SETTING_TAGS = (
    "trainbench.task",
    "trainbench.model",
    "trainbench.data",
    "trainbench.image_size",  # image data: pixels per side
    "trainbench.seq_len",  # text data: tokens per sequence
    "trainbench.samples_per_epoch",  # train task
    "trainbench.epochs",  # train task
    "trainbench.precision",
    "trainbench.batch_size",
    "trainbench.compile",
    "trainbench.channels_last",
    "trainbench.optimize",  # none | fast
    "trainbench.pipeline",  # device (data resident on the device) | loader (host input pipeline with workers)
    "trainbench.timed_region",  # steps | epoch | fit | build_fit
    "trainbench.num_devices",
    "trainbench.matmul_shape",  # matmul task
)
# What a missing tag means: runs recorded before the tag existed ran this way.
TAG_DEFAULTS = {
    "trainbench.compile": "false",
    "trainbench.channels_last": "false",
    "trainbench.optimize": "none",
    "trainbench.pipeline": "device",
    "trainbench.num_devices": "1",
}
# What a model gives a setting: none of it applies to a task that uses no model.
MODEL_TAGS = frozenset(
    {
        "trainbench.model",
        "trainbench.data",
        "trainbench.image_size",
        "trainbench.seq_len",
        "trainbench.batch_size",
        "trainbench.compile",
        "trainbench.channels_last",
        "trainbench.optimize",
        "trainbench.pipeline",
    }
)


def _tasks() -> dict[str, Any]:
    """The tasks this install has, by name."""
    import trainbench.tasks.shipped  # noqa: F401  (registers each shipped task)
    from trainbench.config.registry import SCHEMAS

    return SCHEMAS.get("task", {})


def task_kind(name: str) -> Any:
    """The task config class named `name`, which declares how its runs show (TaskConfig.uses_model,
    setting_tags, headline, timed_region); a task this install does not have shows as a model's task."""
    from trainbench.config.schema import TaskConfig

    return _tasks().get(name, TaskConfig)


def setting_tags() -> tuple[str, ...]:
    """SETTING_TAGS and those a task declares (TaskConfig.setting_tags) beyond them."""
    declared = {tag for cls in _tasks().values() for tag in cls.setting_tags}
    return SETTING_TAGS + tuple(sorted(declared - set(SETTING_TAGS)))


def not_applicable(task: str) -> set[str]:
    """Tags that do not apply to a task: blank in its key, so that e.g. two benchmark cells with different
    data.num_samples (unused by the benchmark) still compare: other tasks' own tags, and a model's when it
    uses none."""
    if task not in _tasks():
        return set()  # a task this install does not have: all its tags are shown as recorded
    kind = task_kind(task)
    others = {tag for cls in _tasks().values() for tag in cls.setting_tags} - set(kind.setting_tags)
    return others | (set() if kind.uses_model else set(MODEL_TAGS))


def default_timed_region(task: str) -> str:
    """What a run recorded before trainbench.timed_region existed timed: its task's (default) timed region."""
    from dataclasses import MISSING, fields

    if task not in _tasks():
        return UNKNOWN
    kind = task_kind(task)
    field = next((f for f in fields(kind) if f.name == "timed_region"), None)  # a setting of some tasks
    return field.default if field is not None and field.default is not MISSING else kind.timed_region


UNKNOWN = "?"  # an old run that recorded neither the tag nor a param it could be read from
# Training-set sizes of the real datasets, for old runs with data.num_samples=null (all of it).
FULL_TRAIN_SIZES = {name: splits[0] for name, splits in FULL_SPLITS.items()}


def comparison_settings(tags: Mapping[str, str], params: Mapping[str, str] | None = None) -> dict[str, str]:
    """The setting tags of a run, each normalised: defaults for missing tags, blank where the tag does
    not apply to the run (a benchmark has no epochs, text no image size), and (with `params`) the settings
    older runs recorded only as params."""
    params = params or {}
    task = tags.get("trainbench.task") or params.get("task.name") or UNKNOWN
    text = "trainbench.seq_len" in tags or params.get("data.input") == "text"
    unused = not_applicable(task) | {"trainbench.image_size" if text else "trainbench.seq_len"}
    settings: dict[str, str] = {}
    for key in setting_tags():
        value = tags.get(key) or _from_params(key, params) or _default(key, task)
        settings[key] = "" if key in unused else normal(value)
    return settings


def model_variant(params: Mapping[str, str]) -> str:
    """The model's shape: `depth 5 x 1024`, `hidden [3000, 1000]`, or empty (a library model's name says it)."""
    depth, width = params.get("model.depth"), params.get("model.width")
    if depth not in (None, "", "null", "None"):
        return f"depth {depth} x {width}"
    hidden = params.get("model.hidden_sizes")
    return f"hidden {hidden}" if hidden not in (None, "", "[]", "null", "None") else ""


SETTING_NAME_TAG = "trainbench.setting_name"  # the setting in words: what the runs table groups by


def setting_name(tags: Mapping[str, str], params: Mapping[str, str]) -> str:
    """The run's setting in words, the same on every machine that ran it: "mlp train, hidden [3000, 1000],
    synthetic 32 px, 8192 x 3 epochs, bs64, fp32, timed: epoch" (a matmul: "matmul 4096, bf16, timed: steps")."""
    s = comparison_settings(tags, params)
    task = s["trainbench.task"]
    if not task_kind(task).uses_model:
        parts = [" ".join([task, *(s[tag] for tag in task_kind(task).setting_tags)])]
    else:
        parts = [f"{s['trainbench.model']} {task}", model_variant(params)]
        size = (
            f" {s['trainbench.image_size']} px"
            if s["trainbench.image_size"]
            else (f" {s['trainbench.seq_len']} tokens" if s["trainbench.seq_len"] else "")
        )
        parts.append(f"{s['trainbench.data']}{size}")
    if s["trainbench.samples_per_epoch"]:  # blank for every task but train
        parts.append(f"{s['trainbench.samples_per_epoch']} x {s['trainbench.epochs']} epochs")
    if s["trainbench.batch_size"]:
        parts.append(f"bs{s['trainbench.batch_size']}")
    parts += [s["trainbench.precision"], f"timed: {s['trainbench.timed_region']}", *flags(s, applied=False)]
    return ", ".join(p for p in [*parts, threads_text(params)] if p)


def threads_text(params: Mapping[str, str]) -> str:
    """The thread-count variables a run was started with (params threads.*), part of its setting: "threads
    OMP_NUM_THREADS=1"; blank for the frameworks' own defaults. Two settings that differ only here read apart."""
    named = [
        f"{key.removeprefix('threads.')}={value}" for key, value in sorted(params.items()) if key.startswith("threads.")
    ]
    return f"threads {' '.join(named)}" if named else ""


def flags(settings: Mapping[str, str], applied: bool = True) -> list[str]:
    """The settings that differ from the plain run, in words. `applied=False` leaves out what a framework
    applied of its own (compile, channels_last): the same setting shows them in one framework's runs only."""
    out = []
    if applied and settings["trainbench.compile"] == "true":
        out.append("compile")
    if settings["trainbench.optimize"] not in ("none", ""):
        out.append(f"optimize={settings['trainbench.optimize']}")
    if applied and settings["trainbench.channels_last"] == "true":
        out.append("channels_last")
    if settings["trainbench.pipeline"] not in ("device", ""):
        out.append(f"{settings['trainbench.pipeline']} pipeline")
    if settings["trainbench.num_devices"] not in ("1", ""):
        out.append(f"{settings['trainbench.num_devices']} devices")
    return out


def tag_setting_name(client: Any, run_id: str) -> None:
    """Write the run's setting in words (SETTING_NAME_TAG) from what it recorded."""
    run = client.get_run(run_id)
    client.set_tag(run_id, SETTING_NAME_TAG, setting_name(run.data.tags, run.data.params))


# Tags whose value is a param of the resolved config, under another name.
SAME_AS_PARAM = {
    "trainbench.task": "task.name",
    "trainbench.model": "model.name",
    "trainbench.data": "data.name",
    "trainbench.precision": "precision.name",
    "trainbench.batch_size": "batch_size",
    "trainbench.matmul_shape": "task.shape",
    "trainbench.compile": "compile",
    "trainbench.channels_last": "channels_last",
}


def _from_params(key: str, params: Mapping[str, str]) -> str | None:
    """What a run recorded before the tag existed."""
    if key in SAME_AS_PARAM:
        return params.get(SAME_AS_PARAM[key])
    if key in ("trainbench.image_size", "trainbench.seq_len"):
        return params.get(key.replace("trainbench.", "data."))
    if key == "trainbench.epochs":
        return params.get("task.epochs") or params.get("epochs")
    if key == "trainbench.samples_per_epoch":
        samples = params.get("data.num_samples")
        if samples not in (None, "", "null", "None"):
            return samples
        full = FULL_TRAIN_SIZES.get(params.get("data.name", ""))
        return str(full) if full else None
    return None


def _default(key: str, task: str) -> str:
    if key == "trainbench.timed_region":
        return default_timed_region(task)
    return TAG_DEFAULTS.get(key, UNKNOWN)


# -------------------------------------------------------------------------------------------------- UI

LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store by default
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # MLflow's saved ("shared") views: experiment tag + viewStateShareKey
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
# Without a kind, MLflow 3 may open an experiment on its GenAI pages; this one is model training.
EXPERIMENT_KIND = "custom_model_development"
UI_COLUMNS = (
    "metrics.`samples_per_s`",
    "tags.`hw.label`",
    "tags.`trainbench.kind`",  # cell or reference
    "tags.`trainbench.model`",
    "tags.`trainbench.precision`",
    "tags.`trainbench.batch_size`",
    "tags.`trainbench.setting_name`",  # the setting in words: sort or filter on it to group runs by setting
)
# The runs table applies saved widths only to the columns of a saved order, so the view saves both; the
# first three are the table's own (run name, start time, duration), kept in front.
UI_COLUMN_ORDER = ("attributes.`Run Name`", "runDateAndNestInfo", "duration", *UI_COLUMNS)
# Wide enough for a whole hw.label ("NVIDIA A100-SXM4-80GB", "Apple M1 Max GPU") and a throughput.
UI_COLUMN_WIDTHS = {"tags.`hw.label`": 210, "metrics.`samples_per_s`": 120, "attributes.`Run Name`": 240}
COMPARED_RUNS = (
    "tags.`trainbench.outcome` = 'finished' AND tags.`trainbench.kind` != 'sweep' "
    "AND tags.`trainbench.kind` != 'report' AND tags.`trainbench.kind` != 'mlflow_run'"
)


def ui_url(
    tracking_uri: str, experiment_id: str, *, sweep_run_id: str | None = None, ui_base: str | None = None
) -> str:
    """The URL of the experiment's runs table, filtered to the compared runs (a sweep's cells, or every
    finished cell and reference run), fastest first, with hw.label and samples_per_s among the first columns.

    MLflow 3.17's runs view takes only the filter and the order from URL parameters; the columns come
    from a saved view: an experiment tag `mlflow.sharedViewState.<key>` holding the view as JSON, opened
    by `?viewStateShareKey=<key>`. This writes that tag (and the experiment's kind, so the UI lands on runs
    rather than on its GenAI pages), then returns the URL. `ui_base`: where the UI is served; default the
    tracking server itself, or `mlflow ui`'s http://127.0.0.1:5000 for a local store.
    """
    from trainbench.store import tracking

    client = tracking.client(tracking_uri)
    state = view_state(sweep_run_id)
    key = "trainbench-" + hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:12]
    client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + key, json.dumps(state))
    if not client.get_experiment(experiment_id).tags.get(EXPERIMENT_KIND_TAG):
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    base = ui_base or (tracking_uri if tracking_uri.startswith(("http://", "https://")) else LOCAL_UI)
    return f"{base.rstrip('/')}/#/experiments/{quote(experiment_id)}/runs?viewStateShareKey={key}"


def view_state(sweep_run_id: str | None = None) -> dict[str, Any]:
    """The saved view: search facets and UI state, in the names MLflow's runs view uses."""
    search = f"tags.`mlflow.parentRunId` = '{sweep_run_id}'" if sweep_run_id else COMPARED_RUNS
    return {
        "searchFilter": search,
        "orderByKey": "metrics.`samples_per_s`",
        "orderByAsc": False,
        "selectedColumns": list(UI_COLUMNS),
        "columnOrder": list(UI_COLUMN_ORDER),
        "columnWidths": UI_COLUMN_WIDTHS,
    }
