"""The framework and device groups: what every framework's config declares (its own config extends FrameworkConfig in
trainbench/frameworks/<name>/__init__.py) and the device a cell asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema.base import Choice, whole
from trainbench.config.schema.model import ModelConfig

if TYPE_CHECKING:
    from trainbench.config.schema.training import OptimizeConfig


@dataclass(frozen=True)
class DoctorFacts:
    """What `trainbench doctor` says and does about a framework, declared by the framework's light package."""

    title: str  # as people write it: PyTorch
    module: str  # its import name, looked for without importing it
    install: str  # how to install it
    gpu_install: Mapping[str, str] = field(default_factory=dict)  # by GPU vendor (hw.gpu_vendor): what loads its GPU
    rank: int = 100  # where its lines come (PyTorch first)
    by_default: bool = True  # checked when --frameworks is not given
    also_on_cpu: bool = False  # on a machine with a GPU, checked on its CPU as well


# The run flags every framework's adapter records: whether it compiled the step (torch.compile, XLA's jit,
# mx.compile), whether convolutions ran NHWC, the autocast dtype, whether fp32 matmuls ran as TF32.
SHARED_RUN_FLAGS = ("trainbench.compile", "trainbench.channels_last", "trainbench.autocast", "trainbench.tf32")


@dataclass
class FrameworkConfig(Choice):
    """Base of every framework's config (each framework's package registers its own kind)."""

    # The module with the framework's Adapter class, imported only inside a cell's process. The framework's own,
    # never a setting: a value from the command line or a references CSV would pick the module a cell runs.
    adapter: ClassVar[str] = ""
    package: str = MISSING  # the distribution whose version identifies the framework (resume compares it)
    # Module that starts one process per device (PyTorch's DDP), with processes(device) -> int, launch(count,
    # entrypoint, argument, nodes) -> {rank: result}, and lost_nodes() -> [host], the nodes that stopped
    # answering when a collective failed (cell/ranks.py); None: one process drives all of a cell's devices.
    rank_launcher: ClassVar[str | None] = None
    # Module for one process per node joined into one runtime (JAX) over device.nodes hosts, which the adapter
    # joins itself; the shared code calls only its lost_nodes(nodes) -> [host] when a collective failed.
    node_joiner: ClassVar[str | None] = None

    # The framework's builders, keyed by the architecture a model YAML describes (ModelConfig.architecture():
    # the model's name, or its family where one builder takes sizes, e.g. `bert`): the name of the builder in
    # the framework's own terms (a torchvision constructor, a keras.applications class, ...). Declared in the
    # framework's light package, so the parent answers "who builds model X" without importing any framework.
    builders: ClassVar[Mapping[str, str]] = {}
    # The version tags (`sw.*`) its adapter records that name the framework's own releases.
    version_tags: ClassVar[tuple[str, ...]] = ()
    # The tags its adapter records that say how it ran a setting, beyond those every framework records
    # (SHARED_RUN_FLAGS): the report tells them per row where its columns differ. An adapter records its own
    # flags only, never another framework's.
    run_flags: ClassVar[tuple[str, ...]] = ()
    # Its own settings that take true | false | auto (`auto`: on with optimize=fast), and those it has only so
    # that a preset for every framework may name them while it has one way only (Keras' NHWC channels_last):
    # those say nothing about how a run differs, so a comparison leaves them out.
    switches: ClassVar[tuple[str, ...]] = ()
    fixed: ClassVar[tuple[str, ...]] = ()
    # Python loggers of the framework whose INFO lines say nothing a user must act on: quiet in its cell's process
    # unless hydra.verbose is given.
    quiet_loggers: ClassVar[tuple[str, ...]] = ()
    apple_gpu_backend: ClassVar[str] = "metal"  # what its runs on an Apple GPU tag as trainbench.backend
    doctor: ClassVar[DoctorFacts | None] = None  # None: `trainbench doctor` does not check it

    def cpu_only_on(self, gpu_vendor: str) -> tuple[str, str] | None:
        """Why `trainbench doctor` checks this framework on the CPU only on a machine with this vendor's GPU, as
        (status, line): e.g. ("warn", "a plug-in is not installed ..."); None: on the GPU."""
        return None

    # What the framework can build, run and compute: answered without importing it (judge asks these).
    def builds(self, model: ModelConfig) -> str | None:
        """The name of this framework's builder for `model`, or None when it has none."""
        return self.builders.get(model.architecture())

    def loads_pretrained(self) -> bool:
        """Whether model.pretrained=true can load a model's weights file in this framework."""
        return False

    def pretrained_weights(self, weights_file: str) -> tuple[Path, str] | None:
        """Where this framework loads the pretrained weights file `weights_file` from, found without importing it,
        and the address to download it from once when online; None where it loads none (loads_pretrained)."""
        return None

    def in_force(self, knob: str, optimize: OptimizeConfig) -> Any:
        """This framework's own setting `knob` as a cell runs it (a framework whose switches take `auto` says what
        `auto` means under `optimize`); None where it has no such setting."""
        return getattr(self, knob, None)

    def precisions(self, backend_kind: str) -> tuple[str, ...]:
        """Precisions this framework can run on a `cpu` or `gpu` device."""
        return (
            ("fp32", "mixed_bf16", "mixed_fp16")
            if backend_kind == "cpu"
            else ("fp32", "tf32", "mixed_bf16", "mixed_fp16")
        )

    def max_devices(self) -> int | None:
        """How many devices one cell of this framework can use (None: as many as there are)."""
        return 1

    def min_memory_mb(self) -> int:
        """The smallest cell.memory_limit_mb with which this framework imports and runs a tiny step."""
        return 512

    def input_pipeline(self) -> str | None:
        """The host input pipeline data.pipeline=loader runs (e.g. torch.utils.data.DataLoader); None: none yet."""
        return None

    def for_probes(self) -> FrameworkConfig:
        """These settings as batch_size=max's probes use them (trainbench.cell.batch_probes): the same, unless
        a setting costs every new batch size time the probes do not need to spend. The cell itself runs with
        the settings as given."""
        return self

    def fit(self) -> str | None:
        """What task.timed_region=fit / build_fit times: `model.fit` (the framework's own fit on host
        arrays), `loop` (no fit of its own: trainbench's epoch loop as one block), or None (not supported)."""
        return None

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        """The top-level modules a cell of `model` imports, all installed by trainbench's extra named `package`
        (pyproject.toml): checked before a sweep starts, without importing them."""
        return (self.package,)

    def installs_here(self) -> bool:
        """Whether `package`'s extra installs the framework on this machine. False: a cell records it unavailable
        (the machine cannot run it) instead of the sweep stopping to ask for an install."""
        return True


DEVICE_NAMES = ("auto", "cpu", "gpu")


@schema("device", "device")
@dataclass
class DeviceConfig(Choice):
    count: Any = 1  # devices one cell uses (data-parallel): a whole number >= 1, or "all"
    nodes: int = 1  # hosts one data-parallel cell spans, each with `count` devices (docs/multi-gpu.md, across nodes)

    def check(self, at: str) -> None:
        need(self.name in DEVICE_NAMES, at, self.name, f"choose one of {', '.join(DEVICE_NAMES)}")
        need(
            self.count == "all" or (whole(self.count) and 1 <= self.count <= 1024),
            f"{at}.count",
            self.count,
            "must be a whole number >= 1 or all, e.g. device.count=2",
        )
        need(
            whole(self.nodes) and 1 <= self.nodes <= 4096,
            f"{at}.nodes",
            self.nodes,
            "must be a whole number >= 1, e.g. device.nodes=2",
        )
