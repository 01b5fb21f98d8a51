"""The conventions users bring from other command-line tools, Hydra and MLflow: `--version` names every version
that matters, Hydra's own flags (tab completion, --cfg, --info, -cn/-cp) work as Hydra documents them, and the
subcommands take the main command's key=value settings. Real processes; tab completion in a real bash."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainbench
from conftest import ROOT, RUN_PY, child_env
from trainbench import cli

TRAINBENCH = Path(sys.executable).parent / "trainbench"
ENTRY_POINTS = {"run.py": [sys.executable, str(RUN_PY)], "trainbench": [str(TRAINBENCH)]}


def command(entry: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY_POINTS[entry], *args],
        cwd=cwd,
        env=child_env(
            {"PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}", **(env or {})}
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_version_names_trainbench_then_each_framework_mlflow_and_hydra_one_line_each(entry, tmp_path) -> None:
    done = command(entry, "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    project = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert project is not None
    assert lines[0] == f"trainbench {project.group(1)}"
    for name, package in [
        ("PyTorch", "torch"),
        ("TensorFlow", "tensorflow"),
        ("JAX", "jax"),
        ("Keras", "keras"),
        ("MLX", "mlx"),
        ("MLflow", "mlflow"),
        ("Hydra", "hydra-core"),
    ]:
        version = installed(package) or "not installed"
        assert f"{name} {version}" in lines, (name, lines)
    assert done.stderr == ""


def completions(tmp_path: Path, entry: str, line: str, cwd: Path) -> list[str]:
    """What tab pressed at the end of `line` offers in a real bash, with the script `-sc install=bash` printed
    sourced the way Hydra's docs say (eval "$(trainbench -sc install=bash)")."""
    install = command(entry, "-sc", "install=bash", cwd=cwd)
    assert install.returncode == 0, install.stderr
    script = tmp_path / "completion.bash"
    script.write_text(install.stdout)
    words = line.split(" ")
    program = f"""
set -e
source {script}
complete -p {"python" if entry == "run.py" else "trainbench"}
COMP_LINE={line!r}
COMP_POINT={len(line)}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
hydra_bash_completion
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        cwd=cwd,
        env=child_env({"PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    registered, *offered = done.stdout.splitlines()
    assert "-F hydra_bash_completion" in registered
    return offered


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_tab_completion_in_bash_offers_groups_options_and_keys(tmp_path) -> None:
    models = completions(tmp_path, "trainbench", "trainbench model=", cwd=tmp_path)
    assert {"model=mlp", "model=resnet50"} <= set(models), models
    assert "task.epochs=" in completions(tmp_path, "trainbench", "trainbench task.ep", cwd=tmp_path)
    top = completions(tmp_path, "run.py", "python src/run.py bat", cwd=ROOT)
    assert top == ["batch_size="], top


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_completion_scripts_for_zsh_and_fish_name_the_command(shell, tmp_path) -> None:
    done = command("trainbench", "-sc", f"install={shell}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hydra_" in done.stdout and "trainbench" in done.stdout


def test_info_prints_hydra_s_report(tmp_path) -> None:
    done = command("trainbench", "--info", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Installed Hydra Plugins" in done.stdout and "Defaults List" in done.stdout


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_config_path_and_name_choose_another_primary_config(entry, tmp_path) -> None:
    configs = tmp_path / "myconf"
    shutil.copytree(ROOT / "conf", configs)
    (configs / "mine.yaml").write_text("defaults:\n  - config\n  - _self_\nbatch_size: 7\n")
    path = str(configs) if entry == "run.py" else "myconf"  # the installed command: relative to here
    done = command(entry, "-cp", path, "-cn", "mine", "--cfg", "job", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^batch_size: 7$", done.stdout, re.MULTILINE), done.stdout[-500:]
    missing = command(entry, "-cp", str(tmp_path / "nowhere"), "-cn", "mine", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "nowhere" in missing.stderr, missing.stderr


@pytest.mark.parametrize("words", [["-sc", "install=tcsh"], ["-sc"], ["-sc", "query=bash"]])
def test_a_wrong_completion_request_is_one_line_and_exit_2(words, tmp_path) -> None:
    done = command("trainbench", *words, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "-sc install=bash" in done.stderr, done.stderr


def one_cell_and_its_sweep(export_file: Path) -> dict:
    """A contributed export file cut down to its first cell and that cell's sweep: the same format, in seconds."""
    exported = json.loads(export_file.read_text())
    cell = next(run for run in exported["runs"] if run["tags"].get("trainbench.kind") == "cell")
    sweep = [run for run in exported["runs"] if run["run_id"] == cell["parent_run_id"]]
    return {**exported, "runs": [*sweep, cell]}


def test_subcommands_take_the_main_command_s_settings_and_keep_their_flags(tmp_path) -> None:
    """Contributed runs go into a store of one's choosing and are listed from there with tracking.uri=... and
    tracking.experiment=..., as the main command takes them (the flags, tests/test_sharing.py)."""
    other = f"sqlite:///{tmp_path / 'other.db'}"
    contributed = tmp_path / "one-cell.json"
    contributed.write_text(json.dumps(one_cell_and_its_sweep(next((ROOT / "results" / "contributed").glob("*.json")))))
    settings = [f"tracking.uri={other}", "tracking.experiment=theirs"]
    imported = command("trainbench", "import", str(contributed), *settings, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "experiment theirs" in imported.stdout and "other.db" in imported.stdout, imported.stdout
    listed = command("trainbench", "results", *settings, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "H100" in listed.stdout, listed.stdout
    wrong = command("trainbench", "results", f"tracking.uri={other}", "model=mlp", cwd=tmp_path)
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "model=mlp" in wrong.stderr and "tracking.uri" in wrong.stderr


@pytest.mark.parametrize("subcommand", ["results", "export", "import", "report", "references", "doctor"])
def test_each_subcommand_s_help_is_whole_and_names_its_settings_and_their_flags(subcommand, tmp_path) -> None:
    done = command("trainbench", subcommand, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = " ".join(done.stdout.split())
    description = " ".join(done.stdout.split("\n\n")[1].split())  # argparse: usage, description, arguments
    assert description.endswith((".", ")")) and description.count("(") == description.count(")"), description
    for setting, flag in cli.SUBCOMMAND_SETTINGS[subcommand].items():
        assert f"{setting}=" in page and (flag is None or flag in page), (setting, flag, done.stdout[-800:])


@pytest.mark.parametrize(("subcommand", "names"), [("list", "models"), ("download", "data="), ("suite", "device=gpu")])
def test_the_subcommands_taking_overrides_have_a_help_page_of_their_own(subcommand, names, tmp_path) -> None:
    """`trainbench list --help` is no refusal, `download --help` no bad override, `suite --help` not the main page."""
    done = command("trainbench", subcommand, "--help", cwd=tmp_path)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout.startswith(f"usage: trainbench {subcommand}") and names in done.stdout, done.stdout
    assert "key=value" in done.stdout or subcommand == "list"


def test_doctor_checks_every_framework_by_default(tmp_path) -> None:
    """Its help promises every installed framework: the default --frameworks names each one in conf/framework/."""
    done = command("trainbench", "doctor", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = re.search(r"\(default:\s*([\w,\s]+)\)", done.stdout)
    assert found is not None, done.stdout
    checked = {name.strip() for name in "".join(found.group(1).split()).split(",")}
    assert {path.stem for path in (ROOT / "conf" / "framework").glob("*.yaml")} <= checked, checked


def test_list_alone_lists_every_group_under_its_heading(tmp_path) -> None:
    from trainbench.locations import choices
    from trainbench.usage import LISTS

    done = command("trainbench", "list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sections = dict(re.findall(r"^(\w+) \(.*?\):\n((?:  .*\n?)+)", done.stdout, re.MULTILINE))
    assert list(sections) == list(LISTS), list(sections)
    for what, group in LISTS.items():
        listed = {line.split()[0] for line in sections[what].splitlines() if not line.startswith("   ")}
        assert listed == set(choices(group)), (what, listed)
    # What it prints is trainbench.choices(), in its order, each choice with its description and its override.
    found = trainbench.choices()
    assert list(found) == list(LISTS)
    for what, listed in found.items():
        printed = [line.split()[0] for line in sections[what].splitlines() if not line.startswith("   ")]
        assert [c.name for c in listed] == printed, what
        assert all(c.description and c.override.endswith(f"={c.name}") for c in listed), what
    with pytest.raises(trainbench.BadInput, match="list one of models, data"):
        trainbench.choices("modles")


def into_a_closed_pipe(entry: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command with its stdout a real pipe whose reader has closed it (`... | head -1` once head has its
    line): every write meets EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*ENTRY_POINTS[entry], *args],
            cwd=cwd,
            env=child_env({"PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    ("entry", "words"),
    [("trainbench", ["-sc", "install=bash"]), ("run.py", ["--cfg", "job"]), ("trainbench", ["list", "models"])],
)
def test_output_into_a_closed_pipe_ends_quietly_as_a_unix_tool_does(entry, words, tmp_path) -> None:
    done = into_a_closed_pipe(entry, *words, cwd=tmp_path)
    assert done.stderr == ""  # no traceback, no "Exception ignored"
    assert done.returncode == 141  # as a shell reports a tool that SIGPIPE ended
