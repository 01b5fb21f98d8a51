"""The locks in locks/: the exact versions `pip install -r requirements.txt` (trainbench[all] and the tests' tools)
installs on each platform we promise, so that two machines of one platform run the same versions.

    python tools/lock.py            # resolve again and rewrite every lock (needs uv and the package registry)
    python tools/lock.py --check    # resolve with the locks as constraints: exit 1 naming each lock that is stale
                                    # (pyproject.toml or requirements-core.txt changed) or pins a missing wheel

Every line of a lock carries its platform's marker, and requirements.txt names locks/constraints.txt, which names
every lock: pip skips a constraint whose marker does not hold, so each machine takes its own lock and a machine
with none (an Intel Mac, macOS 11-12, Python 3.13) resolves freely. Resolved by uv, because pip resolves only for
the machine it runs on (`pip install --dry-run --platform` still evaluates markers for this machine); uv resolves
for a target (`uv pip compile --python-platform`) but cannot know a Mac's Darwin release, so each platform's input
is the requirement lines whose markers hold on a machine described here, markers evaluated with packaging.

pip's own configured constraints (pip.conf `constraint`, PIP_CONSTRAINT) cap the resolution: pip applies them to
every install on this machine, so a lock that ignored them could not install where it was made.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "locks"
CONSTRAINTS = LOCKS / "constraints.txt"  # what requirements.txt names: every lock
EXTRAS = ("all", "test")  # what requirements.txt installs

# The Darwin release as text (see the mlx extra in pyproject.toml: pip 24.1-25.3 stop on a Linux kernel release
# compared as a version): macOS 11-13 are Darwin 20-22.
_DARWIN_23_OR_NEWER = (
    '"20." not in platform_release and "21." not in platform_release and "22." not in platform_release'
)
_APPLE_SILICON = 'sys_platform == "darwin" and platform_machine == "arm64"'


def marker_environment(system: str, arch: str, release: str, python: str) -> dict[str, str]:
    """The PEP 508 marker environment of a machine: `release` is what platform.release() says there, the Darwin
    version on a Mac (macOS 13 is Darwin 22, macOS 14 is Darwin 23)."""
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


@dataclass(frozen=True)
class Platform:
    name: str  # the lock's file name without .txt
    uv_platform: str  # uv's --python-platform
    python: str
    macos: str | None  # the oldest macOS whose wheels the lock may pin (uv reads MACOSX_DEPLOYMENT_TARGET)
    environment: dict[str, str]  # a machine of the platform, for the requirement lines' markers
    where: str  # the marker every line of the lock carries, without the Python version

    @property
    def path(self) -> Path:
        return LOCKS / f"{self.name}.txt"

    @property
    def marker(self) -> str:
        return f'{self.where} and python_version == "{self.python}"'


def _platforms() -> list[Platform]:
    found = []
    for python in ("3.11", "3.12"):
        found += [
            Platform(
                f"linux-x86_64-py{python}",
                "x86_64-manylinux_2_35",  # glibc 2.35: the oldest mlx-cpu's wheels take
                python,
                None,
                marker_environment("Linux", "x86_64", "6.8.0-45-generic", python),
                'sys_platform == "linux" and platform_machine == "x86_64"',
            ),
            Platform(
                f"macos14-arm64-py{python}",
                "aarch64-apple-darwin",
                python,
                "14.0",
                marker_environment("Darwin", "arm64", "23.6.0", python),
                f"{_APPLE_SILICON} and {_DARWIN_23_OR_NEWER}",  # macOS 14 and newer
            ),
            Platform(
                f"macos13-arm64-py{python}",
                "aarch64-apple-darwin",
                python,
                "13.0",
                marker_environment("Darwin", "arm64", "22.6.0", python),
                f'{_APPLE_SILICON} and "22." in platform_release',
            ),
        ]
    return found


PLATFORMS = _platforms()


def requirement_lines() -> list[str]:
    """Every requirement line requirements.txt installs, markers kept: requirements-core.txt, then each extra
    that [all] and [test] bring (not the self-reference `trainbench[...]`), each line once."""
    core = [
        re.sub(r"(^|\s)#.*$", "", line).strip() for line in (ROOT / "requirements-core.txt").read_text().splitlines()
    ]
    extras: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    lines = [line for line in core if line]
    wanted, seen = list(EXTRAS), set()
    while wanted:
        extra = wanted.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for line in extras[extra]:
            requirement = Requirement(line)
            if requirement.name == "trainbench":
                wanted += sorted(requirement.extras)
            elif line not in lines:
                lines.append(line)
    return lines


def kept(platform: Platform) -> list[str]:
    """The requirement lines whose markers hold on the platform, markers removed (uv cannot judge a Darwin
    release)."""
    chosen = []
    for line in requirement_lines():
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(platform.environment):
            requirement.marker = None
            chosen.append(str(requirement))
    return chosen


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line (markers and comments ignored)."""
    return {
        name.lower().replace("_", "-"): version
        for name, version in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", text, flags=re.MULTILINE)
    }


def pip_constraint_files() -> list[str]:
    """The constraint files pip on this machine applies to every install (pip.conf, PIP_CONSTRAINT)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    ).stdout
    files: list[str] = []
    for value in re.findall(r"^\S+\.constraint='(.*)'$", listed, flags=re.MULTILINE):
        files += [path for path in shlex.split(value) if Path(path).is_file() and path not in files]
    return files


class RegistryUnreachable(RuntimeError):
    """uv could not reach the package registry."""


_UNREACHABLE = ("error sending request", "dns error", "failed to fetch", "network", "connection refused", "timed out")


def resolve(platform: Platform, constraints: list[str], workdir: Path) -> str:
    """uv's resolution of the platform's requirement lines, as `name==version` lines; raises RegistryUnreachable,
    or RuntimeError with uv's words."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    source = workdir / f"{platform.name}.in"
    source.write_text("\n".join(kept(platform)) + "\n")
    out = workdir / f"{platform.name}.out"
    command = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--no-python-downloads"]
    command += ["--python-platform", platform.uv_platform, "--python-version", platform.python, str(source)]
    for constraint in constraints:
        command += ["-c", constraint]
    environment = dict(os.environ)  # a UV_INDEX_URL of the user's (a mirror) applies
    if platform.macos:
        environment["MACOSX_DEPLOYMENT_TARGET"] = platform.macos  # uv's Mac target: 13.0 unless set
    done = subprocess.run(command + ["-o", str(out)], capture_output=True, text=True, timeout=600, env=environment)
    if done.returncode != 0:
        said = done.stderr.strip()
        if any(word in said.lower() for word in _UNREACHABLE):
            raise RegistryUnreachable(said.splitlines()[-1] if said else "uv failed")
        raise RuntimeError(f"{platform.name}: uv could not resolve: {said[-3000:]}")
    return out.read_text()


def write(platform: Platform, resolved: str) -> None:
    resolved_pins = pins(resolved)
    lines = [
        f"# trainbench lock for {platform.name} (pip skips every line elsewhere): written by `python tools/lock.py`,",
        "# which says how to check or renew it. Do not edit by hand.",
    ]
    lines += [f"{name}=={version} ; {platform.marker}" for name, version in sorted(resolved_pins.items())]
    platform.path.write_text("\n".join(lines) + "\n")


def write_index() -> None:
    lines = [
        "# Every platform's lock (tools/lock.py): requirements.txt names this file; each line of a lock holds only"
    ]
    lines += ["# on its own platform, so a machine takes its lock and one with none resolves freely."]
    lines += [f"-c {platform.path.name}" for platform in PLATFORMS]
    CONSTRAINTS.write_text("\n".join(lines) + "\n")


def check(platform: Platform, workdir: Path) -> str | None:
    """None when the lock pins exactly what its platform's requirements resolve to under it; else what is wrong."""
    if not platform.path.is_file():
        return f"{platform.path.relative_to(ROOT)} is missing: run `python tools/lock.py`"
    locked = pins(platform.path.read_text())
    bare = workdir / f"{platform.name}.pins.txt"  # without markers: uv cannot judge a Darwin release
    bare.write_text("".join(f"{name}=={version}\n" for name, version in locked.items()))
    try:
        resolved = pins(resolve(platform, [str(bare)], workdir))
    except RuntimeError as error:
        if isinstance(error, RegistryUnreachable):
            raise
        return f"{platform.path.relative_to(ROOT)} no longer resolves: {error}"
    unpinned = sorted(set(resolved) - set(locked))
    unused = sorted(set(locked) - set(resolved))
    if unpinned or unused:
        return (
            f"{platform.path.relative_to(ROOT)} is stale (unpinned: {', '.join(unpinned) or 'none'}; no longer "
            f"needed: {', '.join(unused) or 'none'}): run `python tools/lock.py`"
        )
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check the locks instead of writing them")
    parser.add_argument("--platform", action="append", choices=[p.name for p in PLATFORMS], help="only these")
    arguments = parser.parse_args()
    chosen = [p for p in PLATFORMS if not arguments.platform or p.name in arguments.platform]
    with tempfile.TemporaryDirectory() as scratch:
        if arguments.check:
            problems = [problem for p in chosen if (problem := check(p, Path(scratch)))]
            for problem in problems:
                print(problem)
            return 1 if problems else 0
        caps = pip_constraint_files()
        if caps:
            print(f"capped by pip's configured constraints: {', '.join(caps)}")
        LOCKS.mkdir(exist_ok=True)
        for platform in chosen:
            write(platform, resolve(platform, caps, Path(scratch)))
            print(f"{platform.path.relative_to(ROOT)}: {len(pins(platform.path.read_text()))} packages")
        write_index()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RegistryUnreachable as error:
        print(f"lock: the package registry cannot be reached ({error})", file=sys.stderr)
        sys.exit(2)
