"""Timed regions measure what they claim: a synchronization waits for the device work queued before it in every
path (TensorFlow on Metal: Keras' fit included), a terminal's progress bar does no work inside a timed epoch,
total_time_s is the same quantity whatever task.timed_region, and the benchmark's fit CI is the CI of its mean.

TensorFlow and PyTorch abort when loaded into one process, so the TensorFlow probe runs in a child process of its
own: this file run as a script (`python tests/test_timed_regions.py tensorflow OUT.json`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ROOT, RUN_PY, child_env, with_schema

pytestmark = pytest.mark.slow
QUIET = "tracking.system_metrics_interval_s=0"
# The MLP on 64 real digits in batches of 32: two steps an epoch.
SMALL_DIGITS = [
    "model=mlp",
    "model.hidden_sizes=[8]",
    "data=digits",
    "data.num_samples=64",
    "data.num_val_samples=0",
    "batch_size=32",
    "task.epochs=2",
]


# -- TensorFlow on Metal: synchronize reads back what the last step wrote ------------------------------------------
def tensorflow_probe(out: Path) -> None:
    """In a child process: TensorFlow on the CPU with the adapter's synchronize taken as on tensorflow-metal (the
    hardware is absent: the read-back path runs, on CPU kernels). Writes what each synchronize read back, and
    what a benchmark cell timing Keras' fit logged."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data as datasets
    from trainbench.config import CONF_DIR, validate
    from trainbench.frameworks.tensorflow.adapter import Adapter

    def metal_trainer(*overrides: str) -> tuple[Adapter, Any, list[list[float]]]:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cell = validate(
                compose("config", overrides=["framework=tensorflow", "device=cpu", *SMALL_DIGITS, *overrides])
            )
        adapter = Adapter(cell)
        adapter.bind(cell.device)
        dataset = datasets.load(cell.data, cell.seed)
        trainer = adapter.trainer(adapter.build(cell.model, dataset).network, dataset, cell)
        adapter.backend = "metal"  # synchronize as on tensorflow-metal; the ops still run on the CPU
        reads: list[list[float]] = []
        read_back = adapter.read_back

        def recorded() -> Any:
            values = read_back()
            reads.append([] if values is None else [float(v) for v in values])
            return values

        adapter.read_back = recorded  # type: ignore[method-assign]
        return adapter, trainer, reads

    def first_elements(values: list[Any]) -> list[float]:
        return [float(np.ravel(np.asarray(value))[0]) for value in values]

    report: dict[str, Any] = {}
    adapter, trainer, reads = metal_trainer("task.timed_region=fit")
    trainer.fit(2)  # Keras' own fit, timed by the epoch clock's synchronizations
    in_fit = list(reads)
    adapter.synchronize()  # as the train task's Timer does after fit
    report["fit"] = {
        "reads_in_fit": in_fit,
        "read_after_fit": reads[-1],
        "pending": repr(adapter.pending),
        "state_after_fit": first_elements(adapter.device_state()),
        "iterations": int(trainer.model.optimizer.iterations.numpy()),
    }

    adapter, trainer, reads = metal_trainer("task.timed_region=epoch")
    trainer.begin_epoch(1)
    adapter.synchronize()  # the epoch block's opening synchronization
    before_steps = first_elements(adapter.device_state())
    for index in range(trainer.steps_per_epoch):
        trainer.step(index)
    adapter.pending = None  # what a trainer hands over is not what synchronize may rest on
    adapter.synchronize()
    report["epoch"] = {
        "read_before_steps": reads[0],
        "state_before_steps": before_steps,
        "read_after_steps": reads[1],
        "state_after_steps": first_elements(adapter.device_state()),
        "prepared_first_input": float(np.ravel(trainer.inputs.numpy())[0]),
        "position": int(trainer.position.numpy()),
    }

    report["benchmark_fit"] = run_here(
        "framework=tensorflow",
        "task=benchmark",
        "task.timed_region=fit",
        "task.warmup_steps=1",
        "task.steps=2",
        "task.repeats=3",
        "model=mlp",
        "model.hidden_sizes=[8]",
        "batch_size=16",
    ).series
    out.write_text(json.dumps(report))


@pytest.fixture(scope="module")
def tensorflow_child(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("tensorflow") / "report.json"
    done = subprocess.run(
        [sys.executable, __file__, "tensorflow", str(out)],
        cwd=ROOT,
        env=child_env({"PYTHONPATH": str(ROOT / "src")}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_metal_synchronize_in_fit_reads_back_what_each_epochs_last_step_wrote(tensorflow_child: dict[str, Any]) -> None:
    """Keras' fit hands no output over (pending stays None): each epoch's closing synchronization still copies
    back the optimizer's iteration counter as the epoch's last step left it, and so does the one after fit."""
    fit = tensorflow_child["fit"]
    assert fit["pending"] == "None" and fit["iterations"] == 4  # 2 epochs x 2 steps
    begins, ends = fit["reads_in_fit"][0::2], fit["reads_in_fit"][1::2]
    assert [read[0] for read in begins] == [0.0, 2.0]  # the counter comes first
    assert [read[0] for read in ends] == [2.0, 4.0]
    assert fit["read_after_fit"] == pytest.approx(fit["state_after_fit"])  # the metric sums too
    assert len(fit["read_after_fit"]) > 1


def test_metal_synchronize_waits_for_the_prepared_split_and_the_last_step(tensorflow_child: dict[str, Any]) -> None:
    """Before the first step: the split prepared on the device and the epoch's order are read back (their
    preparation is queued before the block); after the steps: the counters they wrote, with nothing handed over."""
    epoch = tensorflow_child["epoch"]
    assert epoch["read_before_steps"] == pytest.approx(epoch["state_before_steps"])
    assert epoch["prepared_first_input"] in epoch["read_before_steps"]
    assert epoch["read_before_steps"][-1] == 0.0  # the position, reset for the epoch
    assert epoch["read_after_steps"] == pytest.approx(epoch["state_after_steps"])
    assert epoch["read_after_steps"][0] == 2.0 and epoch["read_after_steps"][-1] == epoch["position"] == 2


# -- the benchmark's fit: samples_per_s and its CI from one quantity -----------------------------------------------
def test_the_benchmark_fit_ci_is_the_interval_of_its_wall_clock_rate(tensorflow_child: dict[str, Any]) -> None:
    """samples_per_s is samples per epoch over the fit's wall clock per epoch; its CI is the 95% interval of that
    mean epoch time (from the epochs' own times, logged as epoch_time_s), carried over to the rate: not the
    spread of per-epoch rates around a different mean."""
    from scipy.stats import t

    series = tensorflow_child["benchmark_fit"]
    epochs = [series["epoch_time_s"][str(epoch)] for epoch in (1, 2, 3)]
    wall_per_epoch_s = (series["total_time_s"]["0"] - series["warmup_time_s"]["0"]) / 3
    samples_per_s = series["samples_per_s"]["0"]
    assert samples_per_s == pytest.approx(16 * 2 / wall_per_epoch_s, rel=1e-6)
    assert sum(epochs) <= 3 * wall_per_epoch_s  # the wall clock holds the epochs, and fit's own set-up
    mean_epoch_ci95_s = t.ppf(0.975, 2) * float(np.std(epochs, ddof=1)) / 3**0.5
    assert series["samples_per_s_ci95"]["0"] == pytest.approx(samples_per_s * mean_epoch_ci95_s / wall_per_epoch_s)


# -- a terminal's progress bar stays out of the timed epochs ---------------------------------------------------------
def on_a_terminal(folder: Path, *args: str, timeout_s: float = 300) -> str:
    """`python src/run.py ARGS...` with its output on a pseudo-terminal, as a person runs it: all it wrote there."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    uri = with_schema(f"sqlite:///{folder / 'mlflow.db'}")
    main, terminal = pty.openpty()
    # 24 rows of 120 columns: a new pseudo-terminal is 0 x 0, where tqdm draws nothing.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, str(RUN_PY), *args],
        cwd=folder,
        env=child_env({"MLFLOW_TRACKING_URI": uri}),
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    written = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not select.select([main], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # every writer has closed the terminal
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    assert process.returncode == 0, written.decode(errors="replace")[-3000:]
    return written.decode(errors="replace")


def test_a_terminal_bar_counts_epochs_and_moves_only_between_them(tmp_path: Path) -> None:
    """On a terminal the cell draws a bar (tqdm). No drawing counts steps: the bar moves once an epoch, after
    the epoch's line, outside the timed pass; so a cell's figures do not depend on where its output goes."""
    output = on_a_terminal(
        tmp_path,
        "device=cpu",
        "model=mlp",
        "model.hidden_sizes=[8]",
        "data.image_size=8",
        "data.num_samples=64",
        "data.num_val_samples=0",
        "batch_size=8",  # eight steps an epoch
        "task.epochs=2",
        QUIET,
    )
    drawings = [(m.start(), int(m.group(1)), int(m.group(2))) for m in re.finditer(r"(\d+)/(\d+) \[", output)]
    assert drawings, output[-3000:]  # a bar was drawn: stdout was a terminal
    assert {total for _, _, total in drawings} == {2}, output[-3000:]  # epochs, never the epoch's 8 steps
    first_line, second_line = output.index("epoch 1/2:"), output.index("epoch 2/2:")
    for at, done, _ in drawings:  # each count appears only once its epochs are over
        assert done == 0 or (done == 1 and first_line < at) or (done == 2 and second_line < at), output[-3000:]
    assert max(done for _, done, _ in drawings) == 2


# -- total_time_s: the training alone, whatever task.timed_region ------------------------------------------------
class RecordedLog:
    """A RunLog (trainbench.frameworks.base) that keeps a cell's metrics in memory, step by step, with the moment
    each was logged: for cells run in this process by the cell's own `run` (trainbench.cell.in_cell; no store needed)."""

    def __init__(self) -> None:
        self.series: dict[str, dict[int, float]] = {}
        self.logged_at: dict[str, dict[int, float]] = {}

    def metrics(self, values: Any, step: int = 0) -> None:
        import time

        for key, value in values.items():
            if value is not None:
                self.series.setdefault(key, {})[step] = float(value)
                self.logged_at.setdefault(key, {})[step] = time.perf_counter()

    def tags(self, values: Any) -> None: ...

    def params(self, values: Any) -> None: ...

    def text(self, text: str, artifact_file: str) -> None: ...

    def figure(self, figure: Any, artifact_file: str) -> None: ...


def run_here(*overrides: str) -> RecordedLog:
    """A cell (PyTorch unless the overrides say otherwise) composed as a sweep composes it, run in this process
    on the CPU by the cell's own `run` (trainbench.cell.in_cell)."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.cell import in_cell
    from trainbench.cell.order import CellOrder
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["framework=pytorch", "device=cpu", QUIET, *overrides]))
    log = RecordedLog()
    in_cell.run(CellOrder(cell.task.prepared(cell), overrides, store=None), log)
    return log


# Eight training steps of a tiny MLP beside 500 validation batches: validation takes most of the cell.
HEAVY_VALIDATION = [
    "model=mlp",
    "model.hidden_sizes=[16]",
    "data.image_size=8",
    "data.num_samples=64",
    "data.num_val_samples=4000",
    "batch_size=8",
    "task.epochs=2",
    QUIET,
]


@pytest.mark.parametrize("region", ["epoch", "fit"])
def test_total_time_is_the_training_alone_whatever_the_timed_region(region: str) -> None:
    """total_time_s holds the epochs' training (and what the trainer does around each: shuffle, read-back), not
    their validation nor their logging: with task.timed_region=epoch as with fit, where PyTorch runs the same
    epochs as one block."""
    log = run_here(*HEAVY_VALIDATION, f"task.timed_region={region}")
    epochs = log.series["epoch_time_s"]
    beyond_epochs_s = log.series["total_time_s"][0] - sum(epochs.values())
    assert sorted(epochs) == [1, 2] and "val_accuracy" in log.series
    assert beyond_epochs_s >= 0
    if region == "epoch":
        # Between the two epochs' records: epoch 2's training pass, then its validation (and epoch 1's logging).
        validation_s = log.logged_at["epoch_time_s"][2] - log.logged_at["epoch_time_s"][1] - epochs[2]
        assert beyond_epochs_s < 0.25 * validation_s  # one validation pass alone is 4 times that: two ran
    else:
        assert beyond_epochs_s < 0.1  # validation ran once, after the block


if __name__ == "__main__":
    if sys.argv[1] == "tensorflow":
        tensorflow_probe(Path(sys.argv[2]))
