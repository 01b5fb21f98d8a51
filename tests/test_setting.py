"""Like with like by construction: a run's comparison setting is its whole config less a short, documented
list of speed-neutral fields and what is compared (the framework, the device asked for); the machine is named
by what changes its speed. Compose-time tests: real configs through Hydra's compose API, no store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainbench import hardware
from trainbench.config import params
from trainbench.config.compose import cells_for
from trainbench.config.plugins import SCHEMAS
from trainbench.report.comparison import build_tables
from trainbench.report.selection import Selection, entry
from trainbench.setting import (
    SPEED_NEUTRAL,
    compared,
    differences,
    framework_knobs,
    neutral,
    release,
    setting,
    setting_id,
)
from trainbench.sources import Found

# One cell of every kind of choice: MLP / vision / transformer models, real and synthetic data, each task.
CELLS = [
    [],
    ["model=resnet50", "data=synthetic_imagenet", "task=benchmark", "optim=adam"],
    ["model=distilbert", "data=synthetic_text", "task=inference", "optimize=fast"],
    ["task=matmul", "precision=mixed_bf16"],
    ["+experiment=m1_tensorflow_blog", "device=cpu"],
    ["+experiment=pytorch_mps_study", "model=vgg16", "batch_size=4", "device=gpu", "cell.cpus=4"],
]


def recorded_params(*overrides: str) -> dict[str, str]:
    """The params a cell of these overrides records (the prepared cell, as the runner logs it)."""
    (cell,) = cells_for(list(overrides))
    return {key: str(value) for key, value in params(cell.task.prepared(cell)).items()}


def another(value: str) -> str:
    """A different value of the same kind: what a user could set instead."""
    if value in ("True", "False"):
        return str(value == "False")
    try:
        return str(float(value) * 2 + 1)
    except ValueError:
        return value + "x"


@pytest.mark.parametrize("overrides", CELLS, ids=lambda o: " ".join(o) or "defaults")
def test_every_config_field_outside_the_speed_neutral_list_splits_rows(overrides: list[str]) -> None:
    recorded = recorded_params(*overrides)
    base = setting(recorded, {})
    for key, value in recorded.items():
        changed = setting({**recorded, key: another(value)}, {})
        if neutral(key) or compared(key):
            assert changed == base, f"{key} is speed-neutral or compared, yet it split the setting"
        else:
            assert changed != base, f"{key}={value} -> {another(value)} did not split the setting"
    # A field a future version adds (not listed as speed-neutral) splits rows too.
    assert setting({**recorded, "optim.new_knob": "1"}, {}) != base


def test_the_speed_neutral_list_names_only_real_fields_each_with_a_reason() -> None:
    fields = {
        f"{group}.{field.name}"
        for group, kinds in SCHEMAS.items()
        for cls in kinds.values()
        for field in dataclasses.fields(cls)
    } | {"seed"}
    from trainbench.config.schema import CellLimits

    fields |= {f"cell.{f.name}" for f in dataclasses.fields(CellLimits)}
    fields |= {"debug.inject_fault", "debug.fault_rank"}  # no longer settings, but runs recorded before carry them
    assert set(SPEED_NEUTRAL) <= fields, set(SPEED_NEUTRAL) - fields
    assert all(len(why) > 20 for why in SPEED_NEUTRAL.values())


def test_what_runs_decide_while_running_is_part_of_the_setting() -> None:
    recorded = recorded_params("batch_size=max", "task=benchmark")
    assert setting(recorded, {"trainbench.batch_size": "512"}) != setting(recorded, {"trainbench.batch_size": "256"})
    assert setting(recorded, {"trainbench.batch_size": "512"})["batch_size"] == "512"
    everything = recorded_params("device.count=all", "task=benchmark")
    assert setting(everything, {"trainbench.num_devices": "8"})["device.count"] == "8"
    # A real dataset's null sample count is all of it: the count a cell logs when it loads the files.
    blog = recorded_params("+experiment=m1_tensorflow_blog", "device=cpu")
    assert "data.num_samples" not in blog
    loaded = {**blog, "data.num_samples": "50000", "data.num_val_samples": "10000"}
    assert setting(blog, {}) == setting(loaded, {})


def test_sgd_and_adam_are_two_rows_with_what_tells_them_apart() -> None:
    """Once shown as one cell "143.7 (median of 2 runs)": SGD 169.3 and Adam 118.1 samples/s."""
    runs = [
        _run("sgd", recorded_params("optim=sgd", "data.num_samples=256"), 169.3),
        _run("adam", recorded_params("optim=adam", "data.num_samples=256"), 118.1),
    ]
    entries = [entry(Found(run, None), mine={"Intel Xeon CPU (2 cores)"}, histories=False) for run in runs]
    (table,) = build_tables(entries, None, [])
    assert len(table.rows) == 2
    assert sorted(row.distinct for row in table.rows) == ["optim=adam", "optim=sgd"]
    assert sorted(next(iter(row.cells.values())).value for row in table.rows) == [118.1, 169.3]


def test_differences_name_a_choice_not_the_fields_it_brings() -> None:
    sgd, adam = recorded_params("optim=sgd"), recorded_params("optim=adam")
    assert differences([setting(sgd, {}), setting(adam, {})]) == ["optim.name"]
    fast = recorded_params("optim=sgd", "optim.lr=0.1")
    assert differences([setting(sgd, {}), setting(fast, {})]) == ["optim.lr"]


def test_a_setting_id_is_the_same_wherever_it_is_computed() -> None:
    assert setting_id(setting(recorded_params(), {})) == setting_id(setting(recorded_params(), {}))
    assert setting_id(setting(recorded_params(), {})) != setting_id(
        setting(recorded_params("seed=1", "optim=adam"), {})
    )


@pytest.mark.parametrize(
    ("backend", "tags", "label"),
    [
        ("mps", {"hw.chip": "Apple M1 Max", "hw.gpu_cores": "24"}, "Apple M1 Max GPU (24 cores)"),
        ("mps", {"hw.chip": "Apple M1 Max", "hw.gpu_cores": "32"}, "Apple M1 Max GPU (32 cores)"),
        ("metal", {"hw.chip": "Apple M1 Max"}, "Apple M1 Max GPU (cores unknown)"),
        ("cpu", {"hw.chip": "Apple M1 Pro", "hw.cpu_cores": "8"}, "Apple M1 Pro CPU (8 cores)"),
        ("cpu", {"hw.cpu": "AMD EPYC 7763 64-Core Processor", "hw.cpu_cores": "64"}, "AMD EPYC 7763 CPU (64 cores)"),
        (
            "cpu",
            {
                "hw.cpu": "AMD EPYC 7763 64-Core Processor",
                "hw.cpu_cores": "1",
                "hw.cpu_logical": "2",
                "hw.virtualized": "kvm",
            },
            "AMD EPYC 7763 CPU (2 vCPUs)",
        ),
        ("cpu", {"hw.cpu": "Intel(R) Xeon(R) Processor", "hw.virtualized": "docker"}, "Intel Xeon CPU (cores unknown)"),
        ("cuda", {"hw.gpu": "NVIDIA H100 80GB HBM3", "hw.gpu_memory_gb": "79.6"}, "NVIDIA H100 80GB HBM3"),
        ("cuda", {"hw.gpu": "NVIDIA GeForce RTX 3090", "hw.gpu_memory_gb": "24.0"}, "NVIDIA GeForce RTX 3090 (24 GB)"),
        ("cuda", {"hw.gpu": "NVIDIA H200", "hw.gpu_memory_gb": "140.4"}, "NVIDIA H200 (141 GB)"),
        ("cuda", {"hw.gpu": "NVIDIA A100"}, "NVIDIA A100 (memory unknown)"),
    ],
)
def test_the_machine_is_named_by_what_changes_its_speed(backend: str, tags: dict[str, str], label: str) -> None:
    assert hardware.label(backend, tags) == label
    assert hardware.run_label({**tags, "trainbench.backend": backend}) == label


def test_machines_that_differ_in_cores_never_share_a_column() -> None:
    """A 24- and a 32-core M1 Max, a 2-vCPU VM and a 64-core EPYC: columns apart, and resume tells them apart."""
    m1 = {"hw.chip": "Apple M1 Max", "hw.gpu": "Apple M1 Max", "hw.gpu_vendor": "apple"}
    assert hardware.labels_for("gpu", {**m1, "hw.gpu_cores": "24"}) != hardware.labels_for(
        "gpu", {**m1, "hw.gpu_cores": "32"}
    )
    recorded = recorded_params()
    runs = [
        _run(name, recorded, value, **tags)
        for name, value, tags in (
            (
                "vm",
                900.0,
                {"hw.cpu": "AMD EPYC 7763 64-Core Processor", "hw.cpu_logical": "2", "hw.virtualized": "kvm"},
            ),
            ("metal", 20000.0, {"hw.cpu": "AMD EPYC 7763 64-Core Processor", "hw.cpu_cores": "64"}),
            ("old", 950.0, {"hw.cpu": "AMD EPYC 7763 64-Core Processor", "hw.cpu_cores": ""}),  # no count recorded
        )
    ]
    (table,) = build_tables([entry(Found(r, None), histories=False) for r in runs], None, [])
    assert [len(row.cells) for row in table.rows] == [3]
    assert sorted(c.hw_label for c in table.columns) == [
        "AMD EPYC 7763 CPU (2 vCPUs)",
        "AMD EPYC 7763 CPU (64 cores)",
        "AMD EPYC 7763 CPU (cores unknown)",
    ]


def test_framework_versions_compare_by_release() -> None:
    assert release("2.14.1+cu130") == release("2.14.0") == "2.14"
    assert release("1.13.0.dev20220611") == "1.13"
    assert release("NGC 21.03") == "NGC 21.03"
    assert release("") == "version unknown"
    recorded = recorded_params()
    runs = [
        _run("a", recorded, 100.0, **{"trainbench.framework_version": "2.14.1"}),
        _run("b", recorded, 110.0, **{"trainbench.framework_version": "2.15.0"}),
    ]
    (table,) = build_tables([entry(Found(r, None), histories=False) for r in runs], None, [])
    (row,) = table.rows
    assert len(row.cells) == 2 and row.columns_differ == "version: pytorch 2.14 / pytorch 2.15"


def test_a_setting_can_be_the_compared_axis() -> None:
    """--across precision.name: fp32 on one machine against tf32 on another in one row, saying so."""
    runs = [
        _run("fp32", recorded_params("precision=fp32"), 100.0),
        _run(
            "tf32",
            recorded_params("precision=tf32"),
            300.0,
            **{"hw.gpu": "NVIDIA A100-SXM4-80GB", "trainbench.backend": "cuda"},
        ),
    ]
    apart = build_tables([entry(Found(r, None), histories=False) for r in runs], None, [])
    assert [len(t.rows) for t in apart] == [2]
    together = [entry(Found(r, None), ("precision.name",), histories=False) for r in runs]
    (table,) = build_tables(together, None, [])
    (row,) = table.rows
    assert len(row.cells) == 2 and "compared: precision=fp32 / precision=tf32" in row.columns_differ
    assert Selection("trainbench", across=("precision.name",)).describe().endswith("compared across precision.name")


# -------------------------------------------------------------------------------------------- helpers


def _run(name: str, run_params: dict[str, str], samples_per_s: float, **tags: str):
    """A finished cell as MLflow returns it: the params a real composed cell records, a machine's tags."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

    all_tags = {
        "trainbench.kind": "cell",
        "trainbench.outcome": "finished",
        "trainbench.task": run_params["task.name"],
        "trainbench.model": run_params.get("model.name", ""),
        "trainbench.framework": "pytorch",
        "trainbench.framework_version": "2.14.1",
        "trainbench.backend": "cpu",
        "hw.cpu": "Intel(R) Xeon(R) Processor",
        "hw.cpu_cores": "2",
        **tags,
    }
    all_tags = {key: value for key, value in all_tags.items() if value}
    info = RunInfo(name, "0", name, "FINISHED", 0, 1, "active", run_name=name)
    data = RunData(
        metrics=[Metric("samples_per_s", samples_per_s, 0, 0)],
        params=[Param(k, v) for k, v in run_params.items()],
        tags=[RunTag(k, v) for k, v in all_tags.items()],
    )
    return Run(info, data)


# ------------------------------------------------------------------------- runs recorded before a change

BEFORE = json.loads((Path(__file__).parent / "samples" / "params_before_framework_knobs.json").read_text())
# What each old command line is today: PyTorch's knobs moved from optimize.* to framework.*.
TODAY = {"optimize.channels_last=true": "framework.channels_last=true"}


def test_runs_recorded_before_the_knobs_moved_share_rows_with_runs_recorded_now(tmp_path: Path) -> None:
    """A real store holding, for four settings, one run with the params a cell recorded before PyTorch's knobs
    moved to framework.* and model YAMLs stopped naming builders (captured from that commit) and one with
    today's: each pair in one row and one column of the report."""
    from conftest import with_schema
    from trainbench import tracking

    client = tracking.client(with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}"))
    experiment_id = client.create_experiment("trainbench")
    for case, old in BEFORE.items():
        now = recorded_params(*[TODAY.get(override, override) for override in old["overrides"]])
        assert set(old["params"]) != set(now)  # the names did change
        framework = old["params"]["framework.name"]
        for when, run_params in (("before", old["params"]), ("now", now)):
            name = f"{case} {when}"
            tags = _run(name, run_params, 100.0, **{"trainbench.framework": framework}).data.tags
            run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
            tracking.log_params(client, run_id, run_params)
            client.log_metric(run_id, "samples_per_s", 100.0)
            client.set_terminated(run_id)
    entries = [entry(Found(run, None), histories=False) for run in client.search_runs([experiment_id])]
    assert len(entries) == 2 * len(BEFORE)
    for case in BEFORE:
        before, now = (next(e for e in entries if e.run_name == f"{case} {when}") for when in ("before", "now"))
        assert before.key == now.key and before.column == now.column, case
    rows = [row for table in build_tables(entries, None, []) for row in table.rows]
    # ResNet-50 fast on PyTorch and on TensorFlow: one row, two columns (the framework is compared)
    assert len(rows) == 3 and sum(len(row.cells) for row in rows) == len(BEFORE)


def test_a_pytorch_knob_set_by_hand_before_and_now_shows_in_the_column_not_the_row() -> None:
    """optimize.channels_last=true with optimize=none was a row of its own; it is now the framework setting
    framework.channels_last=true: a column's knob, the same for the old run as for the new one."""
    old = setting_of(BEFORE["pytorch resnet50 benchmark bf16 channels_last"]["params"])
    old_cell = ("model=resnet50", "data=synthetic", "task=benchmark", "precision=mixed_bf16", "batch_size=8")
    plain = setting_of(recorded_params(*old_cell))
    assert old == plain  # the row: the same setting
    knobs = framework_knobs(BEFORE["pytorch resnet50 benchmark bf16 channels_last"]["params"])
    assert knobs["channels_last"] == "true" and knobs["compile_mode"] == "auto"
    now = recorded_params("model=resnet50", "task=benchmark", "precision=mixed_bf16", "framework.channels_last=true")
    assert framework_knobs(now)["channels_last"] == "true"
    fast = framework_knobs(BEFORE["pytorch resnet50 benchmark fast"]["params"])
    assert fast["channels_last"] == fast["fused_optimizer"] == fast["capture"] == "auto"  # what fast set itself


def setting_of(run_params: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in setting(run_params, {}).items() if key != "data.num_samples"}
