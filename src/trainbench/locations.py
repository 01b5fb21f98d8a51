"""Where trainbench's files are: the checkout, its conf/ tree, and the choices each config group offers there.

Light on purpose (no Hydra, no config schemas): trainbench.store.tracking and the config modules import it, and
trainbench.config re-exports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout (src/trainbench/locations.py)
# conf/ ships inside the package when installed (`pip install .`); in a checkout it is the top-level conf/.
_PACKAGED_CONF = Path(__file__).resolve().parent / "conf"
CONF_DIR = _PACKAGED_CONF if _PACKAGED_CONF.is_dir() else PROJECT_ROOT / "conf"


def choices(group: str) -> list[str]:
    """The options of a config group: the YAML files in conf/<group>/."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def module_command(module: str, *arguments: str) -> list[str]:
    """The command that runs trainbench's `module` in a new process of this Python, with the folder it starts in
    left off its import path (-P): a `torch.py` or `numpy.py` where the user stands is never imported in place of
    the real one, nor run by a cell."""
    return [sys.executable, "-P", "-m", module, *arguments]


def folder_off_every_import_path() -> None:
    """Every Python this process starts leaves the folder it starts in off its import path, as -P does for
    trainbench's own (module_command): a launcher's workers (loky's `python -m ...`, submitit's) would otherwise put
    it first and import a numpy.py lying there. An empty PYTHONPATH entry (`PYTHONPATH=$PYTHONPATH:/x` with
    nothing before) also means that folder, whatever -P says: dropped. A folder PYTHONPATH names (`.` included)
    is the user's choice, and kept."""
    os.environ["PYTHONSAFEPATH"] = "1"
    entries = os.environ.get("PYTHONPATH")
    if entries is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(entry for entry in entries.split(os.pathsep) if entry)
