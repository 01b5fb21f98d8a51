"""The typed schema of a cell: one dataclass per kind of choice in each config group.

A YAML choice extends its kind (`defaults: [/schema/model/vision@_here_]`), so a vision model has no
`num_heads` and a benchmark task no `shape`: what a run records is what that choice means. Each dataclass
checks its own values (`check`); checks across groups live in trainbench.config.judge. Framework configs
live with their adapters (trainbench/frameworks/<name>/__init__.py) and task configs with their tasks
(trainbench/tasks/<name>.py); both extend the bases here. Data and checks only: what a task does with
them (runs, names its run, tags it) is trainbench.tasks.base.Task.

One module per group, as conf/ has one folder per group: `framework` (framework and device), `model`, `data`,
`training` (task, precision, optim, optimize), `cell` (a whole cell and its run settings), on `base`. Importing the
package registers every schema; its names import from here.

Light on purpose: imported by the parent process, which never imports a deep-learning framework.
"""

from __future__ import annotations

from trainbench.config.schema.base import (
    MAX_BATCH_SIZE,
    MAX_IMAGE_SIZE,
    MAX_LAYER_UNITS,
    MAX_SAMPLES,
    MAX_SEQ_LEN,
    Choice,
    finite,
    need_count,
    need_optional_count,
    whole,
)
from trainbench.config.schema.cell import (
    GROUPS,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    SETTINGS,
    CellConfig,
    CellLimits,
    SweepSettings,
    TrackingConfig,
    replace,
)
from trainbench.config.schema.data import (
    IMAGE_DATASETS,
    PIPELINES,
    DataConfig,
    ImageData,
    ImageFiles,
    SyntheticImages,
    SyntheticText,
    TextData,
    TextFiles,
)
from trainbench.config.schema.framework import (
    DEVICE_NAMES,
    SHARED_RUN_FLAGS,
    DeviceConfig,
    DoctorFacts,
    FrameworkConfig,
)
from trainbench.config.schema.model import (
    ACTIVATIONS,
    OUTPUT_ACTIVATIONS,
    MlpModel,
    ModelConfig,
    SampleShape,
    TransformerModel,
    VisionModel,
    VitModel,
    need_encoder_sizes,
)
from trainbench.config.schema.training import (
    AUTOCAST_DTYPES,
    AdamConfig,
    OptimConfig,
    OptimizeConfig,
    PrecisionConfig,
    SgdConfig,
    TaskConfig,
)

__all__ = [
    "ACTIVATIONS",
    "AUTOCAST_DTYPES",
    "AdamConfig",
    "CellConfig",
    "CellLimits",
    "Choice",
    "DEVICE_NAMES",
    "DataConfig",
    "DeviceConfig",
    "DoctorFacts",
    "FrameworkConfig",
    "GROUPS",
    "IMAGE_DATASETS",
    "ImageData",
    "ImageFiles",
    "MAX_BATCH_SIZE",
    "MAX_IMAGE_SIZE",
    "MAX_LAYER_UNITS",
    "MAX_SAMPLES",
    "MAX_SEQ_LEN",
    "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "MlpModel",
    "ModelConfig",
    "SHARED_RUN_FLAGS",
    "OUTPUT_ACTIVATIONS",
    "OptimConfig",
    "OptimizeConfig",
    "PIPELINES",
    "PrecisionConfig",
    "SETTINGS",
    "replace",
    "SampleShape",
    "SgdConfig",
    "SweepSettings",
    "SyntheticImages",
    "SyntheticText",
    "TaskConfig",
    "TextData",
    "TextFiles",
    "TrackingConfig",
    "TransformerModel",
    "VisionModel",
    "VitModel",
    "finite",
    "need_count",
    "need_encoder_sizes",
    "need_optional_count",
    "whole",
]
