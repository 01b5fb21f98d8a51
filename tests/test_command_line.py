"""The command line explains itself: `--help` through both entry points, `list` through both, whole descriptions,
flags anywhere on the line, one line and exit 2 for a sweeper or launcher trainbench cannot use. Real processes
(`python src/run.py` and the installed `trainbench` command running this checkout's code), each in seconds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, RUN_PY, TINY, Invocation, child_env, invoke
from trainbench import cli, usage
from trainbench.config.command_line import flags_first
from trainbench.config.launchers import installed_launchers
from trainbench.locations import CONF_DIR, choices
from trainbench.measure import hardware

TRAINBENCH = Path(sys.executable).parent / "trainbench"
ENTRY_POINTS = {"run.py": [sys.executable, str(RUN_PY)], "trainbench": [str(TRAINBENCH)]}


def command(entry: str, *args: str, cwd: Path, width: int = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY_POINTS[entry], *args],
        cwd=cwd,
        env=child_env(
            {
                "PYTHONPATH": str(ROOT / "src"),  # the console script runs this checkout's code
                "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}",
                "COLUMNS": str(width),
            }
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def entries(listing: str) -> dict[str, str]:
    """`trainbench list ...` output -> {choice: its description, joined back into one line}."""
    found: dict[str, str] = {}
    for block in re.split(r"\n(?=\S)", listing.strip()):
        name, _, text = block.partition(" ")
        found[name] = " ".join(line.strip() for line in text.splitlines())
    return found


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_help_lists_subcommands_groups_with_options_presets_and_examples(entry, tmp_path) -> None:
    done = command(entry, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = done.stdout
    for subcommand in cli.SUBCOMMANDS:
        assert f"trainbench {subcommand}" in page
    flat = " ".join(page.split())
    for group, _ in usage.GROUPS:
        options = ", ".join(choices(group))
        assert re.search(rf"^  {group} +", page, re.MULTILINE), group
        assert options in flat.replace("*", ""), group  # every option, the default marked
    assert "hydra/launcher basic*, joblib" in flat
    for preset in choices("experiment"):
        assert preset in flat
    assert len(re.findall(r"^  trainbench ", page.split("Examples:")[1], re.MULTILINE)) == 3
    for internal in ("schema/", "schema:", "launch.", "hydra/sweeper", "hydra/job_logging", "tf_metal_cell"):
        assert internal not in page, internal
    assert "Traceback" not in done.stderr


def test_every_group_under_conf_is_in_the_help_or_known_to_be_internal() -> None:
    """A new config group a user chooses from is listed by --help (or declared a building block)."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    assert groups - set(usage.INTERNAL_GROUPS) == {g for g, _ in usage.GROUPS} | {"experiment"}


def test_the_help_pages_examples_are_valid_command_lines(capsys) -> None:
    for example, _ in usage.EXAMPLES:
        argv = example.split()[1:]
        code = cli.main(cli.hydra_entry(), [*argv, "sweep.dry_run=true"])
        out, err = capsys.readouterr()
        assert code == 0 and "nothing was run or recorded" in out, (example, err)


def test_list_works_through_both_entry_points_alike(tmp_path) -> None:
    through_run_py = command("run.py", "list", "models", cwd=tmp_path)
    through_console = command("trainbench", "list", "models", cwd=tmp_path)
    assert through_run_py.returncode == 0, through_run_py.stderr
    assert through_run_py.stdout == through_console.stdout
    assert set(entries(through_run_py.stdout)) == set(choices("model"))
    assert not (tmp_path / "mlflow.db").exists()


def test_list_presets_prints_whole_first_sentences_wrapped(tmp_path) -> None:
    done = command("run.py", "list", "presets", cwd=tmp_path, width=80)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    described = entries(done.stdout)
    assert set(described) == set(choices("experiment"))
    for name, text in described.items():
        assert text.endswith((".", "?")), (name, text)  # a sentence, not a line cut mid-way
    assert described["inference_study"].endswith("on the GPU (32 cells).")
    assert described["pytorch_mps_study"].endswith("batch 4 and 64, the epoch's wall time.")


def test_descriptions_read_past_an_indented_line_until_the_sentence_ends() -> None:
    assert usage.description("optimize", "fast").endswith("MLX: mx.compile of the train step.")
    assert usage.first_sentence("Devlin et al. 2018 did it, e.g. BERT. Then more.") == (
        "Devlin et al. 2018 did it, e.g. BERT."
    )


def test_a_bad_list_is_one_line_naming_the_lists(tmp_path) -> None:
    done = command("run.py", "list", "gpus", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"trainbench: `trainbench list gpus`: list one of {', '.join(usage.LISTS)}"
    ]


@pytest.mark.parametrize(
    "flag_at_the_end",
    [["-m"], ["--multirun"], ["--multirun", "seed=3"]],
    ids=["-m", "--multirun", "--multirun-then-override"],
)
def test_the_multirun_flag_may_follow_the_overrides(flag_at_the_end, tmp_path) -> None:
    done = command("run.py", "model=mlp,resnet18", "sweep.dry_run=true", *flag_at_the_end, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 cell(s); nothing was run or recorded" in done.stdout


def test_flags_move_ahead_of_the_overrides_with_their_values() -> None:
    assert flags_first(["model=mlp", "-m", "seed=1", "--cfg", "job", "x=1"]) == [
        "-m",
        "--cfg",
        "job",
        "model=mlp",
        "seed=1",
        "x=1",
    ]
    assert flags_first(["a=1", "--config-name=other", "b=2"]) == ["--config-name=other", "a=1", "b=2"]
    assert flags_first(["a=1", "--cfg"]) == ["a=1", "--cfg"]  # no value: it must not take an override as one


@pytest.mark.parametrize("sweeper", ["basic", "optuna"])
def test_a_sweeper_other_than_trainbenchs_is_one_line_and_exit_2(sweeper, tmp_path) -> None:
    done = command("run.py", f"hydra/sweeper={sweeper}", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"trainbench: `hydra/sweeper`='{sweeper}' is not valid:")
    assert "leave hydra/sweeper out" in lines[0] and "hydra/launcher=<one of basic, joblib" in lines[0]
    assert not (tmp_path / "mlflow.db").exists()


def test_an_unknown_launcher_is_one_line_and_exit_2(tmp_path) -> None:
    done = command("run.py", "-m", "hydra/launcher=nosuch", "model=mlp,resnet18", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"trainbench: `hydra/launcher`='nosuch' is not valid: choose one of {', '.join(sorted(installed_launchers()))}"
    ]
    assert not (tmp_path / "mlflow.db").exists()


def test_the_dry_run_leaves_the_sweeps_own_switches_out_of_its_rows(tmp_path) -> None:
    done = command("run.py", "-m", "model=mlp,resnet18", "sweep.dry_run=True", "sweep.resume=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()[2:4]
    assert [row.split()[-1] for row in rows] == ["model=mlp", "model=resnet18"]
    assert "sweep." not in "\n".join(rows)


# -- one recorded cell, read by several tests ---------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Invocation:
    """The default cell (device=auto), small, recorded in a store of its own folder, run from that folder."""
    folder = tmp_path_factory.mktemp("recorded")
    result = invoke(folder, *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
@pytest.mark.skipif(
    bool(hardware.labels_for("gpu", hardware.host_tags())), reason="with a GPU here, `auto` resolves in the cell"
)
def test_the_first_line_and_the_summary_name_the_cell_alike(recorded) -> None:
    first = recorded.stdout.splitlines()[0]
    name = re.match(r"\[cell 1/1\] (\S+): ", first).group(1)  # type: ignore[union-attr]
    assert name == "pytorch-mlp-cpu-bs64"
    summary = recorded.stdout.split("cell ", 1)[1].splitlines()
    assert any(row.startswith(f"{name} ") and "finished" in row for row in summary)
    (run,) = recorded.runs()
    assert run.info.run_name == name


@pytest.mark.slow
def test_what_a_run_leaves_beside_its_store_and_where_it_ran_is_git_ignored(recorded) -> None:
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    folder = Path(recorded.uri[len("sqlite:///") :]).parent
    left = sorted(p.name + ("/file" if p.is_dir() else "") for p in folder.iterdir())
    assert {"mlflow.db", "mlflow.db.lock"} <= {name.split("/")[0] for name in left}
    for name in left:
        checked = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", name])
        assert checked.returncode == 0, f"{name} is not git-ignored"


@pytest.mark.slow
def test_a_dry_run_with_resume_says_which_cells_it_would_skip(recorded) -> None:
    folder = Path(recorded.uri[len("sqlite:///") :]).parent
    (done,) = recorded.runs()
    planned = invoke(folder, "-m", "batch_size=64,32", *TINY, "sweep.resume=true", "sweep.dry_run=true")
    assert planned.returncode == 0, planned.stderr[-2000:]
    lines = planned.stdout.splitlines()
    assert lines[0].split() == ["cell", "setting", "plan", "overrides"]
    bs64, bs32 = lines[2:4]
    assert f"skip: recorded in run {done.info.run_id}" in bs64 and "-bs64" in bs64
    assert re.search(r"  run  +batch_size=32", bs32)
    assert "sweep." not in bs64 + bs32
    assert lines[4] == "2 cell(s), 1 would be skipped (sweep.resume); nothing was run or recorded (sweep.dry_run=true)"
    assert [r.info.run_id for r in planned.runs()] == [done.info.run_id]  # nothing recorded


def test_a_dry_run_read_by_a_reader_that_stops_early_ends_quietly(tmp_path) -> None:
    """`trainbench -m ... sweep.dry_run=true | head -1`: the reader is gone before the table is printed."""
    process = subprocess.Popen(
        [sys.executable, str(RUN_PY), "-m", "model=mlp,resnet18", "sweep.dry_run=true"],
        cwd=tmp_path,
        env=child_env({"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 141 and "Traceback" not in stderr, stderr[-2000:]  # 141: as SIGPIPE ends a tool


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--dry-run"], "trainbench: `--dry-run` is not a flag: did you mean the setting sweep.dry_run=...?"),
        (["model=mlp", "--resume"], "trainbench: `--resume` is not a flag: did you mean the setting sweep.resume=...?"),
        (["--multi-run", "model=mlp"], "trainbench: `--multi-run` is not a flag: settings are key=value"),
        (["--cfg", "bogus"], "trainbench: argument --cfg/-c: invalid choice: 'bogus'"),
    ],
    ids=["--dry-run", "--resume", "--multi-run", "--cfg-bogus"],
)
def test_a_flag_trainbench_does_not_take_is_one_line_and_exit_2(argv, line, tmp_path) -> None:
    done = command("run.py", *argv, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(line)
    assert not (tmp_path / "mlflow.db").exists()
