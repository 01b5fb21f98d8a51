"""`trainbench doctor`: one real run on this CPU (its verdict, exit status, store and export file), bad
arguments, and the checks as pure functions fed the figures of hardware that is not here (Apple GPUs, a
synchronize that does not wait)."""

from __future__ import annotations

import getpass
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, child_env, runs_in, with_schema
from trainbench import cli as entry_point
from trainbench.doctor.checks import Cell, check_cell, check_energy, check_hardware, check_memory, check_timing
from trainbench.doctor.plan import plan
from trainbench.measure.timing import time_block, warm_up
from trainbench.store.sharing import file_format
from trainbench.tasks.benchmark import sync_check

TRAINBENCH = Path(sys.executable).parent / "trainbench"
VERDICT_LINE = re.compile(r"^(ok|warn|FAIL) +(\S+(?: \S+)*) {2,}(\w+) +(.*)$")
CHECKS = ["run", "timing", "memory", "energy", "hardware"]
# What a shared file must never hold: absolute paths of the places a checkout or a home lives.
PRIVATE_PATHS = ("/home/", "/Users/", "/root/", "/tmp/", "/private/var/", "/var/folders/", "C:\\Users")
GENERIC_NAMES = {"localhost", "root", "user", "admin", "ubuntu", "debian", "linux", "runner", "none"}


def trainbench(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `trainbench` command running this checkout's code."""
    return subprocess.run(
        [str(TRAINBENCH), *args],
        cwd=cwd,
        env=child_env({"PYTHONPATH": str(ROOT / "src"), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=600,
    )


@dataclass
class Checked:
    folder: Path
    completed: subprocess.CompletedProcess[str]
    user_store: Path

    def lines(self) -> dict[tuple[str, str], tuple[str, str]]:
        """(subject, check) -> (status, text) for every verdict line."""
        found = {}
        for line in self.completed.stdout.splitlines():
            match = VERDICT_LINE.match(line)
            if match:
                status, subject, check, text = match.groups()
                found[(subject, check)] = (status, text)
        return found

    def export(self) -> Path:
        (shown,) = re.findall(r"^Share: (\S+) \(", self.completed.stdout, re.MULTILINE)
        return self.folder / shown


def doctor(folder: Path, frameworks: str) -> Checked:
    """`trainbench doctor --frameworks FRAMEWORKS` as a user runs it, with $MLFLOW_TRACKING_URI naming the user's
    own store."""
    user_store = folder / "mine" / "mlflow.db"
    started = time.perf_counter()
    completed = trainbench(
        folder, "doctor", "--frameworks", frameworks, env={"MLFLOW_TRACKING_URI": f"sqlite:///{user_store}"}
    )
    print(f"trainbench doctor took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return Checked(folder, completed, user_store)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """The doctor once, on PyTorch (a framework with a device clock; MLX, one without, is the next test's:
    each framework's cell costs ~10 s of CPU, TensorFlow's import alone 10 s more). The tests that read it are
    the slow tier's (the doctor's run takes ~18 s); the fast tier checks each check's verdicts on figures below."""
    return doctor(tmp_path_factory.mktemp("doctor"), "pytorch")


@pytest.mark.slow
def test_the_verdict_has_a_line_per_check_and_pytorch_on_this_cpu_passes(checked: Checked) -> None:
    out = checked.completed.stdout
    assert checked.completed.returncode == 0, out + checked.completed.stderr
    assert "Traceback" not in out + checked.completed.stderr
    lines = checked.lines()
    assert {check: lines[("PyTorch CPU", check)][0] for check in CHECKS} == dict.fromkeys(CHECKS, "ok"), out
    timing = lines[("PyTorch CPU", "timing")][1]
    assert "2N x" in timing and "synced x" in timing and "(allowed x0.67-1.5)" in timing and "of peak" in timing
    assert lines[("GPU", "device")][0] == "ok"  # no GPU here: a line, not a failure
    assert not any(subject.startswith(("TensorFlow", "MLX")) for subject, _ in lines)  # not asked for
    assert "agree within x1.5" in out and "1.5 x the device's peak" in out  # the tolerances, stated
    assert re.search(r"^Verdict: ok \(0 FAIL, \d+ warn\)", out, re.MULTILINE)


@pytest.mark.slow
def test_mlx_without_a_device_clock_gets_a_line_per_check(tmp_path: Path) -> None:
    mlx = doctor(tmp_path, "mlx")
    out = mlx.completed.stdout
    assert mlx.completed.returncode == 0, out + mlx.completed.stderr
    assert "Traceback" not in out + mlx.completed.stderr
    lines = mlx.lines()
    assert all(("MLX CPU", check) in lines for check in CHECKS) or lines[("MLX", "install")][0] == "warn", out
    assert not any(subject.startswith("PyTorch") for subject, _ in lines)  # not asked for
    assert re.search(r"^Verdict: ok \(0 FAIL, \d+ warn\)", out, re.MULTILINE)


@pytest.mark.slow
def test_the_cells_go_to_a_store_of_their_own(checked: Checked) -> None:
    assert not checked.user_store.parent.exists()  # $MLFLOW_TRACKING_URI's store was not touched
    (store,) = (checked.folder / "outputs" / "doctor").glob("*/mlflow.db")
    cells = [r for r in runs_in(f"sqlite:///{store}") if r.data.tags.get("trainbench.kind") == "cell"]
    pytorch = [r for r in cells if r.data.tags["trainbench.framework"] == "pytorch"]
    assert [r.data.tags["trainbench.backend"] for r in pytorch] == ["cpu"]
    assert pytorch[0].data.metrics["sync_check_block_step_ms"] > 0  # measured by the cell, through run.py


@pytest.mark.slow
def test_the_export_imports_into_a_fresh_store_and_names_no_one(
    checked: Checked, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = checked.export()
    exported = file_format.load(path)
    cells = [r for r in exported.runs if r.tags.get("trainbench.kind") == "cell"]
    assert cells and all(r.tags.get("hw.label") and r.tags.get("trainbench.backend") for r in cells)

    text = path.read_text()
    needles = [str(checked.folder), str(checked.folder.parent), str(Path.home()), str(ROOT), *PRIVATE_PATHS]
    for name in (socket.gethostname(), getpass.getuser()):
        if len(name) > 3 and name.lower() not in GENERIC_NAMES:
            needles.append(name)
    assert [needle for needle in needles if needle in text] == []

    # `trainbench import FILE` in this process: a process of its own would add an interpreter and MLflow's
    # import (seconds) to what is checked here (test_sharing.py runs the command as one).
    fresh = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert entry_point.main(entry_point.hydra_entry(), ["import", str(path), "--uri", fresh]) == 0, capsys.readouterr()
    assert f"{len(exported.runs)} runs imported" in capsys.readouterr().out
    assert len(runs_in(fresh)) == len(exported.runs)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--frameworks", "torch"], "--frameworks 'torch': choose from pytorch, tensorflow, mlx, jax"),
        (["--out", "taken"], "--out taken: already holds files"),
        (["--steps", "5"], "unrecognized arguments: --steps 5"),
    ],
)
def test_bad_arguments_get_one_line_exit_2_and_run_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    refused = trainbench(tmp_path, "doctor", *args)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("trainbench doctor: ") and says in line
    assert refused.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.slow
def test_the_python_api_runs_the_doctor_and_returns_its_verdict_as_findings(
    checked: Checked, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trainbench.run_doctor: the command's cells and checks from Python, quietly; its findings are the command's
    verdict lines (same statuses, subjects and checks as the module's run), and its export file holds the runs."""
    import trainbench

    monkeypatch.chdir(tmp_path)
    found = trainbench.run_doctor(["pytorch"], out=tmp_path / "doctor", output="quiet")
    assert found.passed, found.findings
    assert {(f.subject, f.check): f.status for f in found.findings} == {
        key: status for key, (status, _) in checked.lines().items()
    }
    assert found.folder == (tmp_path / "doctor").resolve() and (found.folder / "mlflow.db").exists()
    assert found.export_file is not None and found.export_file.parent == found.folder
    assert len(file_format.load(found.export_file).runs) == found.exported_runs > 0


def test_the_python_api_refuses_bad_arguments_before_running_anything(tmp_path: Path) -> None:
    import trainbench

    with pytest.raises(trainbench.BadInput, match="--frameworks 'caffe': choose from pytorch"):
        trainbench.run_doctor(["caffe"], out=tmp_path / "new")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(trainbench.BadInput, match="already holds files"):
        trainbench.run_doctor(["pytorch"], out=tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


# ------------------------------------------------------------------------------------------ pure checks

MPS = {"trainbench.framework": "pytorch", "trainbench.backend": "mps", "hw.gpu_vendor": "apple"}
MPS_EVENTS = {**MPS, "trainbench.step_time_source": "MPS events between steps"}
METAL = {"trainbench.framework": "tensorflow", "trainbench.backend": "metal", "hw.gpu_vendor": "apple"}
# PyTorch on an M1's GPU, the seed MLP at batch 512: ~18 ms a step, a third of the chip's fp32 peak.
SOUND = {
    "sync_check_block_step_ms": 18.0,
    "sync_check_double_block_step_ms": 18.2,
    "sync_check_synchronized_step_ms": 18.9,
    "sync_check_fastest_block_step_ms": 17.8,
    "sync_check_fastest_double_block_step_ms": 17.9,
    "sync_check_fastest_synchronized_step_ms": 18.5,
    "sync_check_timed_block_step_ms": 18.0,
    "step_time_ms_mean": 18.1,
    "mfu": 0.33,
}


@pytest.mark.parametrize(
    ("tags", "figures"),
    [
        (MPS_EVENTS, SOUND),
        # A busy two-core machine (CI, PyTorch on one core): most blocks of N caught other work, most synchronized
        # steps a quiet spell, so the medians are x0.60 apart; the fastest rounds agree.
        (
            {"trainbench.framework": "pytorch", "trainbench.backend": "cpu"},
            {"sync_check_block_step_ms": 5.26, "sync_check_double_block_step_ms": 5.73}
            | {"sync_check_synchronized_step_ms": 3.16, "sync_check_fastest_block_step_ms": 2.57}
            | {"sync_check_fastest_double_block_step_ms": 2.61, "sync_check_fastest_synchronized_step_ms": 2.74},
        ),
    ],
    ids=["m1-mps", "busy-machine"],
)
def test_sound_timing_passes(tags: dict[str, str], figures: dict[str, float]) -> None:
    found = check_timing(figures, tags)
    assert found.status == "ok", found.text


@pytest.mark.parametrize(
    ("tags", "figures", "says"),
    [
        # MPS: every block times the queueing alone (50 us a step); the events and the peak know better.
        (
            MPS_EVENTS,
            {**SOUND, **dict.fromkeys(["sync_check_block_step_ms", "sync_check_double_block_step_ms"], 0.05)}
            | {"sync_check_synchronized_step_ms": 0.06, "sync_check_fastest_block_step_ms": 0.04}
            | {"sync_check_fastest_double_block_step_ms": 0.045, "sync_check_fastest_synchronized_step_ms": 0.055},
            "faster than the device's events and faster than the device's peak",
        ),
        # Metal, no events: the first block of N is queueing alone, the 2N block fills the queue and waits.
        (
            METAL,
            {**SOUND, "sync_check_block_step_ms": 0.06, "sync_check_double_block_step_ms": 9.5}
            | {"sync_check_fastest_block_step_ms": 0.05, "sync_check_fastest_double_block_step_ms": 9.4},
            "faster than the device's peak",
        ),
        # A GPU with no events and no known peak: only the 2N blocks and the synchronized steps tell.
        (
            METAL,
            {"sync_check_block_step_ms": 0.06, "sync_check_double_block_step_ms": 9.5}
            | {"sync_check_synchronized_step_ms": 18.0, "sync_check_fastest_block_step_ms": 0.05}
            | {"sync_check_fastest_double_block_step_ms": 9.4, "sync_check_fastest_synchronized_step_ms": 17.5},
            "2N x188.00, synced x350.00 out of bounds",
        ),
    ],
    ids=["mps-events", "metal-peak", "no-peak"],
)
def test_a_synchronize_that_times_only_the_queueing_fails(
    tags: dict[str, str], figures: dict[str, float], says: str
) -> None:
    found = check_timing(figures, tags)
    assert found.status == "FAIL" and says in found.text, found.text


class FakeGpu:
    """A device that runs queued work on its own thread, `step_s` a step, with a queue `depth` steps deep; its
    events are timestamps taken on that thread. A broken synchronize returns at once."""

    def __init__(self, step_s: float, depth: int, waits: bool) -> None:
        self.work: queue.Queue[float | list[float]] = queue.Queue(maxsize=depth)
        self.step_s, self.waits, self.source = step_s, waits, "fake GPU events between steps"
        self.marks: list[list[float]] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            item = self.work.get()
            if isinstance(item, list):
                item.append(time.perf_counter())  # an event: stamped when the device reaches it
            else:
                time.sleep(item)
            self.work.task_done()

    def step(self, index: int = 0) -> None:
        self.work.put(self.step_s)

    def synchronize(self) -> None:
        if self.waits:
            self.work.join()

    def reserve(self, marks: int) -> None:
        pass

    def mark(self) -> None:
        self.marks.append([])
        self.work.put(self.marks[-1])

    def durations_s(self) -> list[float]:
        self.work.join()  # reading an event's time waits for it, as torch's elapsed_time does
        stamps, self.marks = [m[0] for m in self.marks], []
        return [later - earlier for earlier, later in zip(stamps, stamps[1:], strict=False)]


@pytest.mark.parametrize("waits", [True, False], ids=["sound-sync", "broken-sync"])
def test_the_timing_check_tells_a_broken_synchronize_on_a_fake_gpu(waits: bool) -> None:
    gpu = FakeGpu(step_s=0.02, depth=64, waits=waits)  # 20 ms: a busy host's wake-up delays stay a few percent
    warm_up(gpu.step, gpu.synchronize, 3)
    figures = sync_check(gpu.step, 4, 3, gpu.synchronize, gpu)
    timed = time_block(gpu.step, 20, gpu.synchronize, gpu)
    figures["sync_check_timed_block_step_ms"] = 1000 * timed.seconds / timed.steps
    figures["step_time_ms_mean"] = 1000 * sum(timed.step_times_s or []) / timed.steps
    found = check_timing(figures, {"trainbench.step_time_source": gpu.source})
    assert found.status == ("ok" if waits else "FAIL"), found.text


def test_an_apple_machine_reads_its_energy_memory_and_name() -> None:
    tags = {**MPS, "hw.label": "Apple M1 GPU (8 cores)", "hw.memory_gb": "16.0", "energy.source": "apple"}
    metrics = {"peak_host_memory_mb": 900.0, "peak_device_memory_mb": 420.0, "num_parameters": 12_297_010.0}
    energy = check_energy({"avg_power_w": 9.5, "energy_j": 19.1}, tags)
    assert energy.status == "ok" and "powermetrics --samplers gpu_power" in energy.text
    assert check_memory(metrics, tags).status == "ok"  # 47 MB of weights, 16 GB of unified memory
    assert check_hardware(tags).status == "ok"

    no_zeus = check_energy({}, {**tags, "energy.source": "none", "energy.reason": "no counter was found"})
    assert no_zeus.status == "warn" and "pip install 'zeus[apple]'" in no_zeus.text
    assert check_memory({**metrics, "peak_device_memory_mb": 3.0}, tags).status == "FAIL"  # below its weights
    assert check_hardware({**tags, "hw.label": "Apple M1 GPU (cores unknown)"}).status == "FAIL"
    assert check_hardware({**tags, "trainbench.backend": "cuda"}).status == "FAIL"  # an Apple GPU says cuda


def test_mps_fallback_ops_are_listed_and_a_missing_device_is_a_warning() -> None:
    tags = {**MPS, "trainbench.mps_fallback_ops": "aten::_ctc_loss, aten::nonzero"}
    cell = Cell("pytorch", "gpu", "finished", "", {}, tags)
    (fallback,) = [f for f in check_cell(cell) if f.check == "fallback"]
    assert fallback.status == "warn" and "aten::_ctc_loss, aten::nonzero" in fallback.text

    missing = Cell("tensorflow", "gpu", "unavailable", "no Metal GPU visible to TensorFlow 2.19.1")
    (line,) = check_cell(missing, gpu_vendor="apple")
    assert line.status == "warn" and "tensorflow-metal 1.2 loads only with TensorFlow 2.18.1-2.19" in line.text


def test_a_mac_without_tensorflow_metal_checks_tensorflow_on_its_cpu() -> None:
    sweeps, notes = plan(["pytorch", "tensorflow", "mlx"], {"pytorch", "tensorflow"}, {"hw.gpu_vendor": "apple"})
    assert [(s.device, s.frameworks) for s in sweeps] == [("gpu", ["pytorch"]), ("cpu", ["pytorch", "tensorflow"])]
    said = {(n.subject, n.status): n.text for n in notes}
    assert "tensorflow-metal not installed" in said[("TensorFlow", "warn")]
    assert said[("MLX", "warn")].startswith("not installed")
