"""What a run records about the code that made it: the project's git commit and the installed packages."""

from __future__ import annotations

import subprocess
from typing import Any

from trainbench.locations import PROJECT_ROOT


def git_commit() -> str:
    """The project's commit, with -dirty when the work tree has uncommitted changes."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def installed_packages() -> str:
    """`pip freeze` of the running environment, without running pip (which takes seconds)."""
    from importlib.metadata import distributions

    lines = {f"{name}=={version}" for name, version in map(_name_and_version, distributions()) if name}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _name_and_version(distribution: Any) -> tuple[str | None, str]:
    """The Name and Version headers read from the top of the metadata file: parsing the whole file as email, as
    importlib.metadata does, takes a new sweep's parent a noticeable part of a second for a few hundred packages."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("Name", "Version"):
            headers.setdefault(key, value.strip())
    if "Name" in headers and "Version" in headers:
        return headers["Name"], headers["Version"]
    return distribution.metadata["Name"], distribution.version


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()
