"""framework=mlx: Apple's MLX. gpu = Metal on Apple silicon, CUDA where an MLX CUDA build is installed,
else the CPU. Light (no mlx import); the adapter is .adapter, the model builders .models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainbench.config.errors import need
from trainbench.config.registry import schema
from trainbench.config.schema import DoctorFacts, FrameworkConfig
from trainbench.frameworks import always_nhwc

# Architecture (trainbench.config.schema.ModelConfig.architecture) -> builder in .models (IMAGE_BUILDERS,
# TEXT_BUILDERS, the ViT at any size, or the MLP).
BUILDERS = {
    "mlp": "mlp",
    "mobilenet_v2": "mobilenet_v2",
    "resnet18": "resnet18",
    "resnet50": "resnet50",
    "vit": "vit",
    "bert": "bert",
    "distilbert": "distilbert",
}


@schema("framework", "mlx")
@dataclass
class MlxConfig(FrameworkConfig):
    adapter: ClassVar[str] = "trainbench.frameworks.mlx.adapter"
    package: str = "mlx"
    builders: ClassVar[dict[str, str]] = BUILDERS
    version_tags: ClassVar[tuple[str, ...]] = ("sw.mlx",)
    doctor: ClassVar[DoctorFacts | None] = DoctorFacts(
        title="MLX",
        module="mlx",
        install='pip install -e ".[mlx]" -c locks/constraints.txt (Apple silicon with macOS 14+, or Linux)',
        gpu_install={
            "apple": "MLX's Metal backend needs macOS 14 or newer",
            "nvidia": "pip uninstall -y mlx-cpu && pip install 'mlx[cuda13]'",
        },
        rank=2,
    )
    channels_last: bool = True  # MLX's convolutions are NHWC, always (as Keras': trainbench.frameworks.keras)
    fixed: ClassVar[tuple[str, ...]] = ("channels_last",)

    def check(self, at: str) -> None:
        need(self.channels_last is True, f"{at}.channels_last", self.channels_last, always_nhwc())

    def min_memory_mb(self) -> int:
        return 768

    def installs_here(self) -> bool:
        import platform

        return not has_no_wheel(platform.system(), platform.machine(), platform.mac_ver()[0])


def has_no_wheel(system: str, machine: str, mac_version: str) -> bool:
    """MLX has no wheel for this Mac: an Intel Mac (or a Python under Rosetta), or macOS 13 and older."""
    if system != "Darwin":
        return False
    major = mac_version.split(".")[0]
    return machine != "arm64" or (major.isdigit() and int(major) < 14)


def why_no_mlx(system: str, machine: str, mac_version: str) -> str:
    """One line saying why MLX cannot be imported here and what would install it: `system` and `machine` as
    platform.system() and platform.machine() give them, `mac_version` as platform.mac_ver()[0] ("13.6.1")."""
    if system == "Darwin":
        if machine != "arm64":
            return (
                f"MLX cannot be imported: on a Mac it needs Apple silicon (arm64), and this Python runs on {machine} "
                "(an Intel Mac, or a Python under Rosetta)"
            )
        major = mac_version.split(".")[0]
        if major.isdigit() and int(major) < 14:
            return (
                f"MLX cannot be imported: its wheels need macOS 14 or newer, and this Mac runs macOS {mac_version} "
                "(requirements.txt installs everything else here)"
            )
    if system == "Linux":
        return (
            "MLX cannot be imported: install trainbench's [mlx] extra (mlx[cpu], glibc 2.35+), or 'mlx[cuda13]' for "
            "NVIDIA GPUs"
        )
    return "MLX cannot be imported: install trainbench's [mlx] extra (`pip install mlx`)"
