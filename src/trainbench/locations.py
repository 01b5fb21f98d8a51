"""Where trainbench's files are: the checkout, its conf/ tree, and the choices each config group offers there.

Light on purpose (no Hydra, no config schemas): trainbench.store.tracking and the config modules import it, and
trainbench.config re-exports it.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout (src/trainbench/locations.py)
# conf/ ships inside the package when installed (`pip install .`); in a checkout it is the top-level conf/.
_PACKAGED_CONF = Path(__file__).resolve().parent / "conf"
CONF_DIR = _PACKAGED_CONF if _PACKAGED_CONF.is_dir() else PROJECT_ROOT / "conf"


def choices(group: str) -> list[str]:
    """The options of a config group: the YAML files in conf/<group>/."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
