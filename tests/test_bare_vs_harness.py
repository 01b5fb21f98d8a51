"""benchmarks/: the bare loops' JSON contract and compare.py's workload table (no harness cell is run here)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmark_script(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


compare = _benchmark_script("compare")


@pytest.mark.parametrize("smoke", [False, True])
def test_every_workload_runs_the_same_settings_on_both_sides(smoke: bool) -> None:
    for workload in compare.WORKLOADS:
        compare.check_same_settings(workload, smoke)  # raises SystemExit naming the mismatch


def test_a_mismatched_row_is_refused() -> None:
    row = compare.Workload("broken", "resnet50 --variant fp32 --steps 20", "task=benchmark task.steps=30")
    with pytest.raises(SystemExit, match="task.steps=30"):
        compare.check_same_settings(row, smoke=False)


def test_fast_rows_compile_both_sides_in_the_mode_the_harness_picks_for_the_model() -> None:
    """A change in the compile mode PyTorch picks for a model (framework.compile_mode=auto) must reach the bare loop too, or the
    row would compare CUDA graphs against none."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    bare_loops = _benchmark_script("bare_loops")
    fast = [w for w in compare.WORKLOADS if "--variant fast" in w.bare and w.family != "mlp_epoch"]
    assert {w.family for w in fast} == {"resnet50", "distilbert", "bert_large"}
    for workload in fast:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cell = validate(compose("config", overrides=workload.harness.split()))
        harness_mode = cell.framework.torch_compile_mode(cell.model, cuda=True)
        bare_mode = compare.bare_options(workload, smoke=False).get("--compile-mode") or bare_loops.DEFAULT_COMPILE_MODE
        assert bare_mode == harness_mode, workload.name


def test_the_report_names_the_compile_mode_the_harness_ran() -> None:
    tags = {"trainbench.autocast": "bfloat16", "trainbench.compile": "true", "torch.compile_mode": "reduce-overhead"}
    assert compare.harness_flags(tags) == "bfloat16 compile=reduce-overhead"
    tuned = {**tags, "trainbench.channels_last": "true", "torch.coordinate_descent_tuning": "true"}
    assert compare.harness_flags(tuned) == "bfloat16 channels_last compile=reduce-overhead coordinate_descent_tuning"


def _row(*values: float) -> Any:
    """A row measured in compare.py's order: bare, harness, bare, ..., bare."""
    sides = ["bare" if index % 2 == 0 else "harness" for index in range(len(values))]
    samples = [compare.Sample(side, value, 1.0) for side, value in zip(sides, values, strict=True)]
    return compare.Row(compare.WORKLOADS[0], "", "", samples)


def test_each_harness_run_is_judged_against_the_bare_runs_beside_it() -> None:
    """A host that speeds up across the call: every harness run matches its neighbours, while the medians (the
    harness lacking the last, fastest bare run) would put it 5% behind."""
    drifting = _row(100, 101, 102, 103, 104, 105, 106, 107, 108)
    assert drifting.pair_ratios() == pytest.approx([101 / 101, 103 / 103, 105 / 105, 107 / 107])
    table = compare.tables([drifting], None)
    assert "| 1.000 (1.000-1.000) | yes |" in table


def test_a_row_the_host_moves_more_than_the_bar_is_marked_within_noise() -> None:
    steady_cost = _row(100, 95, 100, 95, 100, 95, 100)  # 5% slower every time: a real cost, shown as one
    noisy = _row(100, 93, 110, 108, 95, 104, 120)  # bare spreading 26%: cannot tell 0.98 from 1.0
    assert "| **no** |" in compare.tables([steady_cost], None)
    assert "within noise" in compare.tables([noisy], None)
    estimate = compare.paired_estimate(noisy.pair_ratios())
    assert estimate[1] < compare.PASS_RATIO < estimate[2]


def _bare(*args: str) -> list[dict]:
    finished = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bare_loops.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]


def test_bare_matmul_prints_its_median_as_one_json_line() -> None:
    (line,) = _bare("matmul", "--variant", "bf16", "--device", "cpu", "--smoke")
    assert line["workload"] == "matmul" and line["n"] == 256 and line["tflops"] > 0
    assert line["env"]["torch"]


def test_bare_cuda_graph_variant_says_why_it_cannot_run_on_a_cpu() -> None:
    (line,) = _bare("mlp_epoch", "--variant", "graph", "--device", "cpu", "--smoke")
    assert line["skipped"] == "CUDA graphs need a CUDA device"


def _bare_loops() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bare_loops", ROOT / "benchmarks" / "bare_loops.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bare_loops"] = module
    spec.loader.exec_module(module)
    return module


def test_kernel_summary_counts_overlapping_kernels_once_and_names_the_gaps() -> None:
    # Two steps of a profile: a GEMM overlapped by an attention kernel on another stream, then an idle gap
    # (the host was late), then an Inductor kernel whose name mentions convolution, and a cuDNN convolution.
    kernels = [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", 0.0, 60.0),
        ("pytorch_flash::flash_fwd_kernel", 40.0, 100.0),
        ("triton_poi_fused_convolution_relu_3", 150.0, 180.0),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", 180.0, 200.0),
    ]
    summary = _bare_loops().summarize_kernels(kernels, steps=2, wall_s=0.0004)
    assert summary["device_span_ms_per_step"] == 0.1  # 200 us over 2 steps
    assert summary["device_busy_ms_per_step"] == 0.075  # 100 + 50 us busy: the overlap counted once
    assert summary["busy_fraction"] == 0.75
    assert summary["kernel_ms_per_step_by_kind"] == {
        "gemm": 0.03,
        "attention": 0.03,
        "triton (torch.compile)": 0.015,
        "convolution": 0.01,
    }
    assert [k["kind"] for k in summary["top_kernels"]][:2] == ["gemm", "attention"]


def _interleaved(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "interleaved.py"), "--device", "cpu", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _interleaved_here(*args: str, out: Path) -> int:
    """interleaved.py's main in this process, for what runs no workload: refusing arguments, merging reports."""
    interleaved = sys.modules.get("interleaved") or _benchmark_script("interleaved")
    argv = sys.argv
    sys.argv = ["interleaved.py", "--device", "cpu", "--out", str(out), *args]
    try:
        return interleaved.main()
    finally:
        sys.argv = argv


@pytest.mark.slow  # a real interleaved run of two sides (~10 s of CPU): benchmarks/, not the product
def test_interleaved_alternates_bare_and_harness_blocks_and_judges_each_harness_block_by_its_neighbours(
    tmp_path: Path,
) -> None:
    # Blocks of 0.2 s (at least 5 steps) instead of 2 s: the order of blocks and their pairing are what is judged.
    workloads = ("--workloads", "mlp_epoch,matmul_bf16", "--block-seconds", "0.2")
    finished = _interleaved("--smoke", "--rounds", "2", *workloads, out=tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    (report,) = tmp_path.glob("*-interleaved.md")
    (samples,) = tmp_path.glob("*-interleaved.json")
    rows = {row["workload"]: row for row in json.loads(samples.read_text())["rows"]}
    assert set(rows) == {"mlp_epoch", "matmul_bf16"}
    for row in rows.values():
        assert row["error"] is None
        assert len(row["bare"]) == 3 and len(row["harness"]) == 2  # bare, harness, bare, harness, bare
        first = row["harness"][0] / ((row["bare"][0] + row["bare"][1]) / 2)
        assert row["pair_ratios"][0] == pytest.approx(first)
        assert "precision=" in row["settings"]["harness"]  # the harness overrides it built from, as run
    table = report.read_text()
    assert "| mlp_epoch | samples/s |" in table and "| matmul_bf16 | TFLOPS |" in table
    assert "interleaved.py --device cpu" in table  # the command that made it

    # The merge reads JSON and runs nothing: its own main in this process, not a second interpreter importing torch.
    assert _interleaved_here("--merge", str(samples), str(samples), out=tmp_path / "pooled") == 0
    merged = (tmp_path / "pooled" / "pooled-interleaved.md").read_text()
    (line,) = [row for row in merged.splitlines() if row.startswith("| mlp_epoch |")]
    estimate = compare.paired_estimate(rows["mlp_epoch"]["pair_ratios"] * 2)  # the same 2 pairs, twice: 4 pairs
    assert f"| {estimate[0]:.3f} ({estimate[1]:.3f}-{estimate[2]:.3f}) |" in line


def test_interleaved_refuses_a_compiled_row_and_names_those_it_offers(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        _interleaved_here("--workloads", "resnet50_fast", out=tmp_path)
    stderr = capsys.readouterr().err
    assert refused.value.code == 2 and "no row 'resnet50_fast' here: choose from" in stderr
    assert "mlp_epoch" in stderr and not list(tmp_path.iterdir())


# -- benchmarks/data_parallel.py: data-parallel training, harness against hand-written loops ------------------------

data_parallel = _benchmark_script("data_parallel")


def test_a_data_parallel_profile_splits_compute_communication_the_exposed_part_and_idle() -> None:
    # One step on two streams: a GEMM; an NCCL all-reduce that starts under it and outlasts it; a gap (the host was
    # late); one more kernel.
    kernels = [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", 0.0, 100.0),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 50.0, 200.0),
        ("void at::native::vectorized_elementwise_kernel", 300.0, 400.0),
    ]
    profile = data_parallel.timeline(kernels, steps=1, wall_s=0.0005)
    assert profile["compute_ms_per_step"] == 0.2  # 100 + 100 us
    assert profile["communication_ms_per_step"] == 0.15
    assert profile["exposed_communication_ms_per_step"] == 0.1  # 50 of its 150 us ran beside the GEMM
    assert profile["idle_ms_per_step"] == 0.1  # span 400 us, busy 300
    assert profile["kernel_ms_per_step_by_kind"]["communication"] == 0.15


def test_a_jax_trace_gives_the_first_gpus_stream_kernels_not_xlas_annotations() -> None:
    def meta(kind: str, pid: int, name: str, tid: int = 0) -> dict[str, Any]:
        return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}

    events = [
        meta("process_name", 1, "/host:CPU"),
        meta("process_name", 2, "/device:GPU:0"),
        meta("process_name", 3, "/device:GPU:1"),
        meta("thread_name", 2, "Stream #13(Compute)", 7),
        meta("thread_name", 2, "Stream #30(Collective)", 8),
        meta("thread_name", 2, "XLA Ops", 9),
        meta("thread_name", 3, "Stream #13(Compute)", 7),
        {"ph": "X", "pid": 2, "tid": 7, "name": "input_fusion", "ts": 0, "dur": 5},
        {"ph": "X", "pid": 2, "tid": 8, "name": "ncclDevKernel_AllReduce", "ts": 3, "dur": 4},
        {"ph": "X", "pid": 2, "tid": 9, "name": "all-reduce.1", "ts": 0, "dur": 50},  # an op spanning kernels
        {"ph": "X", "pid": 3, "tid": 7, "name": "input_fusion", "ts": 0, "dur": 5},  # the second GPU
        {"ph": "X", "pid": 1, "tid": 1, "name": "PjitFunction", "ts": 0, "dur": 60},  # the host
    ]
    assert data_parallel.jax_kernels(events) == [("input_fusion", 0.0, 5.0), ("ncclDevKernel_AllReduce", 3.0, 7.0)]


def _data_parallel(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "data_parallel.py"), "--device", "cpu", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_data_parallel_refuses_a_device_count_that_is_no_whole_number(tmp_path: Path) -> None:
    finished = _data_parallel("--counts", "0,2", out=tmp_path)
    assert finished.returncode == 2 and "--counts 0,2: whole numbers >= 1, e.g. 1,2" in finished.stderr


@pytest.mark.slow
def test_data_parallel_times_both_sides_in_turns_on_one_process_and_on_two_gloo_ranks(tmp_path: Path) -> None:
    finished = _data_parallel(
        "--smoke",
        *("--frameworks", "pytorch", "--models", "bert_large", "--counts", "1,2", "--rounds", "2"),
        *("--block-seconds", "0.2"),
        out=tmp_path,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    (samples,) = tmp_path.glob("*-data-parallel.json")
    one, two = json.loads(samples.read_text())["rows"]
    for row in (one, two):
        assert row["error"] is None
        assert len(row["bare"]) == 3 and len(row["harness"]) == 2  # bare, harness, bare, harness, bare
        assert row["pair_ratios"][0] == pytest.approx(row["harness"][0] / ((row["bare"][0] + row["bare"][1]) / 2))
    assert two["settings"]["launch"] == "torchrun --standalone --nproc-per-node 2"
    assert "DistributedDataParallel(device_ids=[rank], gradient_as_bucket_view=True)" in two["settings"]["hand-written"]
    assert "device.count=2" in two["settings"]["harness"]
    (line,) = [r for r in (tmp_path / samples.with_suffix(".md").name).read_text().splitlines() if "| 2 | seq/s |" in r]
    efficiency = statistics.median(two["bare"]) / (2 * statistics.median(one["bare"]))
    assert f"| {efficiency:.3f} |" in line  # scaling efficiency against the 1-device row of the same command


# -- benchmarks/doctor_fault.py: the doctor against a synchronize that waits for nothing ------------------------


def test_the_doctors_fault_reaches_pytorchs_device_and_nothing_else(tmp_path: Path) -> None:
    """On a CPU no fault can show in the figures (a CPU's synchronize has nothing to wait for), so this checks the
    fault itself: with the benchmark's sitecustomize first on the path, a new process's TorchDevice.synchronize
    returns at once without touching torch; without it, the adapter's own synchronize is there."""
    fault = _benchmark_script("doctor_fault")
    (tmp_path / "sitecustomize.py").write_text(fault.NO_WAIT)
    probe = (
        "import trainbench.frameworks.pytorch.adapter as a\n"
        "class Untouchable:\n"
        "    def __getattr__(self, name): raise AssertionError(f'synchronize touched torch.{name}')\n"
        "device = object.__new__(a.TorchDevice)\n"
        "device.torch, device.backend = Untouchable(), 'cuda'\n"
        "print(a.TorchDevice.synchronize.__qualname__, device.synchronize())\n"
    )

    def synchronize_in_a_new_process(*path: Path) -> subprocess.CompletedProcess[str]:
        env = {"PYTHONPATH": ":".join(str(p) for p in [*path, ROOT / "src"]), "PATH": str(Path(sys.executable).parent)}
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False)

    faulted = synchronize_in_a_new_process(tmp_path)
    assert faulted.returncode == 0 and faulted.stdout.split() == ["no_wait_synchronize", "None"], faulted.stderr
    sound = synchronize_in_a_new_process()
    assert "synchronize touched torch.cuda" in sound.stderr  # the real one asks torch.cuda to wait
