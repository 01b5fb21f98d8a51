"""A framework declares what it is in its own package: its knobs (its config's fields) and the run flags its
adapter records (FrameworkConfig.run_flags). The report reads those declarations, so a new framework shows its
own knob and flag without an edit to any shared module."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from conftest import ROOT
from trainbench.config import params, replace
from trainbench.config.compose import cells_for
from trainbench.config.plugins import SCHEMAS
from trainbench.config.schema import SHARED_RUN_FLAGS, FrameworkConfig
from trainbench.report import cli

# A framework package as a contributor would write it, outside trainbench: its config, one knob, one run flag.
FAKE_FRAMEWORK = """
from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.registry import schema
from trainbench.config.schema import FrameworkConfig


@schema("framework", "quickfw")
@dataclass
class QuickConfig(FrameworkConfig):
    adapter: ClassVar[str] = "quickfw.adapter"
    package: str = "quickfw"
    run_flags: ClassVar[tuple[str, ...]] = ("quickfw.fast_path",)
    fast_path: bool = False  # the framework's own knob
"""
# Machines no test host is: a report puts the machine it runs on first, and the tests run on Xeons and EPYCs
MACHINES = {
    "a": {"hw.cpu": "Ampere Altra Q80-30", "hw.cpu_cores": "2", "trainbench.backend": "cpu"},
    "b": {"hw.cpu": "HiSilicon Kunpeng-920", "hw.cpu_cores": "2", "trainbench.backend": "cpu"},
}


@pytest.fixture
def quick_framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type:
    """The fake framework's package on sys.path, registered by importing it (as config.plugins does for the
    shipped ones); the registration is undone afterwards so that other tests see the shipped frameworks only."""
    package = tmp_path / "packages" / "quickfw"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_FRAMEWORK))
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setitem(SCHEMAS, "framework", dict(SCHEMAS["framework"]))
    import quickfw  # type: ignore[import-not-found]

    yield quickfw.QuickConfig
    sys.modules.pop("quickfw", None)


def record_run(client: MlflowClient, experiment: str, cell, machine: dict[str, str], fast: bool) -> None:
    """A finished run as the fake framework's cell would record it: the cell's params, its task's tags, the
    shared run flags and its own."""
    run = client.create_run(experiment, run_name=f"quickfw-{'fast' if fast else 'plain'}")
    tags = {
        **{key: str(value) for key, value in cell.task.tags(cell).items()},
        "trainbench.kind": "cell",
        "trainbench.outcome": "finished",
        "trainbench.framework": "quickfw",
        "trainbench.framework_version": "0.1.0",
        **dict.fromkeys(SHARED_RUN_FLAGS, "false"),
        "quickfw.fast_path": str(fast).lower(),
        **machine,
    }
    client.log_batch(
        run.info.run_id,
        metrics=[Metric("samples_per_s", 1000.0 * (2 if fast else 1), 0, 0)],
        params=[Param(key, str(value)) for key, value in params(cell).items()],
        tags=[RunTag(key, value) for key, value in tags.items()],
    )
    client.set_terminated(run.info.run_id)


def test_a_new_frameworks_own_knob_and_run_flag_appear_in_the_report(
    quick_framework: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("trainbench")
    (cell,) = cells_for(["model=mlp", "device=cpu", "data.num_samples=64", "data.num_val_samples=16", "task.epochs=1"])
    for machine, fast in (("a", True), ("b", False)):
        quick = replace(cell, framework=quick_framework(name="quickfw", fast_path=fast))
        record_run(client, experiment, quick, MACHINES[machine], fast)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    out = tmp_path / "report"
    assert cli.main(["--out", str(out), "--no-contributed", "--no-references", "--no-log"]) == 0

    (table,) = json.loads((out / "report.json").read_text())["tables"]
    (row,) = table["rows"]
    assert "fast_path=true" in " ".join(column["label"] for column in table["columns"])
    assert "fast_path: true / false" in row["columns_differ"]
    assert "fast_path=true" in (out / "report.md").read_text()


def test_no_framework_package_records_another_frameworks_run_flag() -> None:
    """A run's tags say how ITS framework ran: a framework package never writes a flag another one declares
    (a Keras run tagged `trainbench.capture=false` would claim a choice Keras does not have)."""
    frameworks = [config for config in SCHEMAS["framework"].values() if issubclass(config, FrameworkConfig)]
    declared = {flag for config in frameworks for flag in config.run_flags}
    for package in sorted(p for p in (ROOT / "src" / "trainbench" / "frameworks").iterdir() if p.is_dir()):
        module = f"trainbench.frameworks.{package.name}"
        own = {
            flag
            for config in frameworks
            if any(cls.__module__ == module for cls in config.__mro__)
            for flag in config.run_flags
        }
        source = "\n".join(path.read_text() for path in package.glob("*.py"))
        written = sorted(flag for flag in declared - own if f'"{flag}"' in source)
        assert not written, f"frameworks/{package.name} records another framework's run flags: {written}"
