"""Every input judged before any work: bad input gets exit 2 and one line naming the key and what to do,
never a traceback, never a run recorded. In process (fast), plus a sample through the real entry point."""

from __future__ import annotations

import contextlib
import io
import os
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
    (["tracking.experiment=../../X"], "`tracking.experiment`='../../X' is not valid: must be a name, not a path"),
    (["tracking.experiment=.."], "must be a name, not a path"),
    (["tracking.experiment=a\\b"], "must be a name, not a path"),
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
    (["task=matmul", "task.operands=timeit"], "`task.operands`='timeit'"),
    (["model=resnet50", "data=digits"], "grayscale_to_rgb"),
    (["framework=mlx", "model=vgg16"], "cannot build model"),
    (["model=vit_b16", "data.image_size=40"], "cuts images into 16 px patches: use a multiple of 16"),
    (["model=vit_b16", "model.pretrained=true", "data.image_size=32"], "position embeddings for 224 px images"),
    (
        ["optimize.channels_last=true"],
        "`optimize.channels_last` has moved: use framework.channels_last (framework=pytorch)",
    ),
    (["optimize=fast", "optimize.compile_mode=max-autotune"], "has moved: use framework.compile_mode"),
    (["optimize.fused_optimizer=false"], "has moved: use framework.fused_optimizer"),
    (["optimize.capture=false"], "has moved: use framework.capture"),
    (["optimize.coordinate_descent_tuning=true"], "has moved: use framework.coordinate_descent_tuning"),
    (["model=resnet50", "model.torch_compile_mode=default"], "has moved: use framework.compile_mode"),
    (["model=resnet50", "model.torchvision=resnet18"], "`model.torchvision` is not a setting any more"),
    (["framework=jax", "framework.compile_mode=default"], "framework=pytorch has it"),
    (["framework=jax", "framework.channels_last=false"], "always runs convolutions NHWC"),
    (["framework.channels_last=maybe"], "`framework.channels_last`='maybe' is not valid: true, false or auto"),
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
        ["-m", "data=mnist", "batch_size=16,32", f"data.root={tmp_path / 'data'}", "data.download=false"]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    for file in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert file in err
    assert "trainbench download data=mnist" in err and str(Path("data") / "MNIST" / "raw") in err
    assert runs_in_store(private_store) == 0


# -- issue 28: nonsense that was accepted, and messages that named no key ---------------------------------


# Small cells with a time limit: a line wrongly accepted runs for seconds, never hangs the suite.
SMALL = [*TINY, "cell.timeout_s=120"]


def refused(argv: list[str], store: Path, small: list[str] = SMALL) -> str:
    """`argv` through the real entry point (with `small` settings, so that a line wrongly accepted ends quickly):
    exit 2, one line, no run recorded. Returns the line."""
    given = {a.lstrip("+~").split("=", 1)[0] for a in argv}
    small = [s for s in small if s.split("=", 1)[0] not in given]  # a key given twice is refused on its own
    code, out, err = entry_point([*argv, *small])
    lines = err.strip().splitlines()
    assert code == 2, (argv, out[-500:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("trainbench: "), (argv, err)
    assert runs_in_store(store) == 0, argv
    return lines[0]


def planned(argv: list[str]) -> list[str]:
    """The cells a dry run of `argv` lists (exit 0, nothing on stderr but the naming of a device this machine
    cannot have)."""
    code, out, err = entry_point([*argv, "sweep.dry_run=true"])
    said = [line for line in err.strip().splitlines() if not line.startswith("trainbench: device=gpu: no CUDA device")]
    assert code == 0 and not said, (argv, err)
    lines = out.splitlines()
    return lines[2 : next(i for i, line in enumerate(lines) if line.endswith("(sweep.dry_run=true)"))]


@pytest.mark.parametrize("key", ["cell.timeout", "task.epoch", "sweep.resumee", "data.num_sample"])
def test_a_key_added_with_plus_is_refused_as_its_plain_spelling_is(key, private_store) -> None:
    plain = refused([f"{key}=5"], private_store)
    assert refused([f"+{key}=5"], private_store) == refused([f"++{key}=5"], private_store) == plain
    assert plain.startswith(f"trainbench: `{key}` is not a setting") and "did you mean" in plain


def test_presets_and_hydra_keys_added_with_plus_still_work(private_store) -> None:
    assert len(planned(["+experiment=tf_metal_study"])) == 5  # +tf_metal_cell=... in its own sweep
    assert len(planned(["+experiment=gpu_resnet50_reference", "+hydra.job.env_set.TRAINBENCH_X=1"])) == 1
    assert (
        refused(["+cell.timeout=5"], private_store)
        == "trainbench: `cell.timeout` is not a setting; did you mean cell.timeout_s?"
    )


def test_launcher_values_the_launcher_cannot_take_are_refused_before_anything_runs(private_store) -> None:
    joblib = ["hydra/launcher=joblib"]
    backend = refused([*joblib, "hydra.launcher.backend=bogus"], private_store)
    assert "`hydra.launcher.backend`='bogus'" in backend and "loky" in backend and "threading" in backend
    for n_jobs in ("0", f"-{os.cpu_count() + 1}"):
        line = refused([*joblib, f"hydra.launcher.n_jobs={n_jobs}"], private_store)
        assert f"`hydra.launcher.n_jobs`={n_jobs} is not valid" in line and "-1 for one per CPU" in line
    assert not (private_store.parent / "multirun").exists()  # the launcher never started
    assert len(planned([*joblib, "hydra.launcher.n_jobs=-1", "hydra.launcher.backend=loky"])) == 1
    basic = refused(["hydra.launcher.backend=loky"], private_store)
    assert (
        basic
        == "trainbench: `hydra.launcher.backend` is not a setting of the basic launcher; hydra/launcher=joblib has it"
    )


@pytest.mark.parametrize("key", ["cell", "tracking", "sweep", "batch_size", "cell.timeout_s"])
def test_removing_a_setting_is_refused_as_removing_a_group_is(key, private_store) -> None:
    line = refused([f"~{key}"], private_store)
    assert line.startswith(f"trainbench: `{key}` cannot be removed: every cell has") and "e.g." in line
    assert "is not a setting" not in line  # ~tracking once said "`tracking.uri` is not a setting"


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ("sweep.dry_run=2", "`sweep.dry_run`=2"),
        ("optimize.compile=-1", "`optimize.compile`=-1"),
        ("optimize.compile=1", "`optimize.compile`=1"),
        ("sweep.dry_run=yes", "`sweep.dry_run`='yes'"),
        ("sweep.resume=0", "`sweep.resume`=0"),
        ("sweep.resume=1", "`sweep.resume`=1"),
    ],
)
def test_a_boolean_is_true_or_false_and_resume_exactly_false_true_or_failed(override, shown, private_store) -> None:
    line = refused([override], private_store)
    key = override.split("=")[0]
    assert line.startswith(f"trainbench: {shown} is not valid: must be ") and f"e.g. {key}=true" in line


def test_booleans_and_resume_as_documented_still_pass(private_store) -> None:
    assert len(planned(["optimize.compile=True", "sweep.resume=failed", "hydra.job.chdir=false"])) == 1


def test_a_sweep_of_presets_runs_each_preset_with_its_own_sweep(private_store) -> None:
    both = planned(["+experiment=m1_tensorflow_blog,mlp_depth_study"])
    assert len(both) == 2 + 4 * 2  # device=cpu,gpu; and model.depth=5,10,15,20 x device=cpu,gpu
    assert len(planned(["+experiment=m1_tensorflow_blog,mlp_depth_study", "device=cpu"])) == 1 + 4
    assert sum("depth=20" in row for row in both) == 2


def test_a_preset_whose_own_sweep_chooses_what_its_base_leaves_out_runs_every_cell(tmp_path, private_store) -> None:
    """A one-cell command line is judged before Hydra composes it again, but a preset's own sweep is applied by the
    sweeper only: a preset that leaves the model to its sweep is judged cell by cell, never as its base."""
    presets = tmp_path / "presets"
    (presets / "experiment").mkdir(parents=True)
    (presets / "experiment" / "two_models.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: null\n"
        "hydra:\n  sweeper:\n    params:\n      model: mlp,mlp_deep\n"
    )
    found = [f"hydra.searchpath=[file://{presets}]", "+experiment=two_models", "device=cpu"]
    assert [row.split()[0] for row in planned(found)] == ["pytorch-mlp-cpu-bs64", "pytorch-mlp_deep-cpu-bs64"]
    assert "`model` must be chosen" in refused([f"hydra.searchpath=[file://{presets}]", "model=null"], private_store)


def test_a_setting_of_a_group_the_task_does_not_use_is_refused(private_store) -> None:
    small_matmul = ["task.sizes=[8]", "task.steps=1", "tracking.system_metrics_interval_s=0", "cell.timeout_s=120"]
    line = refused(["data.pipeline=loader", "task=matmul"], private_store, small_matmul)
    assert line.startswith("trainbench: `data.pipeline` changes nothing: task=matmul uses no model, data or optimizer")
    assert "task=train" in line
    swept = refused(["-m", "task=matmul", "model=mlp,resnet18"], private_store, small_matmul)
    assert swept.startswith("trainbench: `model` changes nothing")
    assert len(planned(["-m", "task=train,matmul", "data=digits"])) == 2  # the train cell uses it


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("sweep.dry_run=maybe", "`sweep.dry_run`='maybe' is not valid: must be true or false, e.g. sweep.dry_run=true"),
        ("task.epochs=1.5", "`task.epochs`=1.5 is not valid: must be a whole number, e.g. task.epochs="),
        ("seed=abc", "`seed`='abc' is not valid: must be a whole number, e.g. seed=0"),
        ("optim.lr=fast", "`optim.lr`='fast' is not valid: must be a number, e.g. optim.lr=0.01"),
        ("cell.timeout_s=soon", "`cell.timeout_s`='soon' is not valid: must be a number or null, e.g."),
        ("data.mean=[a]", "`data.mean`=['a'] is not valid: every value must be a number, e.g. data.mean=["),
        (
            "model.hidden_sizes=abc",
            "`model.hidden_sizes`='abc' is not valid: must be a list, e.g. model.hidden_sizes=[",
        ),
        (
            "hydra/launcher=joblib hydra.launcher.n_jobs=all",
            "`hydra.launcher.n_jobs`='all' is not valid: must be a whole",
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_the_key_the_type_and_an_example(override, expected, private_store) -> None:
    line = refused(override.split(), private_store)
    assert line.startswith(f"trainbench: {expected}"), line
    assert "Error merging" not in line and "`overrides`" not in line


def test_a_preset_conflict_names_the_preset_and_the_choice_not_a_key_never_typed(private_store) -> None:
    line = refused(["+experiment=m1_tensorflow_blog", "task=benchmark"], private_store, ["cell.timeout_s=120"])
    assert line.startswith("trainbench: `+experiment=m1_tensorflow_blog` sets task.epochs, which task=benchmark")
    assert "leave out task=benchmark" in line and "task=train" in line and "has moved" not in line
    typed = refused(
        ["+experiment=m1_tensorflow_blog", "task=benchmark", "task.epochs=2"], private_store, ["cell.timeout_s=120"]
    )
    assert typed.startswith("trainbench: `task.epochs` is not a setting of task `benchmark`"), typed


def test_a_sweep_over_hydras_own_settings_and_bad_syntax_name_the_key(private_store) -> None:
    swept = refused(["-m", "hydra.job.chdir=true,false"], private_store)
    assert swept.startswith("trainbench: `hydra.job.chdir` is one of Hydra's own settings")
    syntax = refused(["model=mlp", "data.root=a=b"], private_store)
    assert syntax.startswith("trainbench: `data.root`='a=b' is not valid:") and "data.root='a=b'" in syntax
    forced = refused(["++optim=adamw"], private_store)
    assert forced == "trainbench: `++optim`: ++ sets keys, not a group's choice: choose it with optim=adamw"


def test_a_folder_store_is_refused_with_mlflows_way_out(tmp_path, private_store, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    folder = tmp_path / "runs"
    line = refused([f"tracking.uri={folder}"], private_store)
    assert "MLFLOW_ALLOW_FILE_STORE=true" in line and "sqlite:///" in line
    assert not folder.exists() and not private_store.exists()


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
    "framework.compile_mode",
    "framework.channels_last",
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


FAST_SHARE = 30  # lines checked in the fast tier; the rest (490) in the slow tier: 520 in the suite


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
    from trainbench.config.command_line import check_command_line, parse_args

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
            except ConfigError as error:  # a flag's bad value (`--info model=mlp`): one line
                assert "\n" not in str(error), (argv, str(error))
                refused += 1
                continue
        try:
            check_command_line(args)
            passed += 1
        except ConfigError as error:
            assert "\n" not in str(error), (argv, str(error))
            # every refusal names the key typed: never Hydra's "Error merging override" for the whole line
            assert "Error merging" not in str(error) and not str(error).startswith("`overrides`="), (argv, str(error))
            refused += 1
    # the generator exercises both sides (one line in 30 passes: `+` and `~` on settings are refused since issue 28)
    assert passed >= len(chosen) // 30 and refused >= len(chosen) // 2
    assert runs_in_store(private_store) == 0


@pytest.mark.parametrize(
    "chosen",
    [
        pytest.param(slice(0, 3), id="fast"),
        pytest.param(slice(3, 10), id="rest", marks=pytest.mark.slow),
    ],
)
def test_generated_sweeps_that_pass_the_check_are_judged_whole_before_any_run(chosen, private_store) -> None:
    """The lines that pass the check and sweep: through the real entry point as dry runs (the sweeper
    composes and judges each cell): exit 0 or one line with exit 2, never a traceback, never a run. Ten of
    them in the suite, three in the fast tier (each dry run composes every cell of its sweep)."""
    from trainbench.config import ConfigError
    from trainbench.config.command_line import check_command_line, parse_args

    sweeps = []
    for argv in FUZZ[:300]:
        if len(sweeps) == chosen.stop:  # this share's lines found: each line checked further costs a composition
            break
        if "--cfg" in argv or "--info" in argv or not any("," in a or "(" in a for a in argv):
            continue
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                check_command_line(parse_args(argv))
        except (ConfigError, SystemExit):
            continue
        sweeps.append(argv)
    assert len(sweeps) == chosen.stop  # the share is whole: as many lines as it names
    for argv in sweeps[chosen]:
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


# -- issue 39: nonsense at the edges of the bounds, refused before anything runs ----------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["+hydra.launcher.n_job=2"], "`hydra.launcher.n_job` is not a setting of the basic launcher"),
        (["hydra/launcher=joblib", "+hydra.launcher.n_job=2"], "did you mean hydra.launcher.n_jobs?"),
        (["model.width=-1"], "`model.width`=-1"),
        (["model=mlp_deep", "model.width=0"], "`model.width`=0"),
        (["model=alexnet", "model.min_image_size=-5"], "`model.min_image_size`=-5"),
        (["cell.timeout_s=1e-300"], "`cell.timeout_s`=1e-300"),
        (["cell.timeout_s=1e300"], "`cell.timeout_s`=1e+300"),
        (["batch_size=4", "batch_size=8"], "`batch_size` is given twice (batch_size=4, batch_size=8)"),
        (["-m", "batch_size=4", "batch_size=8,16"], "`batch_size` is given twice"),
        (["model=mlp", "model=resnet18"], "`model` is given twice"),
    ],
    ids=lambda v: " ".join(v)[:50] if isinstance(v, list) else None,
)
def test_typos_negative_sizes_absurd_timeouts_and_repeated_keys_are_refused(argv, named, private_store) -> None:
    line = refused(argv, private_store, small=[*TINY])
    assert named in line, line


def test_a_data_root_that_is_a_file_is_refused_with_one_line(tmp_path, private_store) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    for root in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        line = refused(["-m", "data=cifar10", f"data.root={root}"], private_store)
        assert "`data.root`" in line and "a file, not a folder" in line, line


def test_an_unwritable_sweep_folder_is_refused_before_the_launcher_starts(tmp_path, private_store) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    # /proc takes no new folders, even from root; a file cannot hold one
    for folder in ("/proc/trainbench-sweeps", str(tmp_path / "a-file" / "sweeps")):
        line = refused(
            ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={folder}"], private_store
        )
        assert "`hydra.sweep.dir`" in line and "cannot be written" in line, line
    assert not Path("/proc/trainbench-sweeps").exists()


def test_a_mean_or_std_that_does_not_fit_the_channels_says_how_many_values_they_take(trainbench) -> None:
    """data.channels=1 with the synthetic preset's three-channel mean and std, as a user types it: one line saying
    how many values one channel takes, with overrides that work, for data.mean and then for data.std."""
    one_channel = ["data.image_size=8", "data.channels=1", "data.num_samples=1437", "task.epochs=2"]
    takes = "data.channels=1: data.mean and data.std take 1 value each, e.g. data.mean=[0.5] data.std=[0.25]"
    for argv, line in (
        (one_channel, f"`data.mean`=[0.5, 0.5, 0.5] is not valid: {takes}"),
        ([*one_channel, "data.mean=[0.5]"], f"`data.std`=[0.25, 0.25, 0.25] is not valid: {takes}"),
        (
            ["data=mnist", "data.mean=[0.5,0.5,0.5]"],
            "`data.mean`=[0.5, 0.5, 0.5] is not valid: data=mnist gives 1-channel images (3-channel ones with "
            "data.grayscale_to_rgb=true): data.mean and data.std take 1 value each, e.g. data.mean=[0.5] "
            "data.std=[0.3081]",
        ),
    ):
        done = trainbench(*argv, "sweep.dry_run=false")
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"trainbench: {line}"], done.stderr
        assert done.runs() == []
    # the advice, followed, is a cell that runs
    followed = trainbench(*one_channel, "data.mean=[0.5]", "data.std=[0.25]", "sweep.dry_run=true")
    assert followed.returncode == 0 and "1 cell(s); nothing was run or recorded" in followed.stdout, followed.stderr
