"""Data-parallel training, the harness against hand-written loops: both models, both frameworks, 1 and 2 GPUs, ONE
command.

    python benchmarks/data_parallel.py                               # PyTorch DDP + Keras-on-JAX, BERT-Large + ResNet-50, 1 and 2 GPUs
    python benchmarks/data_parallel.py --frameworks pytorch --models bert_large --profile-steps 5
    python benchmarks/data_parallel.py --variant fast --frameworks pytorch     # torch.compile'd DDP on both sides
    python benchmarks/data_parallel.py --mode processes --models bert_large --repeats 3   # as people run them
    python benchmarks/data_parallel.py --smoke --device cpu --rounds 2 --out /tmp/dp     # any CPU: gloo ranks, XLA host devices
    python benchmarks/data_parallel.py --merge a.json b.json --out results/DIR            # one report of several calls

Rows are (framework, model, device count). `--mode interleaved` (the default) runs each row in its own processes:
one per GPU for PyTorch, started by torchrun as a hand-written DDP script is (one plain process at 1 GPU), one for
JAX. Every process builds both sides and runs hand-written block, harness block, hand-written block, ... each block
between a synchronization of every device at both ends; each harness block is divided by the mean of the
hand-written blocks beside it (interleaved.py's pairing, for the same reason: a shared host's speed wanders more
between processes than the 2% being judged). Scaling efficiency is each side's median at N GPUs over N times its
median at 1 GPU (rows are separate processes, minutes apart).

The hand-written loops, written as their framework's documentation writes them:
- PyTorch: `DistributedDataParallel(model, device_ids=[rank], gradient_as_bucket_view=True)` at N > 1 (the bare model
  at 1 GPU), zero_grad(set_to_none=True), forward under bf16 autocast, cross-entropy in fp32, backward, optimizer
  step; BERT-Large: transformers' BertForSequenceClassification, AdamW lr 1e-4 (no weight decay); ResNet-50:
  torchvision's, channels_last, SGD lr 0.01 momentum 0.9. Synchronization: torch.cuda.synchronize, a barrier of
  every rank (NCCL), synchronize again. `--variant fast`: the (DDP) model under torch.compile in reduce-overhead mode (CUDA graphs of
  each compiled piece; DDP's all-reduces run between them) with a fused optimizer.
- Keras on JAX (keras.io, "Multi-GPU distributed training with JAX"): the model's variables replicated on a
  one-axis mesh, the batch put on the devices split along it, `jax.jit(train_step, donate_argnums=0)` over
  `model.stateless_call`, `jax.value_and_grad` and `optimizer.stateless_apply`; XLA inserts the all-reduce. Its
  network is the one the harness builds (trainbench.frameworks.keras.models): the loop is what is judged.
The harness side is the benchmark task's own code path: tasks.base.model_and_data, the framework's trainer and its
`resident_step`, timing.warm_up, then timing.time_block with the framework's synchronize and step clock.

`--profile-steps K` then runs K more steps of each side under the framework's profiler (rank 0 / the first GPU) and
splits the device's time per step: compute kernels, communication (NCCL) kernels, the communication not hidden
behind compute, and idle time (the host not keeping up); the wall time per step beside it.

`--mode processes`: each side in its own processes, as a user runs it: the hand-written loop alone (torchrun), then
the harness cell through `src/run.py` into a scratch MLflow store (compare.py's Harness), hand-written, harness, ...

Writes <out>/<date>-<device>-data-parallel.md (date, device, driver, versions, the commands) and .json, .log.

Minutes a row on 4x H100 (results/2026-11-26-data-parallel): PyTorch eager 1.3-1.6 with --profile-steps 5; Keras on
JAX 1.2-2.2 (XLA compiles each side); PyTorch `fast` BERT-Large 3-4 (Inductor compiles each side). A device call
of 10 minutes takes a part: split by --frameworks / --models / --counts, run parts side by side on their own GPUs
(CUDA_VISIBLE_DEVICES), and --merge their .json files.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402 - rows' overrides, pair statistics, the harness as a user runs it; puts src/ on the path

FRAMEWORKS = ("pytorch", "jax")
MODELS = {
    # The scaling study's cells (conf/scaling_cell/), spelled out: the hand-written side takes its sizes from them.
    "bert_large": (
        "task=benchmark model=bert_large data=synthetic_text precision=mixed_bf16 optim=adamw optim.lr=0.0001"
        " batch_size=32",
        "seq/s",
    ),
    "resnet50": (
        "task=benchmark model=resnet50 data=synthetic_imagenet precision=mixed_bf16 framework.channels_last=true"
        " batch_size=256",
        "img/s",
    ),
}
WARMUP_STEPS = 10  # both sides: cuDNN autotuning, NCCL set-up, the first all-reduces, DDP's bucket rebuild
SMOKE_WARMUP_STEPS = 1
COMMUNICATION = ("nccl", "all-reduce", "all_reduce", "allreduce", "reduce-scatter", "all-gather", "collective")


# ==== the orchestrator ==========================================================================================


@dataclass
class RowResult:
    """One row: its samples (block rates interleaved, or one rate per process), what ran, and its profiles."""

    framework: str
    model: str
    count: int
    variant: str
    mode: str
    unit: str
    bare: list[float] = field(default_factory=list)
    harness: list[float] = field(default_factory=list)
    pair_ratios: list[float] = field(default_factory=list)
    steps_per_block: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(args)
    if args.merge:
        rows, envs = [], []
        for path in args.merge:
            report = json.loads(Path(path).read_text())
            envs.append({**report["environment"], "from": path})
            rows += [RowResult(**row) for row in report["rows"]]
        text = render(rows, envs, "`python " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) + "`")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "data-parallel-merged.md").write_text(text)
        print(text)
        return 0
    env = environment(args.device)
    command = "`python " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) + "`"
    stem = f"{env['date'][:10]}-{compare.slug(env['device'])}-data-parallel"
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[RowResult] = []
    with open(args.out / f"{stem}.log", "a") as log:
        for framework in args.frameworks:
            for model in args.models:
                for count in args.counts:
                    started = time.perf_counter()
                    print(f"== {framework} {model} x{count} ({args.variant}, {args.mode})", flush=True)
                    run = run_interleaved if args.mode == "interleaved" else run_processes
                    row = run(framework, model, count, args, log)
                    row.wall_s = time.perf_counter() - started
                    rows.append(row)
                    print(f"   {summary_line(row)} ({row.wall_s:.0f} s)", flush=True)
                    env.update(row.env)
                    write_report(rows, env, command, args.out / stem)
    print(render(rows, [env], command))
    return 1 if any(row.error for row in rows) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated: pytorch, jax")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--counts", default="1,2", help="devices per row, comma-separated")
    parser.add_argument("--variant", choices=["eager", "fast"], default="eager", help="fast: optimize=fast (compiled)")
    parser.add_argument("--mode", choices=["interleaved", "processes"], default="interleaved")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved: harness blocks, each between two bare")
    parser.add_argument("--block-seconds", type=float, default=2.0, help="interleaved: about how long a block lasts")
    parser.add_argument("--repeats", type=int, default=2, help="processes: harness cells, each between two bare")
    parser.add_argument("--steps", type=int, default=30, help="processes: timed steps per block (3 blocks a process)")
    parser.add_argument("--profile-steps", type=int, default=0, help="profile K steps of each side after the blocks")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument(
        "--jax-loop",
        choices=["pure", "pure_flat", "keras_io"],
        default="pure",
        help="JAX's hand-written side: pure (shard_map, per-device BatchNorm, as DDP), pure_flat (the same, its"
        " gradients and moving statistics all-reduced as one raveled buffer each) or keras_io (keras.io's loop)",
    )
    parser.add_argument(
        "--jax-step",
        choices=["per_device", "keras"],
        default="per_device",
        help="the harness's framework.data_parallel_step for JAX rows",
    )
    parser.add_argument("--smoke", action="store_true", help="compare.py's --smoke sizes: seconds on a CPU")
    parser.add_argument("--out", type=Path, default=compare.ROOT / "results")
    parser.add_argument("--row-timeout", type=int, default=900, help="seconds before a row's processes are killed")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="one report from earlier calls' .json; runs nothing")
    # Inside a row's processes (set by the orchestrator):
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=list(MODELS), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bare-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.frameworks = names(args.frameworks, FRAMEWORKS, "--frameworks", parser)
    args.models = names(args.models, tuple(MODELS), "--models", parser)
    counts = [c.strip() for c in args.counts.split(",") if c.strip()]
    if not counts or not all(c.isdigit() and int(c) >= 1 for c in counts):
        parser.error(f"--counts {args.counts}: whole numbers >= 1, e.g. 1,2")
    args.counts = [int(c) for c in counts]
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: an interval needs two pairs")
    args.cell_timeout = args.row_timeout  # compare.Harness reads this name
    return args


def names(text: str, allowed: tuple[str, ...], flag: str, parser: argparse.ArgumentParser) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in allowed]
    if unknown or not chosen:
        parser.error(f"{flag} {text}: choose from {', '.join(allowed)}")
    return chosen


def harness_overrides(framework: str, model: str, count: int, args: argparse.Namespace) -> list[str]:
    """The harness cell of a row, by compare.py's rules (device, --smoke sizes)."""
    overrides, _ = MODELS[model]
    extra = [f"framework={framework}", f"device.count={count}", f"task.warmup_steps={warmup_steps(args)}"]
    if args.variant == "fast":
        extra.append("optimize=fast")
    if framework == "jax":
        extra.append(f"framework.data_parallel_step={args.jax_step}")
    workload = compare.Workload(f"{framework}_{model}", model, overrides)
    return compare.harness_overrides(workload, args, tuple(extra))


def warmup_steps(args: argparse.Namespace) -> int:
    return SMOKE_WARMUP_STEPS if args.smoke else WARMUP_STEPS


def worker_flags(framework: str, model: str, count: int, args: argparse.Namespace, result: Path) -> list[str]:
    flags = ["--worker", framework, "--model", model, "--count", str(count), "--result", str(result)]
    flags += ["--variant", args.variant, "--rounds", str(args.rounds), "--block-seconds", str(args.block_seconds)]
    flags += ["--steps", str(args.steps), "--profile-steps", str(args.profile_steps), "--device", args.device]
    flags += ["--jax-loop", args.jax_loop, "--jax-step", args.jax_step]
    return flags + (["--smoke"] if args.smoke else [])


def worker_command(framework: str, count: int, flags: list[str]) -> list[str]:
    """PyTorch on several devices: torchrun, one process per device, as a hand-written DDP script is started."""
    if framework == "pytorch" and count > 1:
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(count)]
        return [sys.executable, *launcher, str(Path(__file__).resolve()), *flags]
    return [sys.executable, str(Path(__file__).resolve()), *flags]


def worker_environment(framework: str, count: int, args: argparse.Namespace) -> dict[str, str]:
    paths = [str(compare.ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    if framework == "jax" and args.device == "cpu" and count > 1:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}".strip()
    return env


def run_worker(
    framework: str, model: str, count: int, args: argparse.Namespace, log: Any, extra: tuple[str, ...] = ()
) -> tuple[dict[str, Any] | None, str]:
    """One row's processes to the end; (rank 0's result, the last line of its output)."""
    with tempfile.TemporaryDirectory(prefix="trainbench-dp-") as scratch:
        result = Path(scratch) / "result.json"
        command = worker_command(framework, count, [*worker_flags(framework, model, count, args, result), *extra])
        finished = compare.run_logged(
            command, compare.ROOT, worker_environment(framework, count, args), args.row_timeout, log
        )
        if not result.exists():
            return None, compare.tail(finished)
        return json.loads(result.read_text()), ""


def run_interleaved(framework: str, model: str, count: int, args: argparse.Namespace, log: Any) -> RowResult:
    row = RowResult(framework, model, count, args.variant, "interleaved", MODELS[model][1])
    found, why = run_worker(framework, model, count, args, log)
    if found is None:
        row.error = why
        return row
    for key, value in found.items():
        setattr(row, key, value)
    return row


def run_processes(framework: str, model: str, count: int, args: argparse.Namespace, log: Any) -> RowResult:
    """hand-written, harness, hand-written, ... each in its own processes; a sample is a process's mean block rate."""
    row = RowResult(framework, model, count, args.variant, "processes", MODELS[model][1])
    scratch = Path(tempfile.mkdtemp(prefix="trainbench-dp-store-"))
    harness = compare.Harness(scratch, args, log)
    overrides = harness_overrides(framework, model, count, args)
    blocks = (f"task.steps={args.steps}", "task.repeats=3")  # after --smoke's sizes: the hand-written side's blocks
    workload = compare.Workload(f"{framework}_{model}", model, " ".join(overrides), unit=row.unit)
    row.settings = {
        "harness": harness.shown([*overrides, *blocks]),
        "hand-written": f"data_parallel.py --worker {framework} --bare-only (3 blocks of {args.steps} steps)",
    }
    samples: list[tuple[str, float | None]] = []
    for index in range(2 * args.repeats + 1):
        if index % 2 == 0:
            found, why = run_worker(framework, model, count, args, log, ("--bare-only",))
            value = statistics.fmean(found["bare"]) if found else None
            row.env = found["env"] if found else row.env
            samples.append(("bare", value))
            print(f"   bare    {value if value is None else round(value, 1)} {why}", flush=True)
        else:
            sample = harness.run(workload, args, blocks)
            samples.append(("harness", sample.value))
            if sample.error:
                row.error = sample.error
    row.bare = [v for side, v in samples if side == "bare" and v is not None]
    row.harness = [v for side, v in samples if side == "harness" and v is not None]
    for index, (side, value) in enumerate(samples):
        beside = [v for s, v in samples[max(0, index - 1) : index + 2] if s == "bare" and v is not None]
        if side == "harness" and value is not None and beside:
            row.pair_ratios.append(value / statistics.fmean(beside))
    if not row.bare and row.error is None:
        row.error = "the hand-written loop produced no figure (see the .log)"
    return row


# ==== the report ==================================================================================================


def environment(device: str) -> dict[str, str]:
    env = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "python": platform.python_version()}
    env["cpu"] = f"{compare.cpu_model()} ({os.cpu_count()} threads)"
    if device == "gpu":
        gpu = compare.gpu_identity()
        env.update(device=f"{gpu.get('count', '?')}x {gpu['name']}", driver=gpu.get("driver", "?"))
    else:
        env["device"] = compare.cpu_model()
    for package in ("trainbench", "mlflow", "hydra-core"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            env[package] = metadata.version(package)
    return env


def scaling(rows: list[RowResult], row: RowResult, side: str) -> str:
    """median at N devices / (N x median at 1 device) of the same framework, model, variant and mode."""
    values = getattr(row, side)
    one = next(
        (
            r
            for r in rows
            if (r.framework, r.model, r.variant, r.mode, r.count)
            == (row.framework, row.model, row.variant, row.mode, 1)
        ),
        None,
    )
    if row.count == 1 or one is None or not values or not getattr(one, side):
        return ""
    return f"{statistics.median(values) / (row.count * statistics.median(getattr(one, side))):.3f}"


def summary_line(row: RowResult) -> str:
    if row.error:
        return f"failed: {row.error}"
    estimate = compare.paired_estimate(row.pair_ratios)
    ratio = "n/a" if estimate is None else f"{estimate[0]:.3f} ({estimate[1]:.3f}-{estimate[2]:.3f})"
    return f"hand-written {compare.spread(row.bare)}, harness {compare.spread(row.harness)}, harness/hand {ratio}"


def render(rows: list[RowResult], envs: list[dict[str, str]], command: str) -> str:
    lines = ["# Data-parallel training: the harness against hand-written loops", ""]
    for env in envs:
        lines.append("- " + ", ".join(f"{key} {value}" for key, value in env.items()))
    lines += [
        f"- {command}",
        "- interleaved: hand-written, harness, hand-written, ... blocks in the same processes, each harness block over "
        "the mean of the hand-written blocks beside it (geometric mean, 95% t-interval); processes: each sample is one "
        "process's (cell's) mean block rate, paired with the hand-written processes beside it. Scaling efficiency: "
        "median at N / (N x median at 1) of the same side.",
        "",
        "| framework | model | variant | mode | devices | unit | steps a block | hand-written median (min-max) "
        "| harness median (min-max) | harness / hand-written (95% CI) | >= 0.98 | scaling eff. hand-written "
        "| scaling eff. harness |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        head = f"| {row.framework} | {row.model} | {row.variant} | {row.mode} | {row.count} | {row.unit} |"
        if row.error and not row.harness:
            lines.append(f"{head} | failed: {row.error} | | | | | |")
            continue
        estimate = compare.paired_estimate(row.pair_ratios)
        shown = "n/a" if estimate is None else f"{estimate[0]:.3f} ({estimate[1]:.3f}-{estimate[2]:.3f})"
        lines.append(
            f"{head} {row.steps_per_block or ''} | {compare.spread(row.bare)} | {compare.spread(row.harness)} | {shown} "
            f"| {compare.verdict(estimate, row.pair_ratios[0] if len(row.pair_ratios) == 1 else None)} "
            f"| {scaling(rows, row, 'bare')} | {scaling(rows, row, 'harness')} |"
        )
    profiled = [(row, side, p) for row in rows for side, p in row.profile.items()]
    if profiled:
        lines += [
            "",
            "Where a step's time goes (profiler, rank 0 / the first device, ms per step): compute = time any compute "
            "kernel runs; communication = time a collective (NCCL) kernel runs; exposed = communication with no "
            "compute beside it; idle = the device runs nothing (the host is behind).",
            "",
            "| framework | model | variant | devices | side | wall | device span | compute | communication | exposed "
            "communication | idle | kernels |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row, side, p in profiled:
            if "error" in p:
                lines.append(f"| {row.framework} | {row.model} | {row.variant} | {row.count} | {side} | {p['error']} |")
                continue
            lines.append(
                f"| {row.framework} | {row.model} | {row.variant} | {row.count} | {side} | {p['wall_ms_per_step']} | "
                f"{p['device_span_ms_per_step']} | {p['compute_ms_per_step']} | {p['communication_ms_per_step']} | "
                f"{p['exposed_communication_ms_per_step']} | {p['idle_ms_per_step']} | {p['kernels_per_step']} |"
            )
    lines += ["", "Settings of each row:", ""]
    for row in rows:
        if row.settings:
            settings = "; ".join(f"{k}: {v}" for k, v in row.settings.items())
            lines.append(f"- {row.framework} {row.model} {row.variant} {row.mode} x{row.count}: {settings}")
    return "\n".join(lines) + "\n"


def write_report(rows: list[RowResult], env: dict[str, str], command: str, stem: Path) -> None:
    """Rewritten after each row, so an interrupted call keeps what it measured."""
    stem.with_suffix(".md").write_text(render(rows, [env], command))
    report = {"environment": env, "command": command, "rows": [asdict(row) for row in rows]}
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))


# ==== inside a row's processes ====================================================================================


@dataclass
class Side:
    """One side of a row, ready to time: `step()` runs one training step, `synchronize()` waits for every device."""

    step: Callable[[], None]
    synchronize: Callable[[], None]
    profile: Callable[[Side, int], dict[str, Any]]  # K more steps under the framework's profiler, summarised
    notes: list[str] = field(default_factory=list)
    clock: Any = None  # the harness's step clock (device events between steps), as the benchmark task uses it


def worker(args: argparse.Namespace) -> int:
    """Build the row's sides, time them in turns, write rank 0's result."""
    from trainbench.cell.cpu_ranks import pin_rank
    from trainbench.cell.in_cell import host_load

    # Each rank on its own cores, as the harness's ranks are (cell/ranks.py): both sides run in this process.
    rank_cores = pin_rank(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    load_at_start = host_load()
    cell = compose_cell(harness_overrides(args.worker, args.model, args.count, args))
    build = torch_sides if args.worker == "pytorch" else jax_sides
    rank, harness, bare, agree, env, settings = build(cell, args)
    settings["rank cores"] = rank_cores or "not pinned (one rank)"
    result: dict[str, Any] = {"env": env, "settings": settings}
    if args.bare_only:
        bare_warm(bare, warmup_steps(args))
        batch = int(cell.batch_size) * args.count
        result["bare"] = [batch * args.steps / time_side(bare, args.steps) for _ in range(3)]
        result["steps_per_block"] = args.steps
    else:
        result.update(interleave(harness, bare, agree, cell, args))
        if args.profile_steps:
            result["profile"] = {name: profiled(side, args.profile_steps) for name, side in sides(harness, bare)}
    settings["host load (1 min) at start, end"] = f"{load_at_start}, {host_load()}"
    if rank == 0:
        args.result.write_text(json.dumps(result))
    return 0


def sides(harness: Side, bare: Side) -> list[tuple[str, Side]]:
    return [("hand-written", bare), ("harness", harness)]


def profiled(side: Side, steps: int) -> dict[str, Any]:
    """The side's profile, or why there is none: a profiler that fails does not cost the row its figures."""
    try:
        return side.profile(side, steps)
    except Exception as error:
        return {"error": f"profile failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}


def compose_cell(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=overrides))
    return cell.task.prepared(cell)


def harness_trainer(cell: Any) -> tuple[Any, Any, Any, Callable[[], None]]:
    """(framework, its bound device, data, step) as tasks/benchmark.py gets them: device, model and FLOP count,
    trainer, resident step."""
    from trainbench import frameworks
    from trainbench.store.tracking import NullLog
    from trainbench.tasks.base import model_and_data

    framework = frameworks.load(cell)
    device = framework.bind(cell.device)
    model, data, _ = model_and_data(framework, cell, NullLog())
    step = framework.trainer(model, data, cell).resident_step()
    return framework, device, data, step


def interleave(harness: Side, bare: Side, agree: Callable[[int], int], cell: Any, args: argparse.Namespace) -> dict:
    """Warm both up, size the blocks on the hand-written side, then bare, harness, bare, ... `rounds` harness blocks."""
    from trainbench.measure.timing import warm_up

    warmup = warmup_steps(args)
    warm_up(lambda _: harness.step(), harness.synchronize, warmup)
    seconds_per_step = bare_warm(bare, warmup)
    steps = agree(max(5 if not args.smoke else 2, round(args.block_seconds / seconds_per_step)))
    batch = int(cell.batch_size) * args.count
    time_side(bare, steps), time_side(harness, steps)  # one untimed block each
    bare_rates, harness_rates = [batch * steps / time_side(bare, steps)], []
    for _ in range(args.rounds):
        harness_rates.append(batch * steps / time_side(harness, steps))
        bare_rates.append(batch * steps / time_side(bare, steps))
    ratios = [h / ((bare_rates[i] + bare_rates[i + 1]) / 2) for i, h in enumerate(harness_rates)]
    return {"bare": bare_rates, "harness": harness_rates, "pair_ratios": ratios, "steps_per_block": steps}


def bare_warm(bare: Side, warmup: int) -> float:
    """The hand-written loop's warm-up; returns its seconds per step, from 3 more steps."""
    for _ in range(max(warmup, 1)):
        bare.step()
    return time_side(bare, 3) / 3


def time_side(side: Side, steps: int) -> float:
    """Seconds for `steps` steps between synchronizations of every device (the harness: timing.time_block)."""
    from trainbench.measure.timing import time_block

    return time_block(lambda _: side.step(), steps, side.synchronize, side.clock).seconds


# ---- PyTorch -----------------------------------------------------------------------------------------------------


def torch_sides(cell: Any, args: argparse.Namespace) -> tuple[int, Side, Side, Callable[[int], int], dict, dict]:
    import torch

    from trainbench.frameworks.pytorch.distributed import World

    world = World.from_environment()
    harness = None
    if not args.bare_only:
        framework, bound, _, step = harness_trainer(cell)  # joins the process group (NCCL / gloo) at N > 1
        harness = Side(step, bound.synchronize, torch_profile, clock=bound.step_clock())
        device = framework.device
        numerics = torch_numerics()
    else:
        device = bare_join(world, args.device)
    bare, notes = torch_bare(cell, args, device, world)
    if harness is not None and torch_numerics() != numerics:
        raise RuntimeError(f"the sides set different numerics: harness {numerics}, hand-written {torch_numerics()}")

    def agree(steps: int) -> int:  # every rank runs the same blocks: the longest any rank asked for
        if world.size == 1:
            return steps
        count = torch.tensor([steps], device=device)
        torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MAX)
        return int(count.item())

    env = torch_environment(device)
    settings = {
        "hand-written": notes,
        "harness": " ".join(harness_overrides(args.worker, args.model, args.count, args)),
        "launch": f"torchrun --standalone --nproc-per-node {world.size}" if world.size > 1 else "one process",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
    }
    return world.rank, harness or bare, bare, agree, env, settings


def bare_join(world: Any, device_name: str) -> Any:
    """The hand-written script's own process-group set-up (--bare-only: no harness to join it)."""
    import torch

    if device_name == "gpu":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
        if world.size > 1:
            torch.distributed.init_process_group("nccl")
        return device
    if world.size > 1:
        torch.distributed.init_process_group("gloo")
    return torch.device("cpu")


def torch_numerics() -> tuple[Any, ...]:
    import torch

    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.benchmark,
    )


def torch_bare(cell: Any, args: argparse.Namespace, device: Any, world: Any) -> tuple[Side, list[str]]:
    """The hand-written PyTorch loop of the row's model: DDP at N > 1, the bare model at 1."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    fast = args.variant == "fast"
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = cuda  # bf16 autocast; TF32 for what stays fp32 (no TF32 on a CPU)
    torch.backends.cudnn.allow_tf32 = cuda
    torch.set_float32_matmul_precision("high" if cuda else "highest")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(world.rank)
    batch = int(cell.batch_size)
    notes = []
    if args.model == "resnet50":
        import torchvision

        size = cell.data.image_size
        model = torchvision.models.resnet50(weights=None, num_classes=1000)
        model = model.to(device, memory_format=torch.channels_last)
        images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (batch,), device=device)
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=fast and cuda or None)

        def forward(network: Any) -> Any:
            return network(images)

        notes.append(f"torchvision resnet50 bs{batch}/device {size}px channels_last, SGD lr 0.01 momentum 0.9")
    else:
        import transformers

        spec = cell.model
        config = transformers.BertConfig(
            vocab_size=spec.vocab_size,
            max_position_embeddings=spec.max_position_embeddings,
            hidden_size=spec.hidden_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            intermediate_size=spec.intermediate_size,
            num_labels=2,
        )
        model = transformers.BertForSequenceClassification(config).to(device)
        tokens = torch.randint(1000, spec.vocab_size, (batch, spec.seq_len), device=device)
        labels = torch.randint(0, 2, (batch,), device=device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=fast and cuda or None)

        def forward(network: Any) -> Any:
            return network(input_ids=tokens).logits

        notes.append(f"transformers BertForSequenceClassification bs{batch}/device seq {spec.seq_len}, AdamW lr 1e-4")
    network: Any = model
    if world.size > 1:
        network = DistributedDataParallel(
            model, device_ids=[device.index] if cuda else None, gradient_as_bucket_view=True
        )
        notes.append("DistributedDataParallel(device_ids=[rank], gradient_as_bucket_view=True)")
    graphs = fast and cuda  # CUDA graphs of each compiled piece; under DDP its all-reduces run between them
    if fast:
        mode = "reduce-overhead" if graphs else "default"
        network = torch.compile(network, mode=mode)
        notes.append(f"torch.compile mode={mode}, fused optimizer")
    model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = forward(network)
        F.cross_entropy(logits.float(), labels).backward()
        optimizer.step()

    def synchronize() -> None:  # a barrier at each block's end, as the hand-written loop has
        if cuda:
            torch.cuda.synchronize()
        if world.size > 1:
            torch.distributed.barrier(device_ids=[device.index] if cuda else None)
            if cuda:
                torch.cuda.synchronize()

    notes.append("bf16 autocast, cross-entropy in fp32, zero_grad(set_to_none=True)")
    return Side(step, synchronize, torch_profile), notes


def torch_environment(device: Any) -> dict[str, str]:
    import torch

    env = {"torch": torch.__version__}
    if device.type == "cuda":
        nccl = torch.cuda.nccl.version()
        env.update(
            cuda=torch.version.cuda or "", nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        )
    for module in ("torchvision", "transformers"):
        if module in sys.modules:
            env[module] = sys.modules[module].__version__
    return env


def torch_profile(side: Side, steps: int) -> dict[str, Any]:
    """`steps` steps under torch.profiler on every rank (they run together); each rank's own device timeline
    summarised (rank 0's is reported)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        for _ in range(steps):
            side.step()
        return {"error": "profiles need CUDA: on a CPU the profiler records ops, not device kernels"}
    side.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as recorded:
        start = time.perf_counter()
        for _ in range(steps):
            side.step()
        side.synchronize()
        wall_s = time.perf_counter() - start
    import bare_loops

    return timeline(bare_loops.device_kernels(torch, recorded), steps, wall_s)


# ---- Keras on JAX ------------------------------------------------------------------------------------------------


def jax_sides(cell: Any, args: argparse.Namespace) -> tuple[int, Side, Side, Callable[[int], int], dict, dict]:
    # The harness binds the device first: it sets the Keras backend, XLA's host devices and JAX's memory settings
    # before JAX loads (the hand-written side then shares them).
    framework, bound, data, step = harness_trainer(cell)
    harness = Side(step, bound.synchronize, jax_profile)
    if args.jax_loop == "keras_io":
        bare, notes = jax_bare(cell, framework, data)
    else:
        bare, notes = jax_pure(cell, framework, data, flat=args.jax_loop == "pure_flat")
    import jax
    import keras

    env = {"jax": jax.__version__, "keras": keras.__version__, **framework.backend_versions()}
    settings = {
        "hand-written": notes,
        "harness": " ".join(harness_overrides(args.worker, args.model, args.count, args)),
        "devices": ", ".join(str(d) for d in framework.devices),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "unset"),
    }
    return 0, harness, bare, lambda steps: steps, env, settings


def jax_bare(cell: Any, framework: Any, data: Any) -> tuple[Side, list[str]]:
    """keras.io's data-parallel JAX loop over the same network: replicated variables, the batch split on a mesh."""
    import jax
    import keras
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = framework.devices
    mesh = Mesh(np.array(devices), ("batch",))
    replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("batch"))
    shardings = framework.shardings
    with shardings.undistributed() if shardings is not None else contextlib.nullcontext():
        model = framework.build(cell.model, data).network  # the harness's network, its own fresh variables
    batch = int(cell.batch_size) * len(devices)
    rng = np.random.default_rng(0)
    if data.kind == "text":
        inputs = rng.integers(1000, cell.model.vocab_size, (batch, data.seq_len)).astype(np.int32)
        labels = rng.integers(0, data.num_classes, batch).astype(np.int32)
        optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.0)
        notes = [f"AdamW lr 1e-4, bs{cell.batch_size}/device seq {data.seq_len}"]
    else:
        size = data.image_size
        inputs = rng.standard_normal((batch, size, size, data.channels), dtype=np.float32)
        labels = rng.integers(0, data.num_classes, batch).astype(np.int32)
        optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        notes = [f"SGD lr 0.01 momentum 0.9, bs{cell.batch_size}/device {size}px NHWC"]
    optimizer.build(model.trainable_variables)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = jax.device_put(inputs, split), jax.device_put(labels, split)
    state = jax.device_put(
        (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables],
        ),
        replicated,
    )

    def compute_loss(trainable: Any, non_trainable: Any, x: Any, y: Any) -> Any:
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss(y, logits), non_trainable

    gradients = jax.value_and_grad(compute_loss, has_aux=True)

    def train_step(state: Any, x: Any, y: Any) -> Any:
        trainable, non_trainable, optimizer_variables = state
        (value, non_trainable), grads = gradients(trainable, non_trainable, x, y)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads, trainable)
        return value, (trainable, non_trainable, optimizer_variables)

    jitted = jax.jit(train_step, donate_argnums=0, out_shardings=replicated)
    current = {"state": state}

    def step() -> None:
        _, current["state"] = jitted(current["state"], x, y)

    def synchronize() -> None:
        jax.block_until_ready(current["state"])

    notes += [
        f"keras.io's JAX data-parallel loop: variables replicated, batch split on a {len(devices)}-device mesh",
        "jax.jit(train_step, donate_argnums=0) over stateless_call, value_and_grad, optimizer.stateless_apply",
        f"dtype policy {keras.config.dtype_policy().name}",
    ]
    return Side(step, synchronize, jax_profile), notes


def jax_pure(cell: Any, framework: Any, data: Any, flat: bool) -> tuple[Side, list[str]]:
    """A data-parallel loop written in JAX alone, as DDP works: jax.jit over shard_map on a one-axis device Mesh,
    each device running the network on its slice of a batch already split on the devices (NamedSharding), the
    gradients averaged (lax.pmean), the optimizer step written in jax.numpy, the state buffers donated. The
    network is the one the harness builds, called as a pure function (Keras' stateless_call traces into the same
    XLA program a hand-written network would): what is judged is the step around it."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = framework.devices
    mesh = Mesh(np.array(devices), ("batch",))
    shardings = framework.shardings
    with shardings.undistributed() if shardings is not None else contextlib.nullcontext():
        model = framework.build(cell.model, data).network  # the harness's network, its own fresh variables
    batch = int(cell.batch_size) * len(devices)
    rng = np.random.default_rng(0)
    text = data.kind == "text"
    if text:
        inputs = rng.integers(1000, cell.model.vocab_size, (batch, data.seq_len)).astype(np.int32)
        notes = [f"AdamW lr 1e-4 (Keras' formula, epsilon 1e-7), bs{cell.batch_size}/device seq {data.seq_len}"]
    else:
        size = data.image_size
        inputs = rng.standard_normal((batch, size, size, data.channels), dtype=np.float32)
        notes = [f"SGD lr 0.01 momentum 0.9 (Keras' formula), bs{cell.batch_size}/device {size}px NHWC"]
    labels = rng.integers(0, data.num_classes, batch).astype(np.int32)
    split = NamedSharding(mesh, P("batch"))
    x, y = jax.device_put(inputs, split), jax.device_put(labels, split)
    params = [v.value for v in model.trainable_variables]
    buffers = [v.value for v in model.non_trainable_variables]
    zeros = [jnp.zeros_like(p) for p in params]
    moments = (zeros, [jnp.zeros_like(p) for p in params], jnp.zeros((), jnp.int32)) if text else zeros
    state = jax.device_put((params, buffers, moments), NamedSharding(mesh, P()))

    def sgd(params: Any, grads: Any, velocity: Any) -> Any:
        velocity = [0.9 * v - 0.01 * g for v, g in zip(velocity, grads, strict=True)]
        return [p + v for p, v in zip(params, velocity, strict=True)], velocity

    def adamw(params: Any, grads: Any, moments: Any) -> Any:
        first, second, count = moments
        count = count + 1
        t = count.astype(jnp.float32)
        rate = 1e-4 * jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        first = [0.9 * m + 0.1 * g for m, g in zip(first, grads, strict=True)]
        second = [0.999 * v + 0.001 * g * g for v, g in zip(second, grads, strict=True)]
        params = [p - rate * m / (jnp.sqrt(v) + 1e-7) for p, m, v in zip(params, first, second, strict=True)]
        return params, (first, second, count)

    update = adamw if text else sgd

    def compute_loss(params: Any, buffers: Any, x: Any, y: Any) -> Any:
        logits, buffers = model.stateless_call(params, buffers, x, training=True)
        logits = logits.astype(jnp.float32)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=-1)
        return -jnp.mean(picked), buffers

    gradients = jax.value_and_grad(compute_loss, has_aux=True)

    def flat_pmean(values: list[Any]) -> list[Any]:
        if not values:
            return values
        flat = jax.lax.pmean(jnp.concatenate([v.ravel() for v in values]), "batch")
        parts = jnp.split(flat, np.cumsum([v.size for v in values])[:-1])
        return [part.reshape(v.shape) for part, v in zip(parts, values, strict=True)]

    def pmean(values: list[Any]) -> list[Any]:
        return flat_pmean(values) if flat else jax.lax.pmean(values, "batch")

    def on_each_device(state: Any, x: Any, y: Any) -> Any:
        params, buffers, moments = state
        (_, buffers), grads = gradients(params, buffers, x, y)
        grads = pmean(grads)
        moving = pmean([b for b in buffers if jnp.issubdtype(b.dtype, jnp.inexact)])[::-1]
        buffers = [moving.pop() if jnp.issubdtype(b.dtype, jnp.inexact) else b for b in buffers]
        params, moments = update(params, grads, moments)
        return params, buffers, moments

    every = P()
    sharded = jax.shard_map(
        on_each_device, mesh=mesh, in_specs=(every, P("batch"), P("batch")), out_specs=every, check_vma=False
    )
    jitted = jax.jit(sharded, donate_argnums=0)
    current = {"state": state}

    def step() -> None:
        current["state"] = jitted(current["state"], x, y)

    def synchronize() -> None:
        jax.block_until_ready(current["state"])

    import keras

    notes += [
        f"pure JAX: jax.jit(shard_map(step)) on a {len(devices)}-device mesh, batch split on the devices (NamedSharding),"
        " BatchNorm statistics per device, gradients lax.pmean'd, moving statistics pmean'd, state donated"
        + (" (each all-reduced as one raveled buffer)" if flat else ""),
        f"the harness's network as a pure function (stateless_call), dtype policy {keras.config.dtype_policy().name}",
    ]
    return Side(step, synchronize, jax_profile), notes


def jax_profile(side: Side, steps: int) -> dict[str, Any]:
    """`steps` steps under jax.profiler; the first GPU's kernels (every stream) summarised."""
    import glob
    import gzip

    import jax

    if jax.devices()[0].platform != "gpu":
        for _ in range(steps):
            side.step()
        return {"error": "profiles need a GPU: on a CPU the trace has no device kernels"}
    side.synchronize()
    folder = tempfile.mkdtemp(prefix="trainbench-jax-trace-")
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        start = time.perf_counter()
        for _ in range(steps):
            side.step()
        side.synchronize()
        wall_s = time.perf_counter() - start
    paths = glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)
    if not paths:
        return {"error": "jax.profiler wrote no perfetto trace"}
    with gzip.open(paths[0]) as trace_file:
        events = json.load(trace_file)["traceEvents"]
    return timeline(jax_kernels(events), steps, wall_s)


def jax_kernels(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of the first GPU's kernels: its stream lines, not XLA's op and module annotations."""
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    gpus = sorted(pid for pid, name in processes.items() if "GPU" in name)
    if not gpus:
        return []
    first = next((pid for pid in gpus if "GPU:0" in processes[pid]), gpus[0])
    lines = {tid for (pid, tid), name in threads.items() if pid == first and "Stream" in name}
    if not lines:  # no stream names: every line but XLA's annotations
        lines = {tid for (pid, tid), name in threads.items() if pid == first and "XLA" not in name}
    return [
        (e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and e["pid"] == first and e["tid"] in lines and float(e.get("dur", 0)) > 0
    ]


# ---- the device timeline -----------------------------------------------------------------------------------------


def timeline(kernels: list[tuple[str, float, float]], steps: int, wall_s: float) -> dict[str, Any]:
    """Per step: compute (union of compute kernels), communication (union of collective kernels), the communication
    with no compute beside it, and the device's idle time inside the span; kernel time by kind (bare_loops.py's)."""
    if not kernels:
        return {"error": "the profiler recorded no device kernels"}
    import bare_loops

    communication = [(b, e) for name, b, e in kernels if is_communication(name)]
    compute = [(b, e) for name, b, e in kernels if not is_communication(name)]
    compute_union, communication_union = union(compute), union(communication)
    both = overlap(compute_union, communication_union)
    busy = length(union([(b, e) for _, b, e in kernels]))
    span = max(e for _, _, e in kernels) - min(b for _, b, _ in kernels)

    def per_step(microseconds: float) -> float:
        return round(microseconds / steps / 1e3, 3)

    kinds = bare_loops.summarize_kernels(kernels, steps, wall_s)
    return {
        "steps": steps,
        "wall_ms_per_step": round(wall_s / steps * 1e3, 3),
        "device_span_ms_per_step": per_step(span),
        "compute_ms_per_step": per_step(length(compute_union)),
        "communication_ms_per_step": per_step(length(communication_union)),
        "exposed_communication_ms_per_step": per_step(length(communication_union) - both),
        "idle_ms_per_step": per_step(span - busy),
        "kernels_per_step": round(len(kernels) / steps, 1),
        "kernel_ms_per_step_by_kind": kinds.get("kernel_ms_per_step_by_kind"),
        "top_kernels": kinds.get("top_kernels", [])[:8],
    }


def is_communication(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in COMMUNICATION)


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - begin for begin, end in intervals)


def overlap(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> float:
    """Total length where two sorted, disjoint interval lists overlap."""
    total, i, j = 0.0, 0, 0
    while i < len(first) and j < len(second):
        begin, end = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        total += max(0.0, end - begin)
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return total


if __name__ == "__main__":
    sys.exit(main())
