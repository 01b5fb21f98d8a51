"""framework=pytorch: its config, its own speed-up knobs and what it can build, light (no torch import). The
adapter is .adapter, the builders .models.

PyTorch's knobs live here, not in the shared `optimize` group: `compile_mode` (torch.compile's), `channels_last`,
`fused_optimizer`, `capture` and `coordinate_descent_tuning`. `optimize=fast` stays the one switch: a knob left
at `auto` follows it (on with optimize=fast, off otherwise; compile_mode=auto is the mode measured fastest for the
model), and true/false (or a mode) overrides it either way: `framework.channels_last=true optimize=none`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import DoctorFacts, FrameworkConfig

if TYPE_CHECKING:
    from trainbench.config.schema import ModelConfig, OptimizeConfig

# Architecture (trainbench.config.schema.ModelConfig.architecture) -> builder: a torchvision.models constructor,
# a builder in .models (a transformers family, the ViT at any size), or trainbench's MLP.
BUILDERS = {
    "mlp": "mlp",
    "alexnet": "alexnet",
    "efficientnet_b0": "efficientnet_b0",
    "mobilenet_v2": "mobilenet_v2",
    "resnet18": "resnet18",
    "resnet50": "resnet50",
    "vgg16": "vgg16",
    "vit": "vision_transformer",  # torchvision's VisionTransformer at the YAML's sizes (models.py)
    "bert": "bert",
    "distilbert": "distilbert",
}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# compile_mode=auto on CUDA, by architecture (the rest: default). reduce-overhead adds CUDA graphs: it wins where
# launches, not kernels, bound the step: the transformers' (the GPU sits idle between small kernels in their
# default-mode steps), and under DDP, where each compiled piece is a graph and the all-reduces run between them.
# ResNet-50's and ViT-B/16's steps are kernel-bound, yet graphs still close the gaps between their kernels.
# max-autotune is not auto's choice anywhere: it is no faster for ViT-B/16 and only slightly faster for ResNet-50
# once tuned, while its tuning costs minutes on every cold Inductor cache (each new machine's first fast cell).
# The figures behind each choice: results/2026-11-22-gpu, results/2026-11-26-data-parallel,
# results/2026-11-26-vit-b16, results/2026-11-28-vit-compile-modes, results/2026-11-28-resnet50-compile-modes.
FASTEST_COMPILE_MODES = {
    "resnet50": "reduce-overhead",
    "vit": "reduce-overhead",
    "bert": "reduce-overhead",
    "distilbert": "reduce-overhead",
}
SWITCHES = ("channels_last", "fused_optimizer", "capture")  # true | false | auto (on with optimize=fast)


MIN_MEMORY_MB = 1536  # the measured floor + 25% (results/2026-11-22-memory-floor.md)


@schema("framework", "pytorch")
@dataclass
class PyTorchConfig(FrameworkConfig):
    adapter: ClassVar[str] = "trainbench.frameworks.pytorch.adapter"
    package: str = "torch"
    rank_launcher: ClassVar[str | None] = "trainbench.frameworks.pytorch.distributed"  # DDP: a process per device
    builders: ClassVar[dict[str, str]] = BUILDERS
    version_tags: ClassVar[tuple[str, ...]] = ("sw.torch", "sw.cuda")
    run_flags: ClassVar[tuple[str, ...]] = ("torch.compile_mode", "trainbench.fused_optimizer", "trainbench.capture")
    switches: ClassVar[tuple[str, ...]] = SWITCHES
    apple_gpu_backend: ClassVar[str] = "mps"
    doctor: ClassVar[DoctorFacts | None] = DoctorFacts(
        title="PyTorch",
        module="torch",
        install='pip install -e ".[torch]" -c locks/constraints.txt',
        gpu_install={
            "apple": "MPS needs an arm64 Python (not under Rosetta) and macOS 12.3 or newer",
            "nvidia": "install a CUDA build of torch (pytorch.org's selector)",
        },
        rank=0,
        also_on_cpu=True,
    )
    mps_fallback: bool = True  # ops MPS lacks run on the CPU instead of failing (PYTORCH_ENABLE_MPS_FALLBACK)
    cudnn_benchmark: bool = True  # fixed shapes every step: let cuDNN pick its fastest algorithms in warm-up
    # torch.compile's mode when compiling (optimize.compile); auto: FASTEST_COMPILE_MODES on one CUDA GPU, else
    # default (CUDA graphs need CUDA, and DDP's all-reduce does not run inside them)
    compile_mode: str = "auto"
    channels_last: Any = "auto"  # convolutional models in NHWC (Keras and MLX always are); auto: with optimize=fast
    fused_optimizer: Any = "auto"  # fused=True optimizers, one kernel per step (CUDA; MPS: Adam/AdamW); auto: fast
    capture: Any = "auto"  # CUDA: the whole train step as one CUDA graph (small static models: the MLPs); auto: fast
    # with compile: Inductor benchmarks each generated Triton (GPU) kernel's launch settings against their
    # neighbours. Off even with optimize=fast: it gains ResNet-50 a few % but stretches its compile from about 1
    # to 5 minutes, paid by every cell with a cold Inductor cache (results/2026-11-22-gpu); max-autotune includes it
    coordinate_descent_tuning: bool = False

    def check(self, at: str) -> None:
        modes = ("auto", *COMPILE_MODES)
        need(self.compile_mode in modes, f"{at}.compile_mode", self.compile_mode, f"choose one of {', '.join(modes)}")
        for knob in SWITCHES:
            value = getattr(self, knob)
            need(
                value is True or value is False or value == "auto",
                f"{at}.{knob}",
                value,
                f"true, false or auto (on with optimize=fast), e.g. framework.{knob}=true",
            )

    def wants(self, knob: str, optimize: OptimizeConfig) -> bool:
        """Whether the switch `knob` (channels_last, fused_optimizer, capture) is asked for: its value, or with
        `auto`, whether optimize asks for each framework's best. The adapter decides where it applies."""
        value = getattr(self, knob)
        return optimize.fast() if value == "auto" else bool(value)

    def in_force(self, knob: str, optimize: OptimizeConfig) -> Any:
        return self.wants(knob, optimize) if knob in SWITCHES else super().in_force(knob, optimize)

    def torch_compile_mode(self, model: ModelConfig, cuda: bool) -> str:
        """compile_mode with `auto` resolved: the mode measured fastest for the model's architecture on CUDA
        GPUs, torch.compile's default elsewhere (CUDA graphs need CUDA)."""
        if self.compile_mode != "auto":
            return self.compile_mode
        return FASTEST_COMPILE_MODES.get(model.architecture(), "default") if cuda else "default"

    def loads_pretrained(self) -> bool:
        return True  # torchvision's ImageNet weights

    def pretrained_weights(self, weights_file: str) -> tuple[Path, str] | None:
        # Where torch.hub.get_dir() looks, without importing torch: $TORCH_HOME, else $XDG_CACHE_HOME/torch.
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        folder = Path(os.environ.get("TORCH_HOME", cache / "torch")) / "hub" / "checkpoints"
        return folder / weights_file, f"https://download.pytorch.org/models/{weights_file}"

    def for_probes(self) -> PyTorchConfig:
        # cudnn.benchmark autotunes every convolution again for each new input shape, and each probe is a new
        # batch size: on an H100, ResNet-50's probes near the edge took tens of seconds each, nearly all of it
        # autotuning. Without it cuDNN's heuristics pick at once. The cell, with the user's setting, may then
        # autotune to algorithms with larger workspaces than the probes used; the autotuner skips those whose
        # workspace cannot be allocated, and batch_size=max's headroom leaves them room.
        return dataclasses.replace(self, cudnn_benchmark=False)

    def imports(self, model: ModelConfig) -> tuple[str, ...]:
        return ("torch", "torchvision") + (("transformers",) if model.architecture() in ("bert", "distilbert") else ())

    def max_devices(self) -> int | None:
        return None  # DistributedDataParallel over every device asked for

    def input_pipeline(self) -> str | None:
        return "torch.utils.data.DataLoader"

    def fit(self) -> str | None:
        return "loop"  # PyTorch has no fit(): the closest equivalent is trainbench's own loop, timed as one block

    def min_memory_mb(self) -> int:
        return MIN_MEMORY_MB
