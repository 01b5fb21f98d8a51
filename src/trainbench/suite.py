"""`trainbench suite`: the standard suite, a fixed and versioned set of workloads that other machines ran too.

The workloads are conf/suite_cell/*.yaml; which of them a machine runs, and at which precisions, is a preset per
device class (conf/experiment/suite_standard_<class>.yaml):
- cpu: a CPU, a laptop, an Apple GPU -- the workloads every device runs, in fp32;
- gpu: one NVIDIA GPU -- the same workloads in fp32 (so a CPU compares with a GPU), then the MLP, the GEMM and
  ResNet-50 at batch 256 in mixed_bf16 (the *_bf16 workloads);
- multi_gpu: 2 or more NVIDIA GPUs and `device.count=2` -- ResNet-50 at batch 256 per GPU in bf16 on 1 and 2 GPUs.

Every run of the suite carries the tags trainbench.suite and trainbench.suite_version (docs/mlflow-schema.md),
and the first screen's suite summary (trainbench.report.suite_summary) compares only rows of the same version.
SUITE_FINGERPRINT is a hash of every workload's comparison setting: tests/test_suite.py fails when a workload
changes and SUITE_VERSION was not bumped with it.

Light on purpose: the sweep's process imports it (no deep-learning framework).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable

SUITE_NAME = "standard"
SUITE_VERSION = 2
# sha256 of the sorted setting ids of every preset's cells (suite_fingerprint): bump SUITE_VERSION and set this
# anew whenever it changes, so that rows of two versions never share a chart.
SUITE_FINGERPRINT = "f7e887505210aaf3"
CLASSES = ("cpu", "gpu", "multi_gpu")
ENV = "TRAINBENCH_SUITE"  # "standard/2" in every process of a suite's sweep: its cells tag their runs with it


def preset(device_class: str) -> str:
    return f"suite_standard_{device_class}"


def typed(overrides: Iterable[str]) -> dict[str, str]:
    """key -> value of each `key=value` (or `+key=value`) on the command line."""
    return dict(o.lstrip("+").split("=", 1) for o in overrides if "=" in o)


def device_class(overrides: Iterable[str], gpus: int | None = None) -> str:
    """Which preset a command line runs: device=cpu -> cpu; device=gpu (or auto on a machine with an NVIDIA GPU)
    -> gpu, or multi_gpu when it also says device.count=2 or more; Apple GPUs and GPU-less machines -> cpu."""
    values = typed(overrides)
    device = values.get("device", "auto")
    if device == "cpu":
        return "cpu"
    found = nvidia_gpus() if gpus is None else gpus
    if found == 0:
        return "cpu"  # device=gpu on a Mac runs PyTorch on the Apple GPU: the cpu class's workloads, in fp32
    count = values.get("device.count", "1")
    if count == "all":
        return "multi_gpu" if found >= 2 else "gpu"
    return "multi_gpu" if count.isdigit() and int(count) >= 2 else "gpu"


def nvidia_gpus() -> int:
    """How many NVIDIA GPUs nvidia-smi lists (0 where there is none): the sweep never imports a framework."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def command_line(argv: list[str], gpus: int | None = None) -> list[str]:
    """The sweep's command line for `trainbench suite ARGS`: the class's preset first, then what the user typed
    (sweep.dry_run=true, tracking.uri=..., device=...). The class's device.count=2 is the preset's own axis."""
    chosen = device_class(argv, gpus)
    typed = [a for a in argv if not (chosen == "multi_gpu" and a.startswith("device.count="))]
    return [f"+experiment={preset(chosen)}", *typed]


def tag_value() -> str:
    return f"{SUITE_NAME}/{SUITE_VERSION}"


def tags() -> dict[str, str]:
    """The suite's tags for a run of this process, when it runs as part of the suite (ENV set); else none."""
    value = os.environ.get(ENV, "")
    if "/" not in value:
        return {}
    name, version = value.split("/", 1)
    return {"trainbench.suite": name, "trainbench.suite_version": version}


def fingerprint(setting_ids: Iterable[str]) -> str:
    return hashlib.sha256(" ".join(sorted(set(setting_ids))).encode()).hexdigest()[:16]


def workloads(device_class: str) -> list[str]:
    """The workloads (conf/suite_cell/ names) the class's preset runs, in order."""
    import yaml

    from trainbench.config import CONF_DIR

    loaded = yaml.safe_load((CONF_DIR / "experiment" / f"{preset(device_class)}.yaml").read_text(encoding="utf-8"))
    return [name.strip() for name in str(loaded["hydra"]["sweeper"]["params"]["+suite_cell"]).split(",")]


def refusal(argv: list[str], device_class: str, gpus: int | None = None) -> str | None:
    """Why the command line cannot be the suite (one line), or None. The suite fixes its workloads and their
    precisions; `+suite_cell=a,b` runs some of the class's workloads, as they are. `gpus`: how many NVIDIA GPUs
    this machine has (nvidia_gpus() when None)."""
    values = typed(argv)
    count = values.get("device.count", "1")
    multi = values.get("device", "auto") != "cpu" and count.isdigit() and int(count) >= 2
    # Without an NVIDIA GPU device_class falls back to the cpu class, whose single-device workloads would refuse
    # the count in words that never say the multi_gpu class needs GPUs.
    if multi and (nvidia_gpus() if gpus is None else gpus) == 0:
        return (
            f"`trainbench suite device.count={count}`: the multi_gpu class ({preset('multi_gpu')}) needs 2 or "
            "more NVIDIA GPUs and this machine has none; run this machine's class without device.count: "
            "`trainbench suite device=cpu`"
        )
    fixed = [a for a in argv if a.lstrip("+").startswith(("experiment=", "precision="))]
    if fixed:
        return (
            f"`trainbench suite {fixed[0]}`: the suite fixes its workloads and precisions; run "
            "`python src/run.py ...` for other settings"
        )
    known = workloads(device_class)
    for arg in argv:
        if arg.lstrip("+").startswith("suite_cell="):
            unknown = [w for w in arg.split("=", 1)[1].split(",") if w not in known]
            if unknown:
                return (
                    f"`trainbench suite {arg}`: {', '.join(unknown)} is not a workload of the {device_class} class; "
                    f"choose from {', '.join(known)}"
                )
    return None
