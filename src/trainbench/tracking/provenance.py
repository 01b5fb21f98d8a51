"""What a run records about the code that made it: the project's git commit and the installed packages."""

from __future__ import annotations

import subprocess

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

    lines = {f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()
