"""The dependency set, for every platform we promise, without that platform at hand.

Fast: each requirement line (requirements-core.txt, and the extras of pyproject.toml that requirements.txt installs)
is parsed and its environment marker evaluated, as pip does, for a described machine (macOS 11-26 on Apple silicon,
Intel Macs, Linux; Python 3.11 and 3.12): which packages each platform gets, what each extra brings, which lock in
locks/ each machine takes and what those locks pin. Slow (the package index): each lock still resolves for its
platform with uv (tools/lock.py --check): pip's own `--platform` dry run evaluates markers for the machine it runs
on, so it cannot show what a Mac would get; `uv pip compile --python-platform` resolves for the target.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from conftest import ROOT, TINY

_spec = importlib.util.spec_from_file_location("lock", ROOT / "tools" / "lock.py")
assert _spec is not None and _spec.loader is not None
lock = importlib.util.module_from_spec(_spec)
sys.modules["lock"] = lock  # dataclasses look their module up while the class is made
_spec.loader.exec_module(lock)

requirement_lines = lock.requirement_lines  # every line requirements.txt installs: core, [all], [test]
machine = lock.marker_environment
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


MACHINES = {
    "macOS 11 arm64": machine("Darwin", "arm64", "20.6.0", "3.11"),
    "macOS 12 arm64": machine("Darwin", "arm64", "21.6.0", "3.11"),
    "macOS 13 arm64": machine("Darwin", "arm64", "22.6.0", "3.11"),
    "macOS 13 arm64 py3.12": machine("Darwin", "arm64", "22.6.0", "3.12"),
    "macOS 14 arm64": machine("Darwin", "arm64", "23.6.0", "3.11"),
    "macOS 14 arm64 py3.12": machine("Darwin", "arm64", "23.6.0", "3.12"),
    "macOS 15 arm64": machine("Darwin", "arm64", "24.6.0", "3.12"),
    "macOS 26 arm64": machine("Darwin", "arm64", "25.0.0", "3.12"),
    "macOS 13 x86_64": machine("Darwin", "x86_64", "22.6.0", "3.11"),
    "macOS 14 x86_64": machine("Darwin", "x86_64", "23.6.0", "3.12"),
    "Linux x86_64": machine("Linux", "x86_64", "6.8.0-45-generic", "3.11"),  # not a PEP 440 version
    "Linux x86_64 py3.12": machine("Linux", "x86_64", "5.15.167.4-microsoft-standard-WSL2", "3.12"),
}


def selected(environment: dict[str, str], lines: list[str] | None = None) -> dict[str, Requirement]:
    """What pip installs of `lines` (every line requirements.txt installs) on that machine: name[extras] ->
    requirement."""
    chosen: dict[str, Requirement] = {}
    for line in requirement_lines() if lines is None else lines:
        requirement = Requirement(line)
        marker = Marker(str(requirement.marker)) if requirement.marker else None
        if marker is None or marker.evaluate(environment):
            key = requirement.name + (f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else "")
            assert key not in chosen, f"{key} is selected twice on this machine"
            chosen[key] = requirement
    return chosen


@pytest.mark.parametrize("name", MACHINES)
def test_each_platform_gets_the_frameworks_that_install_and_load_there(name: str) -> None:
    environment = MACHINES[name]
    packages = selected(environment)
    apple_silicon = environment["sys_platform"] == "darwin" and environment["platform_machine"] == "arm64"
    darwin_major = int(environment["platform_release"].split(".")[0]) if apple_silicon else 0
    for common in ("torch", "torchvision", "transformers", "keras", "keras-hub", "jax", "mlflow", "hydra-core", "zeus"):
        assert common in packages, common
    if apple_silicon:
        # Metal for TensorFlow on every supported macOS: the pair that loads together (tensorflow-metal 1.2.0
        # needs TF 2.18.1-2.19 and Python <= 3.12).
        assert str(packages["tensorflow"].specifier) == "==2.19.1"
        assert str(packages["tensorflow-metal"].specifier) == "==1.2.0"
        assert "zeus[apple]" in packages
        # MLX's wheels need macOS 14 (Darwin 23): older macOS gets everything else.
        assert ("mlx" in packages) == (darwin_major >= 23), darwin_major
        assert "mlx[cpu]" not in packages
    elif environment["sys_platform"] == "darwin":  # an Intel Mac (or an x86_64 Python under Rosetta)
        for absent in ("mlx", "mlx[cpu]", "tensorflow", "tensorflow-metal", "zeus[apple]"):
            assert absent not in packages, absent
    else:
        assert str(packages["tensorflow"].specifier) == "==2.21.*"
        assert "mlx[cpu]" in packages and "mlx" not in packages
        assert "tensorflow-metal" not in packages and "zeus[apple]" not in packages


def test_tensorflow_metal_comes_only_with_a_tensorflow_and_a_python_it_loads_with() -> None:
    python_313 = {**MACHINES["macOS 14 arm64"], "python_version": "3.13", "python_full_version": "3.13.1"}
    for environment in [*MACHINES.values(), python_313]:
        packages = selected(environment)
        if "tensorflow-metal" in packages:
            assert str(packages["tensorflow"].specifier) == "==2.19.1"
            assert environment["python_version"] in ("3.11", "3.12")
    assert "tensorflow-metal" not in selected(python_313)


def test_no_marker_compares_the_os_release_as_a_version() -> None:
    """`platform_release >= "23"` would read well, but pip 24.1 to 25.3 (packaging 22-25) stop with InvalidVersion
    on a Linux kernel release such as "6.8.0-45-generic": `pip install -r requirements.txt` would fail on Linux."""
    for line in requirement_lines():
        assert not re.search(r"platform_release\s*(<|>|~=|===?)", line), line
        assert not re.search(r"[\"']\s*(<|>|~=|===?)\s*platform_release", line), line


def test_the_mlx_adapter_without_mlx_says_the_cell_cannot_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """On macOS 13 requirements.txt leaves MLX out: an MLX cell is then recorded unavailable with this one line
    (the worker records any DeviceUnavailable so), not failed with a traceback."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate
    from trainbench.frameworks.base import DeviceUnavailable
    from trainbench.frameworks.mlx.adapter import Adapter

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=["framework=mlx", "device=cpu", "model=mlp"]))
    monkeypatch.setitem(sys.modules, "mlx", None)  # `import mlx.core` raises ModuleNotFoundError, as on macOS 13
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    monkeypatch.setenv("MLX_ENABLE_TF32", "0")  # the adapter sets it; monkeypatch puts it back
    with pytest.raises(DeviceUnavailable, match=r"^MLX cannot be imported: .*\(import of mlx(\.core)? halted"):
        Adapter(cell)


@pytest.mark.parametrize(
    ("system", "arch", "version", "says"),
    [
        ("Darwin", "arm64", "13.6.1", "its wheels need macOS 14 or newer, and this Mac runs macOS 13.6.1"),
        ("Darwin", "arm64", "12.7.4", "its wheels need macOS 14 or newer, and this Mac runs macOS 12.7.4"),
        ("Darwin", "x86_64", "14.5", "on a Mac it needs Apple silicon (arm64), and this Python runs on x86_64"),
        ("Darwin", "arm64", "14.5", "`pip install mlx`"),
        ("Linux", "x86_64", "", "install trainbench's [mlx] extra (mlx[cpu], glibc 2.35+)"),
    ],
)
def test_the_reason_names_what_mlx_needs(system: str, arch: str, version: str, says: str) -> None:
    from trainbench.frameworks.mlx import why_no_mlx

    reason = why_no_mlx(system, arch, version)
    assert reason.startswith("MLX cannot be imported: ") and says in reason and "\n" not in reason


# ------------------------------------------------------------------------------------------------ the extras

FRAMEWORK_PACKAGES = {"torch", "torchvision", "transformers", "tensorflow", "tensorflow-metal", "keras", "keras-hub"}
FRAMEWORK_PACKAGES |= {"jax", "mlx"}


def extra_packages(extra: str, environment: dict[str, str]) -> set[str]:
    return {requirement.name for requirement in selected(environment, EXTRAS[extra]).values()}


@pytest.mark.parametrize("name", ["Linux x86_64", "macOS 14 arm64", "macOS 13 arm64"])
def test_each_extra_brings_its_own_framework_and_the_core_none(name: str) -> None:
    """`pip install -e ".[torch]"` must not bring TensorFlow, JAX or MLX: each extra is one framework's packages."""
    environment = MACHINES[name]
    core = [line for line in requirement_lines() if not any(line in lines for lines in EXTRAS.values())]
    assert not {r.name for r in selected(environment, core).values()} & FRAMEWORK_PACKAGES
    assert extra_packages("torch", environment) == {"torch", "torchvision", "transformers"}
    tensorflow = {"tensorflow", "keras", "keras-hub"} | ({"tensorflow-metal"} if name.startswith("macOS") else set())
    assert extra_packages("tensorflow", environment) == tensorflow
    assert extra_packages("jax", environment) == {"jax", "keras", "keras-hub"}
    assert extra_packages("mlx", environment) == (set() if name == "macOS 13 arm64" else {"mlx"})
    assert EXTRAS["all"] == ["trainbench[torch,tensorflow,jax,mlx]"]


def test_requirements_txt_installs_every_framework_the_tests_tools_and_the_locks() -> None:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert "-e .[all,test]" in lines and "-c locks/constraints.txt" in lines
    named = re.findall(r"^-c (\S+)$", lock.CONSTRAINTS.read_text(), flags=re.MULTILINE)
    assert sorted(named) == sorted(path.name for path in lock.LOCKS.glob("*.txt") if path != lock.CONSTRAINTS)
    assert sorted(named) == sorted(platform.path.name for platform in lock.PLATFORMS)


def hidden(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose Pythons cannot import `modules`, as if they were not installed (a sitecustomize
    blocks them in every process: the sweep's and its cells')."""
    folder = tmp_path / "without"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules))
    return {"PYTHONPATH": str(folder)}


def test_a_sweep_asking_for_a_framework_not_installed_stops_before_any_cell_naming_its_extra(
    trainbench, tmp_path: Path
) -> None:
    done = trainbench("-m", "framework=pytorch,tensorflow", "model=mlp", *TINY, env=hidden(tmp_path, "tensorflow"))
    assert done.returncode == 2, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert said[0].startswith("trainbench: framework=tensorflow needs tensorflow, which this Python ("), said[0]
    assert said[0].endswith(
        """install trainbench's [tensorflow] extra: pip install -e ".[tensorflow]" -c locks/constraints.txt, """
        "run in trainbench's checkout"
    ), said[0]
    assert done.runs() == []  # not even the PyTorch cell: nothing ran


def cell_of(*overrides: str):
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose("config", overrides=["device=cpu", *overrides]))


@pytest.mark.parametrize(
    ("overrides", "blocked", "says"),
    [
        (["framework=pytorch", "model=mlp"], "torchvision", "framework=pytorch needs torchvision, "),
        (["framework=pytorch", "model=distilbert", "data=synthetic_text"], "transformers", "[torch] extra"),
        (["framework=jax", "model=mlp"], "jax", "framework=jax needs jax, "),
        (["framework=jax", "model=distilbert", "data=synthetic_text"], "keras_hub", "needs keras_hub, "),
        (["framework=tensorflow", "model=mlp"], "keras", '[tensorflow] extra: pip install -e ".[tensorflow]"'),
        (["framework=mlx", "model=mlp"], "mlx", '[mlx] extra: pip install -e ".[mlx]"'),
    ],
)
def test_each_framework_names_the_module_it_misses_and_the_extra_that_installs_it(
    overrides: list[str], blocked: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainbench.frameworks import not_installed

    cell = cell_of(*overrides)
    assert not_installed([cell]) is None  # everything is installed here
    monkeypatch.setitem(sys.modules, blocked, None)
    said = not_installed([cell])
    assert said is not None and says in said and "\n" not in said
    assert 'pip install "trainbench[' not in said  # PyPI's `trainbench` is another project


def test_mlx_where_it_has_no_wheel_is_left_to_the_cell_which_records_it_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import platform

    from trainbench.frameworks import not_installed

    cell = cell_of("framework=mlx", "model=mlp")
    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setattr(platform, "mac_ver", lambda: ("13.6.1", ("", "", ""), "arm64"))
    assert not_installed([cell]) is None  # macOS 13: recorded unavailable, the sweep goes on
    monkeypatch.setattr(platform, "mac_ver", lambda: ("14.5", ("", "", ""), "arm64"))
    assert "[mlx] extra" in (not_installed([cell]) or "")


# ------------------------------------------------------------------------------------------------- the locks


def lock_markers() -> dict[str, str]:
    """Each lock's name -> the marker its lines carry (every line the same: checked)."""
    markers = {}
    for platform in lock.PLATFORMS:
        found = {line.split(";", 1)[1].strip() for line in platform.path.read_text().splitlines() if "==" in line}
        assert len(found) == 1, platform.name
        markers[platform.name] = found.pop()
    return markers


TAKES = {  # the lock each machine installs with; None: it resolves freely
    "macOS 11 arm64": None,
    "macOS 12 arm64": None,
    "macOS 13 arm64": "macos13-arm64-py3.11",
    "macOS 13 arm64 py3.12": "macos13-arm64-py3.12",
    "macOS 14 arm64": "macos14-arm64-py3.11",
    "macOS 14 arm64 py3.12": "macos14-arm64-py3.12",
    "macOS 15 arm64": "macos14-arm64-py3.12",
    "macOS 26 arm64": "macos14-arm64-py3.12",
    "macOS 13 x86_64": None,
    "macOS 14 x86_64": None,
    "Linux x86_64": "linux-x86_64-py3.11",
    "Linux x86_64 py3.12": "linux-x86_64-py3.12",
}


@pytest.mark.parametrize("name", MACHINES)
def test_each_machine_takes_the_lock_of_its_platform_and_no_other(name: str) -> None:
    taken = [lock_name for lock_name, marker in lock_markers().items() if Marker(marker).evaluate(MACHINES[name])]
    assert taken == ([TAKES[name]] if TAKES[name] else []), name


def locked(name: str) -> dict[str, str]:
    return lock.pins((lock.LOCKS / f"{name}.txt").read_text())


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_locks_pin_the_frameworks_that_load_on_each_platform(python: str) -> None:
    linux, mac14, mac13 = (locked(f"{name}-py{python}") for name in ("linux-x86_64", "macos14-arm64", "macos13-arm64"))
    for pins in (linux, mac14, mac13):
        assert pins["mlflow"] == "3.17.2" and pins["hydra-core"] == "1.3.8" and pins["omegaconf"].startswith("2.3.")
        assert "torch" in pins and "torchvision" in pins and "jax" in pins and "keras-hub" in pins
        assert not any("+" in version for version in pins.values())  # no local build (2.13.0+cpu): PyPI's own
        assert "trainbench" not in pins and "tensorflow-macos" not in pins  # obsolete since TF 2.16
    assert linux["tensorflow"].startswith("2.21.") and "tensorflow-metal" not in linux
    assert linux["mlx-cpu"] == linux["mlx"] and "mlx-metal" not in linux  # framework=mlx on the CPU (tests)
    assert not any(name.startswith("mlx-cuda") for name in linux)  # CUDA MLX: opt-in
    for mac in (mac14, mac13):  # the pair that loads together: TF 2.20+ cannot import once tensorflow-metal is in
        assert (mac["tensorflow"], mac["tensorflow-metal"]) == ("2.19.1", "1.2.0")
        assert "zeus-apple-silicon" in mac and "nvidia-ml-py" in mac
        assert not any(name.startswith("nvidia-") and name != "nvidia-ml-py" for name in mac)  # no CUDA libraries
    assert mac14["mlx-metal"] == mac14["mlx"] and "mlx-cpu" not in mac14  # framework=mlx on the Apple GPU
    assert "mlx" not in mac13 and "mlx-metal" not in mac13  # MLX's wheels need macOS 14


@pytest.mark.slow  # resolves every platform's dependency set against the package index (~6 s each)
@pytest.mark.parametrize("platform", lock.PLATFORMS, ids=lambda platform: platform.name)
def test_each_lock_still_resolves_for_its_platform(platform: lock.Platform, tmp_path: Path) -> None:
    """A lock pins a wheel for its platform of every package requirements.txt installs there, and no more: a
    dependency added to pyproject.toml without `python tools/lock.py` fails here, naming the lock."""
    try:
        problem = lock.check(platform, tmp_path)
    except lock.RegistryUnreachable as error:
        pytest.skip(f"package registry unreachable: {error}")
    assert problem is None, problem


PIP_SELECTS = """
import json, sys
from pip._vendor.packaging.markers import Marker
from pip._vendor.packaging.requirements import Requirement
machines, lines = json.load(sys.stdin)
print(json.dumps({name: sorted(Requirement(line).name + str(sorted(Requirement(line).extras)) for line in lines
                               if not Requirement(line).marker or Marker(str(Requirement(line).marker)).evaluate(env))
                  for name, env in machines.items()}))
"""


def test_the_pip_in_this_venv_selects_the_same_packages_on_every_platform() -> None:
    """pip evaluates markers with its own, older packaging (pip 24.1-25.3 stop on a Linux kernel release compared as
    a version), the locks' markers too: each machine must take the same lock under pip as here. In a process of its own: importing pip here would turn off setuptools' distutils shim for every
    later test in this process (torch.compile builds with setuptools)."""
    done = subprocess.run(
        [sys.executable, "-c", PIP_SELECTS],
        input=json.dumps([MACHINES, requirement_lines() + [f"lock ; {m}" for m in lock_markers().values()]]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    by_pip = json.loads(done.stdout)
    for name, environment in MACHINES.items():
        ours = sorted(r.name + str(sorted(r.extras)) for r in selected(environment).values())
        ours = sorted(ours + ["lock[]" for m in lock_markers().values() if Marker(m).evaluate(environment)])
        assert by_pip[name] == ours, name
