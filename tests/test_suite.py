"""The standard suite (`trainbench suite`): its dry run, the version guard, its smallest workload run for real,
and the per-machine geometric-mean line from real export files."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

from conftest import ROOT, invoke
from trainbench import suite

SETTING_ROW = re.compile(r"^(\S+(?: suite_cell=\S+| precision=\S+| count=\d+)*)\s+([0-9a-f]{12})\s+(.*)$")


def dry_run(folder: Path, *args: str) -> list[tuple[str, str]]:
    """(overrides, setting id) of every cell the dry run lists; asserts it ran and recorded nothing."""
    done = invoke(folder, *args, "sweep.dry_run=true", timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [m.group(3, 2) for line in done.stdout.splitlines() if (m := SETTING_ROW.match(line))]
    assert f"{len(rows)} cell(s); nothing was run or recorded" in done.stdout
    return rows


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    folder = tmp_path_factory.mktemp("suite-dry")
    return {
        "cpu": dry_run(folder, "suite", "device=cpu"),
        "gpu": dry_run(folder, f"+experiment={suite.preset('gpu')}"),
        "multi_gpu": dry_run(folder, f"+experiment={suite.preset('multi_gpu')}"),
    }


def test_the_dry_run_lists_every_workload_with_its_setting_and_runs_nothing(listed, tmp_path: Path) -> None:
    cpu = listed["cpu"]
    assert [re.search(r"\+suite_cell=(\S+)", o).group(1) for o, _ in cpu] == suite.workloads("cpu")  # type: ignore[union-attr]
    assert all("precision=fp32" in o and "device=cpu" in o for o, _ in cpu)
    for needed in ("mlp_train", "gemm", "resnet50_train", "resnet50_inference", "vit_b16_train", "distilbert_train"):
        assert any(f"+suite_cell={needed} " in o + " " for o, _ in cpu), needed
    gpu = listed["gpu"]
    assert [re.search(r"\+suite_cell=(\S+)", o).group(1) for o, _ in gpu] == suite.workloads("gpu")  # type: ignore[union-attr]
    # the GPU's own figures in its fastest precision: bf16 autocast
    assert {o.split()[0] for o, _ in gpu if "_bf16" in o} == {
        "+suite_cell=" + w for w in ("mlp_train_bf16", "gemm_bf16", "resnet50_bs256_bf16")
    }
    # the workloads every device runs measure one setting on a CPU and on a GPU: a CPU compares with a GPU
    assert {i for _, i in cpu} <= {i for _, i in gpu}
    assert [o.split("device.count=")[1].split()[0] for o, _ in listed["multi_gpu"]] == ["1", "2"]
    assert not (tmp_path / "mlflow.db").exists()


def test_the_suite_s_default_mlp_is_the_default_cell(listed, tmp_path: Path) -> None:
    """The seed MLP workload is conf/config.yaml as it is: published seed rows and every default run match it."""
    default = dry_run(tmp_path, "device=cpu")
    mlp = [i for o, i in listed["cpu"] if "+suite_cell=mlp_train" in o]
    assert mlp == [default[0][1]]


def test_resnet50_alone_is_the_suites_resnet50_training_setting_that_other_machines_ran(listed, tmp_path: Path) -> None:
    """The headline (`-m device=cpu,gpu model=resnet50`) measures the suite's resnet50_train on either device: the
    setting of the contributed CPU and GPU runs, so its first screen has other machines beside it."""
    from trainbench.store.setting import setting, setting_id

    headline = dry_run(tmp_path, "device=cpu,gpu", "model=resnet50")
    resnet50_train = [i for o, i in listed["cpu"] if "+suite_cell=resnet50_train " in o + " "]
    assert [i for _, i in headline] == resnet50_train * 2
    machines = set()
    for path in (ROOT / "results" / "contributed").glob("*.json"):
        for run in json.loads(path.read_text())["runs"]:
            if run["params"] and setting_id(setting(run["params"], run["tags"])) == resnet50_train[0]:
                machines.add(run["tags"].get("trainbench.backend"))
    assert {"cpu", "cuda"} <= machines


def test_a_changed_workload_needs_a_new_suite_version(listed, tmp_path: Path) -> None:
    ids = [i for rows in listed.values() for _, i in rows]
    found = suite.fingerprint(ids)
    assert found == suite.SUITE_FINGERPRINT, (
        f"a workload of the suite changed (fingerprint {found}, version {suite.SUITE_VERSION} has "
        f"{suite.SUITE_FINGERPRINT}): bump SUITE_VERSION in src/trainbench/suite.py and set SUITE_FINGERPRINT = "
        f'"{found}", so that rows of the two versions never share a chart'
    )
    # one more timed GEMM is another workload: the fingerprint sees it
    gemm = next(i for o, i in listed["cpu"] if "+suite_cell=gemm" in o)
    ((_, longer),) = dry_run(tmp_path, "suite", "device=cpu", "+suite_cell=gemm", "task.steps=11")
    assert longer != gemm
    assert suite.fingerprint([longer if i == gemm else i for i in ids]) != found


def test_the_suite_refuses_what_would_change_its_workloads(tmp_path: Path) -> None:
    for args, named in (
        (("suite", "device=cpu", "precision=mixed_bf16"), "precision=mixed_bf16"),
        (("suite", "device=cpu", "+suite_cell=resnet50_bs256"), "resnet50_bs256 is not a workload of the cpu class"),
    ):
        done = invoke(tmp_path, *args, timeout=120)
        assert done.returncode == 2
        assert named in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists() or not _runs(tmp_path)


def _nvidia_smi(folder: Path, gpus: int) -> str:
    """A PATH whose nvidia-smi lists `gpus` NVIDIA GPUs, as `nvidia-smi -L` lists them (none: no line)."""
    import os
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    listed = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\\n" for i in range(gpus))
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{listed}'\n")
    (folder / "nvidia-smi").chmod(0o755)
    return os.pathsep.join([str(folder), str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def test_the_multi_gpu_class_without_nvidia_gpus_says_so_and_what_to_run(tmp_path: Path, monkeypatch) -> None:
    """`trainbench suite device=gpu device.count=2` on a machine without NVIDIA GPUs: not the cpu class's
    workloads refusing a second device, but the class's need and the command for this machine."""
    import trainbench

    none = _nvidia_smi(tmp_path / "no-gpu", 0)
    for args in (("device=gpu", "device.count=2"), ("device.count=2",)):
        done = invoke(tmp_path, "suite", *args, "sweep.dry_run=true", env={"PATH": none}, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "trainbench: `trainbench suite device.count=2`: the multi_gpu class (suite_standard_multi_gpu) needs 2 "
            "or more NVIDIA GPUs and this machine has none; run this machine's class without device.count: "
            "`trainbench suite device=cpu`"
        ], done.stderr
        assert "cell(s)" not in done.stdout and not _runs(tmp_path)
    monkeypatch.setenv("PATH", none)
    with pytest.raises(trainbench.BadInput, match="needs 2 or more NVIDIA GPUs and this machine has none"):
        trainbench.suite_plan(["device=gpu", "device.count=2"])
    # with two NVIDIA GPUs the same command line is the multi_gpu class, its device.count the preset's own
    monkeypatch.setenv("PATH", _nvidia_smi(tmp_path / "two-gpus", 2))
    plan = trainbench.suite_plan(["device=gpu", "device.count=2"])
    assert (plan.device_class, plan.command_line) == (
        "multi_gpu",
        ("+experiment=suite_standard_multi_gpu", "device=gpu"),
    )


def _runs(folder: Path) -> list[object]:
    from conftest import runs_in

    return runs_in(f"sqlite:///{folder / 'mlflow.db'}")


@pytest.mark.slow
def test_the_smallest_workload_runs_tagged_with_the_suite_and_its_summary(tmp_path: Path) -> None:
    done = invoke(tmp_path, "suite", "device=cpu", "+suite_cell=gemm", "tracking.system_metrics_interval_s=0")
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = _runs(tmp_path)
    assert run.data.tags["trainbench.suite"] == "standard"  # type: ignore[attr-defined]
    assert run.data.tags["trainbench.suite_version"] == str(suite.SUITE_VERSION)  # type: ignore[attr-defined]
    assert f"Standard suite v{suite.SUITE_VERSION}" in done.stdout
    assert "geometric mean over 1 workload(s) vs" in done.stdout


# --------------------------------------------------------------- the summary line, from real export files

CONTRIBUTED = ROOT / "results" / "contributed"


def suite_files() -> list[Path]:
    """The contributed files that hold a run of this suite version."""
    found = []
    for path in sorted(CONTRIBUTED.glob("*.json")):
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        if any(r["tags"].get("trainbench.suite_version") == str(suite.SUITE_VERSION) for r in runs):
            found.append(path)
    return found


NOISY_FIGURES: set[tuple[str, str]] = set()  # (machine, setting id) with a run tagged noisy, as figures() read them


def figures(path: Path) -> dict[tuple[str, str], list[float]]:
    """Straight from the JSON: {(machine, setting id): headline figures} of the file's finished cells that are
    of this suite version or of no suite (those of a run tagged noisy also into NOISY_FIGURES)."""
    from trainbench.store.setting import setting, setting_id

    found: dict[tuple[str, str], list[float]] = {}
    for run in json.loads(path.read_text(encoding="utf-8"))["runs"]:
        tags, metrics = run["tags"], run["metrics"]
        if tags.get("trainbench.kind") != "cell" or tags.get("trainbench.outcome") != "finished":
            continue
        if tags.get("trainbench.suite_version", str(suite.SUITE_VERSION)) != str(suite.SUITE_VERSION):
            continue
        history = metrics.get("peak_tflops" if tags.get("trainbench.task") == "matmul" else "samples_per_s")
        value = max(history)[2] if history else None  # [step, timestamp, value]: the run's figure is the last
        framework = tags.get("trainbench.framework", "pytorch")
        machine = tags["hw.label"] + ("" if framework == "pytorch" else f" ({framework})")
        if value:
            key = (machine, setting_id(setting(run["params"], tags)))
            found.setdefault(key, []).append(float(value))
            if tags.get("trainbench.noisy") == "true":
                NOISY_FIGURES.add(key)
    return found


def test_each_machine_s_line_is_the_geometric_mean_over_the_workloads_both_ran() -> None:
    """This CPU's suite export as "this sweep", every other contributed file as other machines: each machine's
    line is the geometric mean of its ratios to the reference machine, over the workloads this sweep and both
    ran, computed here from the files' JSON."""
    from trainbench.report import suite_summary
    from trainbench.report.selection import Selection, select
    from trainbench.store import sources

    files = suite_files()
    mine_file = next((f for f in files if "cpu" in f.name), None)
    if mine_file is None:
        pytest.skip("results/contributed/ holds no CPU export of this suite version")
    every_file = sorted(CONTRIBUTED.glob("*.json"))
    opened = [sources.open_file(path, contributed=True) for path in every_file]
    exported = opened[every_file.index(mine_file)].exported.runs
    mine = {r.info.run_id for r in exported if r.data.tags.get("trainbench.suite")}
    entries, _ = select(opened, Selection("trainbench"), mine_runs=mine, histories=False)
    lines = suite_summary.terminal_lines(suite_summary.summarise(entries, mine))

    mine_figures = figures(mine_file)
    this_machine = next(iter(mine_figures))[0]
    workloads = {key for _, key in mine_figures}
    everything: dict[tuple[str, str], list[float]] = {}
    for path in every_file:
        if path != mine_file:
            for key, values in figures(path).items():
                if key[0] != this_machine:
                    everything.setdefault(key, []).extend(values)
    everything.update(mine_figures)
    median = {key: statistics.median(values) for key, values in everything.items()}
    machines = sorted({m for m, _ in median})
    # the reference: the H100 where it ran as many of these workloads as any other machine, else the one that ran most
    ran = {m: sum((m, k) in median for k in workloads) for m in machines if m != this_machine}
    noisy = {m: sum((m, k) in NOISY_FIGURES for k in workloads) for m in ran}
    runs = {m: sum(len(everything.get((m, k), [])) for k in workloads) for m in ran}
    most = max(ran.values(), default=0)
    if most == 0:
        reference = this_machine
    elif ran.get(suite_summary.REFERENCE_MACHINE) == most:
        reference = suite_summary.REFERENCE_MACHINE
    else:  # of those that ran the most, the one with the fewest noisy workloads, then the most runs, then by name
        reference = min((noisy[m], -runs[m], m) for m, n in ran.items() if n == most)[2]
    checked = 0
    for machine in machines:
        shared = [k for k in sorted(workloads) if (machine, k) in median and (reference, k) in median]
        if not shared:
            continue
        ratios = [median[(machine, k)] / median[(reference, k)] for k in shared]
        expected = math.exp(statistics.fmean(math.log(r) for r in ratios))
        name = f"{machine} (this machine)" if machine == this_machine else machine
        shown_reference = f"{reference} (this machine)" if reference == this_machine else reference
        wanted = f"  {name}: geometric mean over {len(shared)} workload(s) vs {shown_reference}: {expected:.3g}x"
        (line,) = [line for line in lines if line.startswith(wanted)]
        if machine == reference:
            assert line == wanted + " (the reference)"
        else:  # with the range the workloads' intervals allow, and the verdict where that range holds 1
            assert re.fullmatch(re.escape(wanted) + r"(, too close to call)? \([0-9.e+]+-([0-9.e+]+|unbounded)\)", line)
        checked += 1
    assert checked >= 2


def test_the_python_api_plans_and_runs_the_suite_as_the_command_does(listed, tmp_path: Path) -> None:
    """trainbench.suite_plan is what `trainbench suite` runs; trainbench.run_suite runs it through trainbench.run
    (here its dry run: nothing recorded), and the suite's mark does not outlive the call."""
    import os

    import trainbench

    plan = trainbench.suite_plan(["device=cpu"])
    assert (plan.name, plan.version, plan.device_class) == (suite.SUITE_NAME, suite.SUITE_VERSION, "cpu")
    assert list(plan.workloads) == suite.workloads("cpu")
    assert plan.line == f"trainbench suite: standard v{suite.SUITE_VERSION}, suite_standard_cpu"
    assert trainbench.suite_plan(["device=cpu", "suite_cell=gemm,mlp_train"]).workloads == ("gemm", "mlp_train")
    with pytest.raises(trainbench.BadInput, match="the suite fixes its workloads and precisions"):
        trainbench.suite_plan(["device=cpu", "precision=mixed_bf16"])

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    planned = trainbench.run_suite(
        ["device=cpu", "suite_cell=gemm,mlp_train", "sweep.dry_run=true"],
        tracking_uri=uri,
        output="quiet",
        cwd=tmp_path,
    )
    assert planned.outcome == "planned"
    assert [(c.name, c.outcome) for c in planned.cells] == [
        ("pytorch-matmul_square-cpu-fp32", "would run"),
        ("pytorch-mlp-cpu-bs64", "would run"),
    ]
    by_workload = {re.search(r"\+suite_cell=(\S+)", o).group(1): i for o, i in listed["cpu"]}  # type: ignore[union-attr]
    assert [c.setting_id for c in planned.cells] == [by_workload["gemm"], by_workload["mlp_train"]]  # the command's
    assert suite.ENV not in os.environ and not (tmp_path / "mlflow.db").exists()


def test_a_workloads_ratio_is_claimed_only_where_the_figures_separate() -> None:
    """The suite's lines per workload follow the first screen's rule: a GEMM's peak (one measurement, no interval)
    3% above this machine's is too close to call; intervals that overlap are within noise; 2x apart is a ratio."""
    from trainbench.report import suite_summary
    from trainbench.report.comparison import TABLE_METRICS

    tflops = next(m for m in TABLE_METRICS if m.name == "peak_tflops")
    speed = next(m for m in TABLE_METRICS if m.name == "samples_per_s")
    gemm = suite_summary.Workload("gemm", tflops, {"this machine": 606.0, "H200": 622.0, "H100": 1300.0})
    gemm.runs = dict.fromkeys(gemm.values, 1)
    mlp = suite_summary.Workload("mlp", speed, {"this machine": 500.0, "H200": 540.0})
    mlp.runs, mlp.ci95 = dict.fromkeys(mlp.values, 1), {"this machine": 30.0, "H200": 30.0}
    found = suite_summary.SuiteSummary([gemm, mlp], "H200", [], "Xeon")
    lines = suite_summary.terminal_lines(found)
    assert "    H200: 622.0  too close to call against this machine (no interval recorded)" in lines, lines
    assert "    H100: 1,300  2.15x this machine; no interval recorded" in lines, lines
    assert "    H200: 540.0 ± 30.00 (95%)  within noise of this machine" in lines, lines


def test_each_workload_quotes_every_figure_as_the_first_screen_does_interval_repeats_runs_and_noise() -> None:
    """A "within noise" against a figure shown bare cannot be checked by the reader: every figure carries its
    interval, this sweep's its repeats, another machine's how many runs its median is of, and NOISY where a run
    was tagged so -- the same words as the first screen's for the same runs."""
    from trainbench.report import suite_summary
    from trainbench.report.comparison import TABLE_METRICS

    speed = next(m for m in TABLE_METRICS if m.name == "samples_per_s")
    w = suite_summary.Workload("resnet50", speed, {"this machine": 19.74, "Xeon": 6.5, "H200": 2339.0})
    w.runs = {"this machine": 1, "Xeon": 1, "H200": 2}
    w.repeats = {"this machine": 3, "Xeon": 3}
    w.ci95 = {"this machine": 1.2, "Xeon": 15.0, "H200": 40.0}
    w.spans = {"H200": (2299.0, 2379.0)}  # its two runs' span (summarise sets it wherever a median is of several)
    w.noisy = {"this machine": False, "Xeon": True, "H200": False}
    lines = suite_summary.terminal_lines(suite_summary.SuiteSummary([w], "H200", [], "EPYC"))
    assert "    this machine: 19.74 ± 1.20 (95%, 3 repeats)" in lines, lines
    assert "    Xeon: 6.50 ± 15.00 (95%, 3 repeats) NOISY  within noise of this machine" in lines, lines
    assert any(line.startswith("    H200: 2,339 (2,299-2,379 over 2 runs)  ") for line in lines), lines


def test_between_machines_that_ran_as_many_workloads_the_steadier_one_is_the_reference() -> None:
    """Without the H100, the reference is a machine that ran the most workloads; where several did, the one with
    the fewest noisy figures, not the first by name: a loaded machine's wide intervals would make every line's
    range unbounded (2026-11-29: a busy 2-vCPU Xeon, NOISY on 5 of 8 workloads, chosen over an H200)."""
    from trainbench.report import suite_summary
    from trainbench.report.comparison import TABLE_METRICS

    speed = next(m for m in TABLE_METRICS if m.name == "samples_per_s")
    workloads = []
    for title, noisy_cpu in (("a", True), ("b", True), ("c", False)):
        w = suite_summary.Workload(title, speed, {"this machine": 10.0, "A busy CPU": 3.0, "Z steady GPU": 900.0})
        w.noisy = {"this machine": False, "A busy CPU": noisy_cpu, "Z steady GPU": title == "c"}
        workloads.append(w)
    assert suite_summary.reference_machine(workloads, suite_summary.REFERENCE_MACHINE) == "Z steady GPU"
    workloads[0].values["H100"] = 1000.0
    assert suite_summary.reference_machine(workloads, "H100") == "Z steady GPU"  # the H100 ran fewer
    # as steady, the one with more runs behind its figures: an H200's six suite runs, not a VM's one
    for w in workloads:
        w.noisy["A busy CPU"] = False
        w.runs = {"this machine": 1, "A busy CPU": 1, "Z steady GPU": 6}
    workloads[2].noisy["Z steady GPU"] = False
    assert suite_summary.reference_machine(workloads, suite_summary.REFERENCE_MACHINE) == "Z steady GPU"


def test_a_machine_s_geometric_mean_says_too_close_to_call_where_the_workloads_intervals_allow_a_ratio_of_one() -> None:
    """The suite's per-machine line carries the range of geometric means the workloads' 95% intervals allow;
    where that range holds 1 it says so instead of claiming a speed-up, as every other comparison does."""
    from trainbench.report import suite_summary
    from trainbench.report.comparison import TABLE_METRICS

    metric = next(m for m in TABLE_METRICS if m.higher_is_better)

    def workload(title: str, mine: float, mine_ci: float | None, theirs: float, theirs_ci: float | None):
        w = suite_summary.Workload(title, metric)
        for machine, value, ci in (("this machine", mine, mine_ci), ("Other GPU", theirs, theirs_ci)):
            w.values[machine], w.ci95[machine], w.runs[machine], w.noisy[machine] = value, ci, 1, False
        return w

    def line_of(workloads: list) -> str:
        lines = suite_summary.machine_line("this machine", "Other GPU", workloads)
        found = suite_summary.SuiteSummary(workloads, "Other GPU", lines, "This CPU")
        (line,) = [t for t in suite_summary.terminal_lines(found) if t.startswith("  This CPU (this machine)")]
        return line

    tight = [workload("a", 200.0, 2.0, 100.0, 1.0), workload("b", 400.0, 4.0, 200.0, 2.0)]
    assert line_of(tight).endswith(": 2x (1.96-2.04)")
    wide = [workload("a", 110.0, 20.0, 100.0, 15.0), workload("b", 105.0, None, 100.0, 1.0)]
    assert line_of(wide).endswith(": 1.07x, too close to call (0.807-1.4)")
