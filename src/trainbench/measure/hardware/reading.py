"""Reading a probe's source quietly: a file or a command that is not there reads as empty, a call that fails as None."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def quietly(call: Any) -> Any:
    try:
        return call()
    except Exception:
        return None


def read_file(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_command(*command: str) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
