"""Every schema a YAML choice can name, registered: the generic groups (config.schema), each framework
trainbench ships (frameworks.shipped) and each task (tasks.shipped).

Import SCHEMAS from here where a choice becomes its dataclass: composing (config.compose), rebuilding a cell
in its own process (config.from_spec), listing what a group offers. `import trainbench.config` alone registers
only the generic groups, so a tool that reads stored runs loads no framework or task package."""

from trainbench.config import schema as _generic_groups  # noqa: F401
from trainbench.config.registry import SCHEMAS
from trainbench.frameworks import shipped as _frameworks  # noqa: F401
from trainbench.tasks import shipped as _tasks  # noqa: F401

__all__ = ["SCHEMAS"]
