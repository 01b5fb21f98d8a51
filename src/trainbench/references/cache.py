"""The reference runs a CSV of published figures becomes, kept once composed.

Turning the published CSV into runs composes each row's `reproduce` command with Hydra (about half a second each,
dozens of them), and every new store's first sweep does it when it imports other machines' runs. The result
depends only on the CSV's bytes and on what composes the commands: trainbench's code, its conf/ tree and the
installed Hydra and OmegaConf. Those are hashed into the cache file's name, so any change to them makes (and
composes) another file; a missing, unreadable or damaged file is composed again.

The file lives in the user's cache folder (trainbench.store_template.cache_folder) and is written to a temporary
file and renamed into place, so sweeps that import at the same time read either a whole file or none.
TRAINBENCH_REFERENCES_CACHE=off composes every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from trainbench.references.mapping import ReferenceRun

SWITCH = "TRAINBENCH_REFERENCES_CACHE"
FORMAT = "1"  # bump when ReferenceRun's fields change


def _composer_fingerprint() -> str:
    """A hash of everything a row's composition reads besides the row: the package's code, conf/, Hydra."""
    from trainbench.locations import CONF_DIR

    digest = hashlib.sha256(FORMAT.encode())
    for package in ("hydra-core", "omegaconf"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{package}={importlib.metadata.version(package)}".encode())
    for top in (Path(__file__).parent.parent, CONF_DIR):
        for path in sorted(p for p in top.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()):
            digest.update(str(path.relative_to(top)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_file(csv: Path) -> Path | None:
    if os.environ.get(SWITCH, "").lower() == "off":
        return None
    from trainbench.store_template import cache_folder

    try:
        key = hashlib.sha256(csv.read_bytes()).hexdigest()[:16]
    except OSError:
        return None
    return cache_folder() / f"references-{key}-{_composer_fingerprint()}.json"


def read(path: Path | None) -> list[ReferenceRun] | None:
    if path is None:
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return [
            ReferenceRun(**{**row, "metrics": [tuple(m) for m in row["metrics"]]})  # JSON has no tuples
            for row in rows
        ]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write(path: Path | None, runs: list[ReferenceRun]) -> None:
    """Best effort: a cache that cannot be written only means composing again next time."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump([asdict(run) for run in runs], f)
        os.replace(f.name, path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError, NameError):
            os.unlink(f.name)
