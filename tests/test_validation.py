"""Every input judged before any work: bad input gets exit 2 and one line naming the key and what to do,
never a traceback, never a run recorded. In process (fast), plus a sample through the real entry point."""

from __future__ import annotations

import contextlib
import io
import random
import sqlite3
from pathlib import Path

import pytest

from conftest import TINY
from trainbench import cli

# Each example from the issue that once crashed, was accepted and failed inside a cell, or "finished" on
# nonsense, with what the one line must name.
ISSUE_EXAMPLES = [
    (["model=null"], "`model` must be chosen"),
    (["device=null"], "`device` must be chosen"),
    (["~model"], "model"),
    (["~framework"], "framework"),
    (["tracking.experiment="], "tracking.experiment"),
    (["tracking.experiment=   "], "tracking.experiment"),
    (["tracking.experiment=" + "x" * 5000], "characters"),
    (["a" * 3000 + "=1"], "characters"),
    (["-m", "batch_size=range(0)"], "no cells"),
    (["-m", "batch_size=interval(1,2)"], "interval()"),
    (["-m", "--cfg", "job"], "--cfg"),
    (["--cfg", "job", "model=nosuch"], "`model`='nosuch'"),
    (["seed=-1"], "`seed`"),
    (["optim.momentum=-1"], "`optim.momentum`"),
    (["model.hidden_sizes=[-3]"], "`model.hidden_sizes`"),
    (["data.num_classes=0"], "`data.num_classes`"),
    (["model.activation=nope"], "`model.activation`"),
    (["task=matmul", "task.sizes=[99999999]"], "`task.sizes`"),
    (["model=resnet50", "data=digits"], "grayscale_to_rgb"),
    (["framework=tensorflow", "model=resnet50", "model.keras=null"], "cannot build model"),
    (["model=mlp", "model.pretrained=true"], "have it"),
    (["optim.lr=1e400"], "`optim.lr`"),
    (["optim.weight_decay=nan"], "`optim.weight_decay`"),
    (["data.channels=0"], "`data.channels`"),
    (["batch_size=99999999999999999999999"], "`batch_size`"),
    (["framework=jax", "precision=tf32", "device=cpu"], "TF32"),
    (["precision=tf32", "device=cpu"], "TF32"),
    (["lr=0.1"], "optim.lr"),
    (["Model=mlp"], "the settings are"),
    (["foo=1"], "the settings are"),
    (["model.depth=5"], "`model.depth`"),
    (["epochs=2"], "task.epochs"),
    (["optim.name=adam"], "optim=adam"),
    (["cell.memory_limit_mb=256"], "`cell.memory_limit_mb`"),
]


def entry_point(argv: list[str], store: Path | None = None) -> tuple[int, str, str]:
    """The real entry point in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(cli.hydra_entry(), argv)
        except SystemExit as exit_:  # argparse's own exit for a flag Hydra does not know
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    """Any run recorded by mistake lands here, where the tests look for it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "mlflow.db"


def runs_in_store(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute("select count(*) from runs").fetchone()[0])


@pytest.mark.parametrize(
    ("argv", "named"), ISSUE_EXAMPLES, ids=lambda v: " ".join(v)[:50] if isinstance(v, list) else None
)
def test_each_example_from_the_issue_is_refused_with_one_line(argv, named, private_store) -> None:
    code, _, err = entry_point([*argv, "sweep.dry_run=false"] if "--cfg" not in argv else argv)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("trainbench: "), err
    assert named in lines[0]
    assert "Traceback" not in err
    assert runs_in_store(private_store) == 0


def test_missing_datasets_stop_the_whole_sweep_before_any_cell(tmp_path, private_store) -> None:
    code, _, err = entry_point(
        ["+experiment=pytorch_mps_study", f"data.root={tmp_path / 'data'}", "data.download=false"]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    for file in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert file in err
    assert "trainbench download data=mnist" in err and str(Path("data") / "MNIST" / "raw") in err
    assert runs_in_store(private_store) == 0


# -- fuzz ---------------------------------------------------------------------------------------------

KEYS = [
    "batch_size",
    "seed",
    "model",
    "data",
    "task",
    "device",
    "framework",
    "precision",
    "optim",
    "optimize",
    "model.depth",
    "model.width",
    "model.hidden_sizes",
    "model.activation",
    "model.pretrained",
    "model.num_heads",
    "data.image_size",
    "data.num_samples",
    "data.channels",
    "data.num_classes",
    "data.mean",
    "data.std",
    "data.pipeline",
    "data.root",
    "task.epochs",
    "task.steps",
    "task.warmup_steps",
    "task.repeats",
    "task.settle_cv_pct",
    "task.shape",
    "task.sizes",
    "optim.lr",
    "optim.momentum",
    "optim.weight_decay",
    "optim.eps",
    "optimize.compile_mode",
    "model.torch_compile_mode",
    "device.count",
    "cell.timeout_s",
    "cell.memory_limit_mb",
    "cell.max_batch_size",
    "cell.cpus",
    "tracking.experiment",
    "tracking.system_metrics_interval_s",
    "sweep.resume",
    "sweep.lost_after_s",
    "debug.inject_fault",
    "epochs",
    "compile",
    "lr",
    "foo",
    "model.foo",
    "Model",
    "optim.name",
    "hydra.job.chdir",
    "launch.index",
]
VALUES = [
    "0",
    "1",
    "-1",
    "2",
    "32",
    "1.5",
    "-0.5",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "99999999999999999999",
    "",
    " ",
    "null",
    "true",
    "false",
    "abc",
    "'a b'",
    "x" * 300,
    "[]",
    "[1,2]",
    "[-3]",
    "[0.5]",
    "{a:1}",
    "1,2",
    "range(0)",
    "range(1,3)",
    "interval(0,1)",
    "choice(1,2)",
    "glob(*)",
    "${oc.env:HOME}",
    "${nope}",
    "mlp",
    "resnet18",
    "gpu",
    "cpu",
    "tf32",
    "mixed_bf16",
    "fast",
    "sgd",
    "adamw",
    "matmul",
    "benchmark",
    "max",
    "square",
    "vector",
    "failed",
    "digits",
    "synthetic_text",
    "é",
    "a=b",
    '"quoted"',
]
PREFIXES = ["", "", "", "+", "++", "~"]
FLAGS = [[], [], [], ["-m"], ["--cfg", "job"], ["--info"]]


def generated_command_lines(count: int, seed: int = 20261122) -> list[list[str]]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        overrides = []
        for _ in range(rng.randint(1, 3)):
            prefix, key = rng.choice(PREFIXES), rng.choice(KEYS)
            overrides.append(
                f"~{key}" if prefix == "~" and rng.random() < 0.5 else f"{prefix}{key}={rng.choice(VALUES)}"
            )
        lines.append([*rng.choice(FLAGS), *overrides])
    return lines


FUZZ = generated_command_lines(520)


FAST_SHARE = 100  # lines checked in the fast tier; the rest (420) in the slow tier: 520 in the suite


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(slice(0, FAST_SHARE), id="fast"),
        pytest.param(slice(FAST_SHARE, None), id="rest", marks=pytest.mark.slow),
    ],
)
def test_no_generated_command_line_crashes_the_check(lines, private_store) -> None:
    """Generated lines through the check that runs before Hydra: a one-line refusal or a pass, nothing else."""
    from trainbench.config import ConfigError
    from trainbench.config.compose import check_command_line, parse_args

    passed, refused = 0, 0
    chosen = FUZZ[lines]
    for argv in chosen:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                args = parse_args(argv)
            except SystemExit as exit_:
                assert exit_.code == 2, argv
                refused += 1
                continue
        try:
            check_command_line(args)
            passed += 1
        except ConfigError as error:
            assert "\n" not in str(error), (argv, str(error))
            refused += 1
    assert passed >= len(chosen) // 20 and refused >= len(chosen) // 2  # the generator exercises both sides
    assert runs_in_store(private_store) == 0


def test_generated_sweeps_that_pass_the_check_are_judged_whole_before_any_run(private_store) -> None:
    """The lines that pass the check and sweep: through the real entry point as dry runs (the sweeper
    composes and judges each cell): exit 0 or one line with exit 2, never a traceback, never a run."""
    from trainbench.config import ConfigError
    from trainbench.config.compose import check_command_line, parse_args

    sweeps = []
    for argv in FUZZ[: FAST_SHARE * 3]:
        if "--cfg" in argv or "--info" in argv or not any("," in a or "(" in a for a in argv):
            continue
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                check_command_line(parse_args(argv))
        except (ConfigError, SystemExit):
            continue
        sweeps.append(argv)
    assert len(sweeps) >= 10
    for argv in sweeps[:10]:
        code, _, err = entry_point([*argv, "sweep.dry_run=true"])
        assert code in (0, 2), (argv, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (argv, err)
    assert runs_in_store(private_store) == 0


@pytest.mark.slow
def test_a_sample_through_the_real_command(trainbench) -> None:
    """A few of the fuzzed lines and examples as a user types them: a separate process, the real store."""
    sample = [FUZZ[i] for i in range(0, len(FUZZ), 65)] + [argv for argv, _ in ISSUE_EXAMPLES[:4]]
    for argv in sample:
        result = trainbench(*argv, "sweep.dry_run=true", *TINY)
        assert result.returncode in (0, 2), (argv, result.stderr)
        assert "Traceback" not in result.stderr, (argv, result.stderr)
        assert result.runs() == []
