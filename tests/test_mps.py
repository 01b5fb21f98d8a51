"""PyTorch on Apple MPS measures what it claims: no device event is recorded between timed steps (on MPS each one
commits the command buffer), peak_device_memory_mb is a step's largest allocation (not the allocator's cache at
the end), and ops that ran on the CPU instead are tagged and said.

There is no Mac here: the real adapter, tasks and worker run on CPU tensors while the adapter is told it runs on
MPS (or CUDA), with a fake torch.mps (torch.cuda) that writes down every call the cell makes of it, in order,
beside the steps it runs. The run's tags and metrics go into a real MLflow store."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import with_schema

torch = pytest.importorskip("torch")

from trainbench.frameworks.pytorch.adapter import Adapter, TorchDevice  # noqa: E402
from trainbench.frameworks.pytorch.mps import FallbackOps  # noqa: E402

MiB = 2**20
BETWEEN_STEPS = 100 * MiB  # what the fake allocator holds between steps: weights, gradients, optimizer state
IN_FORWARD = 900 * MiB  # ... and while a forward pass runs (its activations): the step's peak
DRIVER = 8192 * MiB  # what Metal holds for the process, the allocator's cache included
STEPS, REPEATS = 6, 2


def fallback_text(op: str) -> str:
    """PyTorch's warning, word for word (aten/src/ATen/mps/MPSFallback.mm)."""
    return (
        f"The operator '{op}' is not currently supported on the MPS backend and will fall back to run on the CPU. "
        "This may have performance implications."
    )


class Backend:
    """torch.mps or torch.cuda as the adapter uses them; every call written to `trace` in order, beside the
    steps ("step": a forward pass of the model)."""

    def __init__(self, trace: list[str]) -> None:
        self.trace = trace
        self.in_forward = False
        backend = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self) -> None:
                backend.trace.append("record")
                self.at = time.perf_counter()

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, later: Any) -> float:
                return (later.at - self.at) * 1000.0

        self.Event = Event
        self.event = SimpleNamespace(Event=Event)

    def synchronize(self) -> None:
        self.trace.append("sync")

    def current_allocated_memory(self) -> int:
        self.trace.append("memory")
        return IN_FORWARD if self.in_forward else BETWEEN_STEPS

    def driver_allocated_memory(self) -> int:
        return DRIVER

    def recommended_max_memory(self) -> int:
        return 16 * 1024 * MiB

    def max_memory_allocated(self) -> int:
        return 3 * 1024 * MiB


class TorchWith:
    """torch, with one accelerator namespace replaced."""

    def __init__(self, name: str, namespace: Backend) -> None:
        self._name, self._namespace = name, namespace

    def __getattr__(self, name: str) -> Any:
        return self._namespace if name == self._name else getattr(torch, name)


class FallingBack:
    """Two ops MPS lacks, run in every forward pass, warning as PyTorch's mps_fallback does: TORCH_WARN_ONCE at
    one call site, so only the first op of the process warns, unless torch.set_warn_always(True)."""

    def __init__(self, ops: tuple[str, ...]) -> None:
        self.ops, self.warned = ops, False

    def __call__(self) -> None:
        for op in self.ops:
            if torch.is_warn_always_enabled() or not self.warned:
                self.warned = True
                warnings.warn(fallback_text(op), UserWarning, stacklevel=1)


class OnFake(Adapter):
    """The real PyTorch adapter, computing on the CPU, whose bound device says it runs on `backend`."""

    def __init__(self, cell: Any, backend: str, fake: Backend, fallbacks: FallingBack | None = None) -> None:
        super().__init__(cell)
        self.torch = TorchWith(backend, fake)
        self.fake_backend, self.fake, self.fallbacks = backend, fake, fallbacks

    def bind(self, device: Any) -> TorchDevice:
        super().bind(device)
        return TorchDevice(self, self.fake_backend)

    def build(self, model: Any, data: Any) -> Any:
        built = super().build(model, data)
        built.network.register_forward_pre_hook(self._forward_begins)
        built.network.register_forward_hook(self._forward_ends)
        return built

    def _forward_begins(self, module: Any, inputs: Any) -> None:
        self.fake.trace.append("step")
        self.fake.in_forward = True
        if self.fallbacks is not None:
            self.fallbacks()

    def _forward_ends(self, module: Any, inputs: Any, output: Any) -> None:
        self.fake.in_forward = False


class Recorded:
    """A real MLflow store (a copy of the session's empty one) with one run to log a cell into."""

    def __init__(self, folder: Path) -> None:
        from mlflow.tracking import MlflowClient

        from trainbench.store.tracking import RunLogger

        self.uri = with_schema(f"sqlite:///{folder / 'mlflow.db'}")
        client = MlflowClient(tracking_uri=self.uri)
        self.run_id = client.create_run(client.create_experiment("mps")).info.run_id
        self.log = RunLogger(self.uri, self.run_id)
        self.client = client

    def data(self) -> Any:
        return self.client.get_run(self.run_id).data


def compose(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(
            compose(
                "config",
                overrides=[
                    "device=cpu",
                    "model=mlp",
                    "model.hidden_sizes=[64]",
                    "data.image_size=8",
                    "batch_size=16",
                    "tracking.system_metrics_interval_s=0",
                    *overrides,
                ],
            )
        )


BENCHMARK = ("task=benchmark", "task.warmup_steps=2", f"task.steps={STEPS}", f"task.repeats={REPEATS}")
INFERENCE = ("task=inference", "task.warmup_steps=2", f"task.steps={STEPS}", "task.latency_steps=4")


def run_cell(
    folder: Path, monkeypatch: pytest.MonkeyPatch, backend: str, task: tuple[str, ...], fallbacks: FallingBack | None
) -> tuple[Any, list[str]]:
    """The cell's process's own code (trainbench.cell.in_cell.run) on the fake backend, logging into a real
    store: (the run's data, the trace)."""
    from trainbench import frameworks, progress
    from trainbench.cell import in_cell
    from trainbench.cell.order import CellOrder
    from trainbench.measure import timing

    cell = compose(*task)
    trace: list[str] = []
    adapter = OnFake(cell, backend, Backend(trace), fallbacks)
    monkeypatch.setattr(frameworks, "load", lambda _: adapter)
    # Every progress line goes into the trace, as "print: TEXT", and there is one between every two timed blocks
    # (however short they are): where it lands shows whether output ever enters a timed region.
    monkeypatch.setattr(progress, "line", lambda text: trace.append(f"print: {text}"))
    monkeypatch.setattr(timing, "BLOCK_LINES_EVERY_S", 0.0)
    recorded = Recorded(folder)
    in_cell.run(CellOrder(cell, task, store=None), recorded.log)
    return recorded.data(), trace


def timed_blocks(trace: list[str]) -> list[list[str]]:
    """What happened between two synchronizations, where that was more than one step: the timed blocks (warm-up
    and synchronized passes run one step between synchronizations)."""
    between: list[list[str]] = [[]]
    for call in trace:
        if call == "sync":
            between.append([])
        else:
            between[-1].append(call)
    return [calls for calls in between if calls.count("step") > 1]


def end_of_last_block(trace: list[str]) -> int:
    """Index in `trace` of the synchronization that closes the last timed block."""
    index, steps = 0, 0
    for position, call in enumerate(trace):
        if call == "sync":
            if steps > 1:
                index = position
            steps = 0
        elif call == "step":
            steps += 1
    return index


# -- 1. no events between timed steps on MPS; CUDA keeps them ------------------------------------------------
@pytest.fixture(scope="module")
def mps_benchmark(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[str], str]:
    """One benchmark cell on the fake MPS, with two ops falling back to the CPU (its stderr kept)."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("mps-benchmark")
    stderr = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, contextlib.redirect_stderr(stderr):
        data, trace = run_cell(folder, monkeypatch, "mps", BENCHMARK, FallingBack(("aten::foo", "aten::bar.out")))
    return data, trace, stderr.getvalue()


def test_mps_timed_blocks_are_steps_between_two_synchronizations_and_nothing_else(
    mps_benchmark: tuple[Any, list[str], str],
) -> None:
    data, trace, _ = mps_benchmark
    assert data.tags["trainbench.backend"] == "mps"
    blocks = timed_blocks(trace)
    assert blocks == [["step"] * STEPS] * REPEATS  # no event recorded, no memory read, inside a timed block
    assert "record" not in trace
    source = data.tags["trainbench.step_time_source"]
    assert source.startswith("synchronized pass of 6 steps after the timed blocks (MPS events are not free")
    for key in ("step_time_ms_p50", "step_time_ms_p99", "samples_per_s"):
        assert data.metrics[key] > 0


def test_progress_lines_come_between_timed_blocks_never_inside_one(mps_benchmark: tuple[Any, list[str], str]) -> None:
    """A line between the blocks, the phases announced before they start, the memory probe announced before its
    step: and no line inside a timed block (each block is its steps between two synchronizations, nothing else)."""
    _, trace, _ = mps_benchmark
    printed = [call for call in trace if call.startswith("print: ")]
    assert "print:   block 1/2: " in [p[: len("print:   block 1/2: ")] for p in printed]
    assert timed_blocks(trace) == [["step"] * STEPS] * REPEATS
    said = [p.removeprefix("print: ").strip() for p in printed]
    phases = ("loading pytorch", "building the model", "warming up: ", "benchmark: ", "per-step times: 6 more steps")
    order = [next(i for i, text in enumerate(said) if text.startswith(phase)) for phase in phases]
    assert order == sorted(order), said
    probe_said = next(i for i, call in enumerate(trace) if call.startswith("print:   the MPS memory probe"))
    assert end_of_last_block(trace) < probe_said < trace.index("memory")


def test_mps_inference_times_requests_without_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, trace = run_cell(tmp_path, monkeypatch, "mps", INFERENCE, None)
    assert "record" not in trace
    assert timed_blocks(trace) == [["step"] * STEPS]  # the throughput block; each request between syncs
    assert data.tags["trainbench.latency_source"].startswith("synchronized pass of 4 requests (MPS events")
    assert data.metrics["latency_ms_p50"] > 0


def test_cuda_keeps_its_events_between_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, trace = run_cell(tmp_path, monkeypatch, "cuda", BENCHMARK, None)
    assert timed_blocks(trace) == [["record"] + ["step", "record"] * STEPS] * REPEATS
    assert data.tags["trainbench.step_time_source"] == "CUDA events between steps"
    assert data.tags["memory.source"] == "torch.cuda.max_memory_allocated"
    assert data.metrics["peak_device_memory_mb"] == 3 * 1024
    assert "trainbench.mps_fallback_ops" not in data.tags


def test_cuda_inference_times_requests_with_events_and_its_throughput_block_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, trace = run_cell(tmp_path, monkeypatch, "cuda", INFERENCE, None)
    # the 4 requests in one block, an event between each; then the throughput block, with none
    assert timed_blocks(trace) == [["record"] + ["step", "record"] * 4, ["step"] * STEPS]
    assert data.tags["trainbench.latency_source"] == "CUDA events between steps"
    assert data.metrics["latency_ms_p50"] > 0 and data.metrics["samples_per_s"] > 0


# -- 2. peak memory on MPS: a step's largest allocation, read after the measurements --------------------------
def test_mps_peak_memory_is_a_steps_largest_allocation_not_the_drivers_cache(
    mps_benchmark: tuple[Any, list[str], str],
) -> None:
    data, trace, _ = mps_benchmark
    assert data.metrics["peak_device_memory_mb"] == IN_FORWARD / MiB  # not DRIVER, nor BETWEEN_STEPS
    assert data.tags["memory.source"].startswith("torch.mps.current_allocated_memory: the largest after any op")
    # read only after the measurements, from the probe step's ops: many reads, none while anything was timed
    assert "memory" not in trace[: end_of_last_block(trace)]
    probe = trace[trace.index("memory") :]
    assert probe.count("step") == 1 and probe.count("memory") > 10


def test_a_failing_probe_step_keeps_the_cells_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory in the probe, after everything was measured: the cell still finishes, and says so."""
    from trainbench.frameworks.pytorch import mps

    cell = compose(*BENCHMARK)
    adapter = OnFake(cell, "mps", Backend([]))
    device = adapter.bind(cell.device)

    def out_of_memory() -> None:
        raise torch.OutOfMemoryError("MPS backend out of memory (MPS allocated: 9 GB)")

    adapter.probe_step = out_of_memory
    after = device.after_task()
    assert after.peak_memory_mb == BETWEEN_STEPS / MiB
    assert after.tags["memory.source"] == (
        f"{mps.PROBED_UNTIL} (the probe step failed: MPS backend out of memory (MPS allocated: 9 GB))"
    )


# -- 3. ops that fell back to the CPU -------------------------------------------------------------------------
def test_every_op_that_fell_back_is_tagged_and_said_in_one_line(mps_benchmark: tuple[Any, list[str], str]) -> None:
    """PyTorch warned of the first op only (once per process); the probe step names both."""
    data, _, stderr = mps_benchmark
    assert data.tags["trainbench.mps_fallback_ops"] == "aten::bar.out,aten::foo"
    lines = [line for line in stderr.splitlines() if "ran on the CPU" in line]
    assert lines == [
        "trainbench: warning: 2 ops ran on the CPU, not MPS (aten::bar.out, aten::foo): the figures include CPU "
        "fallbacks"
    ]


def test_an_mps_cell_without_fallbacks_says_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = run_cell(tmp_path, monkeypatch, "mps", INFERENCE, None)
    assert data.tags["trainbench.mps_fallback_ops"] == "none"


def test_fallback_warnings_are_caught_where_warnings_are_ignored_and_still_shown() -> None:
    shown: list[str] = []

    def show(message: Any, *rest: Any) -> None:
        shown.append(str(message))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # python -W ignore, PYTHONWARNINGS=ignore
        warnings.showwarning = show
        fallbacks = FallbackOps().install()
        warnings.warn(fallback_text("aten::_linalg_svd.U"), UserWarning, stacklevel=1)
        warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
    assert fallbacks.ops == {"aten::_linalg_svd.U"}
    assert shown == [fallback_text("aten::_linalg_svd.U")]  # shown as before; the unrelated one stays ignored


def test_warnings_from_torchs_cpp_code_reach_the_hook() -> None:
    """The fallback warning is TORCH_WARN_ONCE in C++: such warnings arrive through Python's warnings (shown here
    with one on the CPU, x.T of a 3-d tensor, made to warn every time)."""
    seen: list[str] = []
    always = torch.is_warn_always_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest: seen.append(str(message))
        fallbacks = FallbackOps().install()
        torch.set_warn_always(True)
        try:
            torch.ones(2, 3, 4).T  # noqa: B018
        finally:
            torch.set_warn_always(always)
    assert any("x.T" in message for message in seen)  # through the hook, shown as before
    assert fallbacks.ops == set()  # and not taken for a fallback
