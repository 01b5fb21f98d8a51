"""Bare PyTorch training loops: what trainbench's harness is judged against. No harness, no MLflow, no Hydra.

The one entry point for "run one bare workload"; each measurement is printed as one JSON line (compare.py
reads them, a person can too):

    python benchmarks/bare_loops.py resnet50 --variant fp32      # also tf32, bf16_cl, fast   (bs 256, 224 px, SGD)
    python benchmarks/bare_loops.py distilbert --variant tf32    # also bf16, fast            (bs 64, seq 128, AdamW)
    python benchmarks/bare_loops.py bert_large --variant bf16    # also tf32, fast            (bs 32, seq 128, AdamW)
    python benchmarks/bare_loops.py mlp_epoch --variant eager    # also graph, compile, fast  (bs 32, 50,000 samples)
    python benchmarks/bare_loops.py matmul --variant bf16        # also fp32, tf32, fp16      (n 8192)
    python benchmarks/bare_loops.py mlp_epoch --variant fast --device cpu --smoke   # tiny sizes, any CPU

Variants: fp32 = TF32 off for matmul and cuDNN; tf32 = TF32 on; bf16 = bf16 autocast (TF32 on for what stays
fp32); bf16_cl = bf16 + channels_last; fast = bf16 + channels_last (images) + torch.compile (--compile-mode,
--coordinate-descent-tuning) + fused optimizer. The seed MLP's --precision (tf32 or bf16) holds for all its
variants: eager; graph = whole-step CUDA-graph capture (PyTorch's "whole network capture" recipe); compile =
the whole step under torch.compile(mode="reduce-overhead"); fast = both, reporting the faster. CUDA graphs and
fused optimizers need CUDA: on a CPU they are skipped with the reason printed.

Timing: warm-up steps, then N steps as ONE block with one synchronization at each end, the cheapest
measurement there is, so any gap to the harness is the harness's. The MLP times each epoch as one block and
reports the epochs after the first; matmul times its products as one block, as the harness does.

Where the time goes: `--profile-steps K` (resnet50 and the transformers) runs K more steps after the timed block
under torch.profiler and emits a second JSON line, "profile": how much of the GPU's timeline those steps kept it
busy, and its kernel time per step by kind (GEMM, convolution, attention, normalisation, Triton from
torch.compile, optimizer, other) with the top kernels. A busy fraction near 1 means the host is not the limit:
the step is as fast as its kernels.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Numerics:
    """What a variant switches on: the knobs the harness's precision and optimize settings turn."""

    tf32: bool
    autocast: torch.dtype | None = None
    channels_last: bool = False
    compile: bool = False
    fused_optimizer: bool = False


NUMERICS = {
    "fp32": Numerics(tf32=False),
    "tf32": Numerics(tf32=True),
    "bf16": Numerics(tf32=True, autocast=torch.bfloat16),
    "bf16_cl": Numerics(tf32=True, autocast=torch.bfloat16, channels_last=True),
    "fast": Numerics(tf32=True, autocast=torch.bfloat16, channels_last=True, compile=True, fused_optimizer=True),
}
VARIANTS = {
    "resnet50": ("fp32", "tf32", "bf16_cl", "fast"),
    "distilbert": ("tf32", "bf16", "fast"),
    "bert_large": ("tf32", "bf16", "fast"),
    "mlp_epoch": ("eager", "graph", "compile", "fast"),
    "matmul": ("bf16", "fp32", "tf32", "fp16"),
}
# The sizes, and --smoke sizes that take seconds on a CPU (compare.py --smoke mirrors them in the harness).
SIZES = {
    "resnet50": (
        {"batch_size": 256, "image_size": 224, "warmup": 10, "steps": 30},
        {"batch_size": 4, "image_size": 64, "warmup": 1, "steps": 2},
    ),
    "distilbert": (
        {"batch_size": 64, "seq_len": 128, "warmup": 10, "steps": 30},
        {"batch_size": 4, "seq_len": 16, "warmup": 1, "steps": 2},
    ),
    "bert_large": (
        {"batch_size": 32, "seq_len": 128, "warmup": 10, "steps": 30},
        {"batch_size": 4, "seq_len": 16, "warmup": 1, "steps": 2},
    ),
    # --smoke: two full batches and a partial one (the graph variant runs that one eagerly)
    "mlp_epoch": ({"batch_size": 32, "samples": 50_000, "epochs": 3}, {"batch_size": 32, "samples": 80, "epochs": 3}),
    "matmul": ({"n": 8192, "warmup": 2, "steps": 10}, {"n": 256, "warmup": 1, "steps": 3}),
}
# --smoke transformer: 2 layers, hidden 64, 2 heads, feed-forward 128 (compare.py's harness smoke overrides match).
TINY_TRANSFORMER = {"num_layers": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 128}
VOCAB_SIZE = 30522  # bert-base-uncased WordPiece; token ids are drawn from [1000, VOCAB_SIZE) as in the harness
# CUDA graphs: measured fastest for every workload here, ResNet-50 included (+2% on an H100). The harness's
# framework.compile_mode=auto picks the same for these models (trainbench.frameworks.pytorch.FASTEST_COMPILE_MODES).
DEFAULT_COMPILE_MODE = "reduce-overhead"


def main() -> int:
    args = parse_args()
    device = torch.device("cuda" if args.device in ("cuda", "gpu") else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        emit(args, {"error": "no CUDA device visible to torch: pass --device cpu"})
        return 1
    torch.manual_seed(0)
    if args.coordinate_descent_tuning:  # read by Inductor when it compiles: set before anything is compiled
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = True
    run = {
        "resnet50": resnet50,
        "distilbert": transformer,
        "bert_large": transformer,
        "mlp_epoch": mlp_epoch,
        "matmul": matmul,
    }[args.workload]
    return run(args, device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (or `argv`: interleaved.py builds the same loops from compare.py's rows)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=list(VARIANTS))
    parser.add_argument("--variant", help="see the module docstring; default: the workload's first")
    parser.add_argument("--device", choices=["cuda", "gpu", "cpu"], default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (and a tiny transformer) for a CPU")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--image-size", type=int, help="resnet50: height = width of the synthetic images")
    parser.add_argument("--seq-len", type=int, help="transformers: tokens per sequence")
    parser.add_argument("--samples", type=int, help="mlp_epoch: samples per epoch (the last batch may be partial)")
    parser.add_argument("--epochs", type=int, help="mlp_epoch: epochs; the first is reported apart")
    parser.add_argument("--n", type=int, help="matmul: n for the n x n @ n x n product")
    parser.add_argument("--warmup", type=int, help="untimed steps (products for matmul) before the timed block")
    parser.add_argument("--steps", type=int, help="timed steps (products for matmul)")
    parser.add_argument("--precision", choices=["tf32", "bf16"], default="tf32", help="mlp_epoch only")
    parser.add_argument(
        "--compile-mode",
        help="torch.compile mode: default, max-autotune-no-cudagraphs, "
        "max-autotune, reduce-overhead (default: reduce-overhead, as the harness's fast mode)",
    )
    parser.add_argument(
        "--coordinate-descent-tuning",
        action="store_true",
        help="with torch.compile: Inductor tunes each Triton kernel's launch settings (minutes more compiling)",
    )
    parser.add_argument(
        "--profile-steps", type=int, default=0, help="resnet50, transformers: profile K steps after the timed block"
    )
    args = parser.parse_args(argv)
    args.variant = args.variant or VARIANTS[args.workload][0]
    if args.variant not in VARIANTS[args.workload]:
        parser.error(f"--variant {args.variant}: {args.workload} has {', '.join(VARIANTS[args.workload])}")
    full, smoke = SIZES[args.workload]
    for key, value in (smoke if args.smoke else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.compile_mode = args.compile_mode or DEFAULT_COMPILE_MODE
    return args


# -- output --------------------------------------------------------------------------------------


def emit(args: argparse.Namespace, result: dict[str, Any], variant: str | None = None) -> None:
    """One JSON line: what ran, what it measured, and the versions it ran with."""
    line = {
        "workload": args.workload,
        "variant": variant or args.variant,
        "device": args.device,
        "smoke": args.smoke,
        **({"coordinate_descent_tuning": True} if args.coordinate_descent_tuning else {}),
        **result,
        "env": environment(args.device),
    }
    print(json.dumps(line), flush=True)


def environment(device: str) -> dict[str, str]:
    env = {"python": platform.python_version(), "torch": torch.__version__}
    if device in ("cuda", "gpu") and torch.cuda.is_available():
        env.update(
            device_name=torch.cuda.get_device_name(),
            cuda=torch.version.cuda or "",
            cudnn=str(torch.backends.cudnn.version()),
        )
    else:
        env["device_name"] = cpu_model()
    for module in ("torchvision", "transformers"):  # only those this workload imported
        if module in sys.modules:
            env[module] = sys.modules[module].__version__
    return env


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# -- shared pieces -------------------------------------------------------------------------------


def set_numerics(numerics: Numerics) -> None:
    """The same switches the harness sets: "fp32" is true fp32 (PyTorch would use TF32 for cuDNN convolutions)."""
    torch.backends.cuda.matmul.allow_tf32 = numerics.tf32
    torch.backends.cudnn.allow_tf32 = numerics.tf32
    torch.set_float32_matmul_precision("high" if numerics.tf32 else "highest")
    # Fixed shapes every step: let cuDNN pick its fastest algorithms during warm-up.
    torch.backends.cudnn.benchmark = True


def synchronizer(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def optimizer_options(numerics: Numerics, device: torch.device, notes: list[str]) -> dict[str, bool]:
    if not numerics.fused_optimizer:
        return {}
    if device.type != "cuda":
        notes.append("fused optimizer skipped: this benchmark fuses on CUDA only")
        return {}
    return {"fused": True}


def compiled(model: nn.Module, numerics: Numerics, mode: str) -> nn.Module:
    if not numerics.compile:
        return model
    return torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)


def time_block(
    step: Callable[[], None], warmup: int, steps: int, synchronize: Callable[[], None]
) -> tuple[float, float]:
    """(warm-up seconds, timed seconds): `steps` steps as one block, one synchronization at each end."""
    synchronize()
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    synchronize()
    warmed = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
    return warmed - start, time.perf_counter() - warmed


def standard_step(
    args: argparse.Namespace,
    device: torch.device,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    forward: Callable[[nn.Module], torch.Tensor],
    labels: torch.Tensor,
    numerics: Numerics,
    notes: list[str],
) -> Step:
    """The standard step: zero_grad, forward under autocast, cross-entropy, backward, optimizer step."""
    model.train()
    network = compiled(model, numerics, args.compile_mode)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=numerics.autocast, enabled=numerics.autocast is not None):
            logits = forward(network)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()

    return Step(step, notes)


def benchmark_steps(args: argparse.Namespace, device: torch.device, step: Step) -> int:
    """Time `args.steps` steps as one block after `args.warmup`; emit samples/s."""
    warmup_s, seconds = time_block(step.run, args.warmup, args.steps, synchronizer(device))
    emit(
        args,
        {
            "samples_per_s": args.batch_size * args.steps / seconds,
            "seconds": seconds,
            "warmup_s": warmup_s,
            "batch_size": args.batch_size,
            "warmup": args.warmup,
            "steps": args.steps,
            "compile_mode": args.compile_mode if NUMERICS[args.variant].compile else None,
            "notes": step.notes,
        },
    )
    if args.profile_steps:
        emit(args, {"profile": profile(step.run, args.profile_steps, synchronizer(device))})
    return 0


# -- where the time goes -------------------------------------------------------------------------

# Kernel name -> kind, first match wins. Inductor's kernels come first, by prefix: its matmul templates are
# "triton_tem_*", its fused pointwise and reduction kernels "triton_poi/per/red_*" (their names list the fused
# ops, "convolution" included, so they are not matched by the words below). cuBLAS on Hopper is "nvjet_*" or
# "sm90_xmma_*"; cuDNN convolutions carry conv/fprop/dgrad/wgrad in their names.
KERNEL_KINDS = (
    ("communication", re.compile(r"^nccl", re.I)),  # NCCL's collectives (data-parallel steps: data_parallel.py)
    ("gemm", re.compile(r"^triton_tem")),
    ("triton (torch.compile)", re.compile(r"^triton_")),
    ("attention", re.compile(r"flash|fmha|attention|attn", re.I)),
    ("convolution", re.compile(r"conv|fprop|dgrad|wgrad|implicit_gemm|implicit_convolve", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|matmul|cublas|sm\d\d_", re.I)),
    ("optimizer", re.compile(r"multi_tensor|fused_adam|fused_sgd|adamw?_|sgd_", re.I)),
    ("normalisation", re.compile(r"batch_?norm|layer_?norm|bn_|welford", re.I)),
    ("memcpy/memset", re.compile(r"^mem(cpy|set)|Memcpy|Memset", re.I)),
)


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KERNEL_KINDS if pattern.search(name)), "other")


def profile(step: Callable[[], None], steps: int, synchronize: Callable[[], None]) -> dict[str, Any]:
    """Run `steps` steps under torch.profiler: the device timeline's busy fraction and kernel time by kind."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    if not torch.cuda.is_available():
        return {"error": "profiles need CUDA: on a CPU the profiler records ops, not device kernels"}
    synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as recorded:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize()
        wall_s = time.perf_counter() - start
    return summarize_kernels(device_kernels(torch, recorded), steps, wall_s)


def device_kernels(torch: Any, recorded: Any) -> list[tuple[str, float, float]]:
    """A torch.profiler recording's kernels on the GPU as (name, start, end), less the ranges PyTorch annotates
    on the GPU timeline (e.g. "Optimizer.step#SGD.step"): they span kernels and the gaps between them, so they
    are not work."""
    return [
        (e.name, e.time_range.start, e.time_range.end)
        for e in recorded.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not getattr(e, "is_user_annotation", False)
        and e.time_range.end > e.time_range.start
    ]


def summarize_kernels(kernels: list[tuple[str, float, float]], steps: int, wall_s: float) -> dict[str, Any]:
    """(name, start us, end us) of every device kernel in `steps` steps -> busy fraction, time by kind, top 15."""
    if not kernels:
        return {"error": "the profiler recorded no device kernels"}
    busy_us, reach = 0.0, float("-inf")  # union of [start, end) intervals: overlapping kernels count once
    for _, begin, end in sorted(kernels, key=lambda k: k[1]):
        busy_us += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    span_us = max(k[2] for k in kernels) - min(k[1] for k in kernels)
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for name, begin, end in kernels:
        by_kind[kernel_kind(name)] = by_kind.get(kernel_kind(name), 0.0) + end - begin
        by_name[name] = by_name.get(name, 0.0) + end - begin
    kernel_us = sum(by_kind.values())
    per_step_ms = {kind: round(us / steps / 1e3, 3) for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1])}
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:15]
    return {
        "steps": steps,
        "wall_ms_per_step": round(wall_s / steps * 1e3, 3),
        "device_span_ms_per_step": round(span_us / steps / 1e3, 3),
        "device_busy_ms_per_step": round(busy_us / steps / 1e3, 3),
        "busy_fraction": round(busy_us / span_us, 4) if span_us else None,
        "kernels_per_step": round(len(kernels) / steps, 1),
        "kernel_ms_per_step_by_kind": per_step_ms,
        "kernel_share_by_kind": {kind: round(by_kind[kind] / kernel_us, 4) for kind in per_step_ms},
        "top_kernels": [
            {"name": name[:120], "kind": kernel_kind(name), "ms_per_step": round(us / steps / 1e3, 3)}
            for name, us in top
        ],
        "note": "profiled after the timed block; the profiler itself slows the host side a little",
    }


# -- workloads -----------------------------------------------------------------------------------


@dataclass
class Step:
    """One training step, ready to call: what benchmark_steps times (and interleaved.py alternates)."""

    run: Callable[[], None]
    notes: list[str]


def resnet50(args: argparse.Namespace, device: torch.device) -> int:
    return benchmark_steps(args, device, resnet50_step(args, device))


def resnet50_step(args: argparse.Namespace, device: torch.device) -> Step:
    """torchvision ResNet-50, random init, 1000 classes; synthetic images resident on the device; SGD."""
    import torchvision

    numerics, notes = NUMERICS[args.variant], []
    set_numerics(numerics)
    memory_format = torch.channels_last if numerics.channels_last else torch.contiguous_format
    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(device, memory_format=memory_format)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **optimizer_options(numerics, device, notes))
    return standard_step(args, device, model, optimizer, lambda network: network(images), labels, numerics, notes)


def transformer(args: argparse.Namespace, device: torch.device) -> int:
    return benchmark_steps(args, device, transformer_step(args, device))


def transformer_step(args: argparse.Namespace, device: torch.device) -> Step:
    """Sequence classification (2 labels), random init, no attention mask (nothing is padded); AdamW lr 1e-4,
    no weight decay (the harness's conf/optim/adamw.yaml; torch's own default is 0.01: one more kernel)."""
    numerics, notes = NUMERICS[args.variant], []
    set_numerics(numerics)
    model = transformer_classifier(args.workload, args.smoke).to(device)
    tokens = torch.randint(1000, VOCAB_SIZE, (args.batch_size, args.seq_len), device=device)
    labels = torch.randint(0, 2, (args.batch_size,), device=device)
    options = optimizer_options(numerics, device, notes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, **options)
    return standard_step(
        args, device, model, optimizer, lambda network: network(input_ids=tokens).logits, labels, numerics, notes
    )


def transformer_classifier(name: str, tiny: bool) -> nn.Module:
    """DistilBERT (transformers' default config) or BERT-Large, from config objects (no hub access)."""
    import transformers

    if name == "distilbert":
        dims = {}
        if tiny:
            t = TINY_TRANSFORMER
            dims = {
                "n_layers": t["num_layers"],
                "dim": t["hidden_size"],
                "n_heads": t["num_heads"],
                "hidden_dim": t["intermediate_size"],
            }
        return transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(num_labels=2, **dims))
    t = (
        TINY_TRANSFORMER
        if tiny
        else {"num_layers": 24, "hidden_size": 1024, "num_heads": 16, "intermediate_size": 4096}
    )
    config = transformers.BertConfig(
        num_hidden_layers=t["num_layers"],
        hidden_size=t["hidden_size"],
        num_attention_heads=t["num_heads"],
        intermediate_size=t["intermediate_size"],
        num_labels=2,
    )
    return transformers.BertForSequenceClassification(config)


def matmul(args: argparse.Namespace, device: torch.device) -> int:
    """TFLOPS of `steps` products n x n @ n x n into a preallocated output, timed as one block (one
    synchronization at each end, as the harness times them), after `warmup` products."""
    multiply = matmul_product(args, device)
    synchronize = synchronizer(device)
    for _ in range(args.warmup):
        multiply()
    synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        multiply()
    synchronize()
    per_product = (time.perf_counter() - start) / args.steps
    emit(
        args,
        {
            "tflops": 2.0 * args.n**3 / per_product / 1e12,
            "matmul_time_ms": per_product * 1e3,
            "n": args.n,
            "warmup": args.warmup,
            "steps": args.steps,
        },
    )
    return 0


def matmul_product(args: argparse.Namespace, device: torch.device) -> Callable[[], None]:
    """One n x n @ n x n product of the variant's dtype into a preallocated output."""
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.variant]
    # As the harness: every precision but fp32 turns TF32 on (it leaves a bf16 or fp16 product unchanged).
    set_numerics(Numerics(tf32=args.variant != "fp32"))
    a = torch.randn(args.n, args.n, device=device, dtype=dtype)
    b = torch.randn(args.n, args.n, device=device, dtype=dtype)
    out = torch.empty(args.n, args.n, device=device, dtype=dtype)

    def multiply() -> None:
        torch.matmul(a, b, out=out)

    return multiply


# -- the seed MLP's epoch ------------------------------------------------------------------------


def seed_mlp() -> nn.Sequential:
    """The seed blog's MLP: Flatten -> 3072-3000 ReLU -> 3000-1000 ReLU -> 1000-10 (logits)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(3072, 3000), nn.ReLU(), nn.Linear(3000, 1000), nn.ReLU(), nn.Linear(1000, 10)
    )


@dataclass
class EpochLoop:
    """One variant of the MLP's epoch: `run(order)` trains on every batch of the permutation `order`."""

    run: Callable[[torch.Tensor], None]
    setup_s: float = 0.0
    notes: tuple[str, ...] = ()


def mlp_epoch(args: argparse.Namespace, device: torch.device) -> int:
    """CIFAR-10-shaped data held on the device as normalised float32; each epoch a fresh on-device permutation,
    batches are its slices (the last one partial), mean cross-entropy, SGD lr 0.01 momentum 0.9."""
    numerics, images, labels = mlp_data(args, device)
    builders = {"eager": eager_epochs, "graph": graph_epochs, "compile": compiled_epochs}
    names = ["graph", "compile"] if args.variant == "fast" else [args.variant]
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            torch.manual_seed(0)
            loop = builders[name](seed_mlp().to(device), images, labels, args, numerics)
        except Unsupported as reason:  # CUDA graphs on a CPU
            emit(args, {"skipped": str(reason)}, variant=name)
            continue
        except Exception as error:  # the fast variant still reports the other one
            if args.variant != "fast":
                raise
            emit(args, {"error": one_line(error)}, variant=name)
            continue
        results[name] = epoch_result(loop, args, device)
        emit(args, results[name], variant=name)
    if args.variant == "fast":
        if not results:
            emit(args, {"error": "neither graph nor compile ran"})
            return 1
        chosen = max(results, key=lambda name: results[name]["samples_per_s"])
        emit(args, {**results[chosen], "chosen": chosen})
    return 0


def mlp_data(args: argparse.Namespace, device: torch.device) -> tuple[Numerics, torch.Tensor, torch.Tensor]:
    """The numerics set, then CIFAR-10-shaped images and labels on the device."""
    numerics = Numerics(tf32=True, autocast=torch.bfloat16 if args.precision == "bf16" else None)
    set_numerics(numerics)
    pixels = torch.randint(0, 256, (args.samples, 3, 32, 32), dtype=torch.uint8, device=device)
    images = (pixels.float() / 255.0 - 0.5) / 0.25  # the harness's synthetic normalisation: mean 0.5, std 0.25
    labels = torch.randint(0, 10, (args.samples,), device=device)
    return numerics, images, labels


def epoch_result(loop: EpochLoop, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Time each epoch as one block: a fresh permutation on the device, then every batch of it."""
    synchronize = synchronizer(device)
    seconds = []
    for _ in range(args.epochs):
        synchronize()
        start = time.perf_counter()
        loop.run(torch.randperm(args.samples, device=device))
        synchronize()
        seconds.append(time.perf_counter() - start)
    steady = seconds[1:] or seconds  # the first epoch pays for allocation, autotuning and compilation
    return {
        "samples_per_s": args.samples * len(steady) / sum(steady),
        "steady_epoch_s": statistics.mean(steady),
        "epoch_time_s": seconds,
        "setup_s": loop.setup_s,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "samples": args.samples,
        "epochs": args.epochs,
        "notes": list(loop.notes),
    }


def one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


class Unsupported(Exception):
    """This variant cannot run on this device (the message says why)."""


def batch_loss(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    index: torch.Tensor,
    numerics: Numerics,
    cache_casts: bool = True,
) -> torch.Tensor:
    """Gather the batch on the device, forward under autocast, mean cross-entropy (in fp32, as the harness)."""
    with torch.autocast(
        images.device.type, dtype=numerics.autocast, enabled=numerics.autocast is not None, cache_enabled=cache_casts
    ):
        logits = model(images[index])
    return F.cross_entropy(logits.float(), labels[index])


def eager_epochs(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace, numerics: Numerics
) -> EpochLoop:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def run(order: torch.Tensor) -> None:
        for start in range(0, len(order), args.batch_size):
            optimizer.zero_grad(set_to_none=True)
            batch_loss(model, images, labels, order[start : start + args.batch_size], numerics).backward()
            optimizer.step()

    return EpochLoop(run)


def graph_epochs(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace, numerics: Numerics
) -> EpochLoop:
    """Whole-step CUDA graph (docs: CUDA semantics > CUDA Graphs > Whole-network capture): the batch gather
    from a static index buffer, forward, backward and the fused SGD step are one graph, replayed once per
    full batch; the last partial batch runs eagerly."""
    if images.device.type != "cuda":
        raise Unsupported("CUDA graphs need a CUDA device")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    static_index = torch.zeros(args.batch_size, dtype=torch.long, device=images.device)

    def step(index: torch.Tensor) -> None:
        # Autocast's weight-cast cache must be off under capture (CUDA Graphs docs: "Usage with autocast").
        batch_loss(model, images, labels, index, numerics, cache_casts=False).backward()
        optimizer.step()

    start = time.perf_counter()
    # Warm up on a side stream before capture, as the recipe says: cuBLAS workspaces, AccumulateGrad, and the
    # optimizer's momentum buffers must exist before the graph records their addresses.
    side_stream = torch.cuda.Stream()
    side_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side_stream):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step(static_index)
    torch.cuda.current_stream().wait_stream(side_stream)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # backward inside the capture allocates .grad from the graph's pool
    with torch.cuda.graph(graph):
        step(static_index)
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - start
    full_batches = args.samples // args.batch_size

    def run(order: torch.Tensor) -> None:
        for batch in range(full_batches):
            static_index.copy_(order[batch * args.batch_size : (batch + 1) * args.batch_size])
            graph.replay()
        if len(order) > full_batches * args.batch_size:
            # Zero in place rather than set to None: .grad stays the graph's static buffers, which the eager
            # backward accumulates into and the next replay overwrites.
            optimizer.zero_grad(set_to_none=False)
            step(order[full_batches * args.batch_size :])

    return EpochLoop(run, setup_s, ("SGD fused=True, captured in the graph",))


def compiled_epochs(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace, numerics: Numerics
) -> EpochLoop:
    """The whole step (gather, forward, loss, backward, SGD step) under torch.compile, by default in
    "reduce-overhead" mode (CUDA graphs via cudagraph trees); the last partial batch runs eagerly so that its
    shape never triggers a recompilation."""
    # foreach SGD, traced by dynamo and fused into a few Triton kernels (the compiled-optimizer recipe): the
    # fused=True kernel would be an opaque call inside the graph.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    static_index = torch.zeros(args.batch_size, dtype=torch.long, device=images.device)
    for resident in (images, labels, static_index):  # same address every call: CUDA graphs must not copy them
        torch._dynamo.mark_static_address(resident)

    def step(index: torch.Tensor) -> None:
        batch_loss(model, images, labels, index, numerics).backward()
        optimizer.step()

    def whole_step() -> None:
        step(static_index)

    # One eager step first, so that the momentum buffers exist as ordinary tensors before compilation: created
    # inside a CUDA-graphed region they would live in its memory pool, which the next replay overwrites.
    optimizer.zero_grad(set_to_none=True)
    step(static_index)
    compiled_step = torch.compile(whole_step, mode=None if args.compile_mode == "default" else args.compile_mode)
    full_batches = args.samples // args.batch_size
    cuda = images.device.type == "cuda"

    def run(order: torch.Tensor) -> None:
        for batch in range(full_batches):
            static_index.copy_(order[batch * args.batch_size : (batch + 1) * args.batch_size])
            optimizer.zero_grad(set_to_none=True)  # host-side only: keeps dynamo's guards on .grad constant
            if cuda:
                torch.compiler.cudagraph_mark_step_begin()
            compiled_step()
        if len(order) > full_batches * args.batch_size:
            optimizer.zero_grad(set_to_none=True)
            step(order[full_batches * args.batch_size :])

    notes = [f"torch.compile mode={args.compile_mode}, SGD foreach compiled into the step"]
    if not cuda:
        notes.append("no CUDA graphs on a CPU: reduce-overhead compiles without them")
    return EpochLoop(run, 0.0, tuple(notes))


if __name__ == "__main__":
    sys.exit(main())
