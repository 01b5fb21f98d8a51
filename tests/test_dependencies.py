"""The dependency set, for every platform we promise, without that platform at hand.

Fast: each line of requirements-core.txt is parsed and its environment marker evaluated, as pip does, for a
described machine (macOS 11-26 on Apple silicon, Intel Macs, Linux; Python 3.11 and 3.12): which packages each
platform gets. Slow (the package index): pip's own `--platform` dry run evaluates markers for the machine it runs
on, so it cannot show what a Mac would get; `uv pip compile --python-platform` resolves for the target, with
wheels that install there. uv cannot know a target's Darwin release, so the macOS 13 resolution starts from the
lines the markers keep for macOS 13.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from conftest import ROOT

REQUIREMENTS = ROOT / "requirements-core.txt"


def requirement_lines() -> list[str]:
    """The requirement lines of requirements-core.txt, without comments."""
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in REQUIREMENTS.read_text().splitlines())
    return [line for line in lines if line]


def machine(system: str, arch: str, release: str, python: str) -> dict[str, str]:
    """The marker environment (PEP 508) of a machine: `release` is what platform.release() says there, the
    Darwin version on a Mac (macOS 13 is Darwin 22, macOS 14 is Darwin 23, macOS 26 is Darwin 25)."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.9",
        "os_name": "posix",
        "platform_machine": arch,
        "platform_python_implementation": "CPython",
        "platform_release": release,
        "platform_system": system,
        "platform_version": f"{system} Kernel Version {release}" if system == "Darwin" else "#45-Ubuntu SMP",
        "python_full_version": f"{python}.9",
        "python_version": python,
        "sys_platform": system.lower(),
    }


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


def selected(environment: dict[str, str]) -> dict[str, Requirement]:
    """What pip installs from requirements-core.txt on that machine: name[extras] -> requirement."""
    chosen: dict[str, Requirement] = {}
    for line in requirement_lines():
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
        ("Linux", "x86_64", "", "`pip install 'mlx[cpu]'` (glibc 2.35+)"),
    ],
)
def test_the_reason_names_what_mlx_needs(system: str, arch: str, version: str, says: str) -> None:
    from trainbench.frameworks.mlx import why_no_mlx

    reason = why_no_mlx(system, arch, version)
    assert reason.startswith("MLX cannot be imported: ") and says in reason and "\n" not in reason


# ------------------------------------------------------------------------------------- against the package index


def resolve(platform: str, python: str, tmp_path: Path, macos: str | None = None, source: Path = REQUIREMENTS):
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    lock = tmp_path / f"{platform}.txt"
    completed = subprocess.run(
        [uv, "pip", "compile", "--quiet", "--python-platform", platform, "--python-version", python, str(source)]
        + ["-o", str(lock)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MACOSX_DEPLOYMENT_TARGET": macos} if macos else None,  # uv's Mac target: 13 unless set
    )
    if completed.returncode != 0 and "network" in completed.stderr.lower():
        pytest.skip(f"package registry unreachable: {completed.stderr.strip()[:200]}")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", lock.read_text(), flags=re.MULTILINE))


@pytest.mark.slow  # resolves the whole dependency set against the package index
def test_apple_silicon_gets_tensorflow_metal_with_a_tensorflow_it_can_load_and_mlx_on_metal(tmp_path: Path) -> None:
    pins = resolve("aarch64-apple-darwin", "3.12", tmp_path, macos="14.0")
    assert pins["tensorflow"] == "2.19.1"  # 2.20+ cannot import once tensorflow-metal is installed
    assert pins["tensorflow-metal"] == "1.2.0"
    assert "tensorflow-macos" not in pins  # obsolete since TF 2.16
    assert "torch" in pins and "keras" in pins and "keras-hub" in pins
    assert "mlx" in pins and pins["mlx-metal"] == pins["mlx"]  # framework=mlx on the Apple GPU
    assert "mlx-cpu" not in pins


@pytest.mark.slow
def test_macos_13_installs_everything_but_mlx(tmp_path: Path) -> None:
    """What the markers keep for macOS 13 resolves with wheels for macOS 13: torch is the newest release that still
    ships them (torch's newest need macOS 14), TensorFlow with Metal as on macOS 14."""
    kept = [line.split(";")[0].strip() for line in requirement_lines() if _kept(line, MACHINES["macOS 13 arm64"])]
    source = tmp_path / "macos13.txt"
    source.write_text("\n".join(kept) + "\n")
    pins = resolve("aarch64-apple-darwin", "3.11", tmp_path, macos="13.0", source=source)
    assert "mlx" not in pins and "mlx-metal" not in pins
    assert (pins["tensorflow"], pins["tensorflow-metal"]) == ("2.19.1", "1.2.0")
    assert "torch" in pins and "torchvision" in pins and "zeus-apple-silicon" in pins


def _kept(line: str, environment: dict[str, str]) -> bool:
    requirement = Requirement(line)
    return requirement.marker is None or requirement.marker.evaluate(environment)


@pytest.mark.slow
def test_linux_gets_tensorflow_2_21_mlx_on_the_cpu_and_no_metal(tmp_path: Path) -> None:
    pins = resolve("x86_64-manylinux_2_35", "3.11", tmp_path)
    assert pins["tensorflow"].startswith("2.21.")
    assert "tensorflow-metal" not in pins
    assert pins["mlflow"] == "3.17.2" and pins["hydra-core"] == "1.3.8"
    assert "mlx" in pins and pins["mlx-cpu"] == pins["mlx"]  # framework=mlx on the CPU (tests)
    assert "mlx-metal" not in pins and not any(name.startswith("mlx-cuda") for name in pins)  # CUDA: opt-in


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
    a version). In a process of its own: importing pip here would turn off setuptools' distutils shim for every
    later test in this process (torch.compile builds with setuptools)."""
    done = subprocess.run(
        [sys.executable, "-c", PIP_SELECTS],
        input=json.dumps([MACHINES, requirement_lines()]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    by_pip = json.loads(done.stdout)
    for name, environment in MACHINES.items():
        ours = sorted(r.name + str(sorted(r.extras)) for r in selected(environment).values())
        assert by_pip[name] == ours, name
