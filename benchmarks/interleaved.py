"""Harness vs bare in ONE process: the two timed loops take turns, block by block.

    python benchmarks/interleaved.py                                   # the launch-bound rows, 15 rounds -> results/
    python benchmarks/interleaved.py --workloads mlp_epoch,matmul_bf16 --rounds 30 --out $OUT
    python benchmarks/interleaved.py --smoke --device cpu --rounds 2 --out /tmp/interleaved   # any CPU, a minute

Why: compare.py runs each side in its own process, as people run them. On the shared H100 host a launch-bound
loop moved 8-28% from one process to the next (results/2026-11-23-h100), more than the 2% being judged, so the
eager DistilBERT, BERT-Large and MLP rows stayed "within noise" whatever the repeats. Here one process builds
both sides of a compare.py row (same bare-loop arguments, same harness overrides) and runs bare block, harness
block, bare block, ... each block between two synchronizations. Each harness block is divided by the mean of
the bare blocks beside it, seconds apart, so a host whose speed wanders over minutes moves both alike.

The bare side is bare_loops.py's own step (or epoch, or product). The harness side is the timed code of its
task, called as the task calls it, on a trainer built from the overrides by trainbench's config composition
and validation (frameworks.load, bind, data, model, trainer):
- task=benchmark: `trainer.resident_step()` under `timing.time_block` with the framework's step clock (device
  events between steps), as tasks/benchmark.py;
- task=train: `trainer.begin_epoch`, `timing.time_block` over the epoch's steps, `trainer.end_epoch`, as
  tasks/train.py (one block is one epoch, as the MLP row's figure is epochs);
- task=matmul: `framework.matmul(...).step` under `timing.time_block`, as tasks/matmul.py.

What it leaves out, and compare.py covers: process start and the cell's setup, and whatever a cell's process
does beside its loop (the system-metrics sampler and the heartbeat run in the launching process, not the cell's).
Rows under torch.compile are not offered: two compiled models in one process share Dynamo's caches and CUDA-graph
trees, and those rows already measure within 0.7% of 1 in compare.py. mlp_fast is offered: both sides are
whole-step CUDA graphs recorded without torch.compile (the bare side's `graph` variant, the faster of its two).

Prints the table and writes <out>/<date>-<device>-interleaved.md (date, device, driver, versions, the settings of
each row) and a .json of every block.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bare_loops  # noqa: E402 - the bare side's own builders
import compare  # noqa: E402 - the rows (bare arguments, harness overrides) and the paired-ratio statistics

from trainbench.measure.timing import time_block  # noqa: E402 - compare.py put src/ on the path

DEFAULT_ROWS = ("mlp_epoch", "mlp_fast", "distilbert_tf32", "distilbert_bf16", "bert_large_bf16", "matmul_bf16")
# compare.py's rows timed here: its core rows (ResNet-50 ones too, though they already pass there) and mlp_fast.
OFFERED = tuple(w.name for w in compare.WORKLOADS if w.group == "core" and "fast" not in w.name) + ("mlp_fast",)


@dataclass
class Side:
    """One side of a row: `block()` runs one timed block and returns its rate in the row's unit."""

    block: Callable[[], float]
    steps: int  # per block (for the MLP: an epoch's)
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    workload: compare.Workload
    bare: list[float] = field(default_factory=list)
    harness: list[float] = field(default_factory=list)
    block_s: list[float] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    pooled_ratios: list[float] | None = None  # --merge: the ratios each report paired, pooled

    def pair_ratios(self) -> list[float]:
        """Each harness block over the mean of the bare blocks before and after it."""
        if self.pooled_ratios is not None:
            return self.pooled_ratios
        return [
            h / ((self.bare[i] + self.bare[i + 1]) / 2) for i, h in enumerate(self.harness) if i + 1 < len(self.bare)
        ]


def main() -> int:
    args = parse_args()
    if args.merge:
        return merge_reports(args.merge, args.out)
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("interleaved.py: no CUDA device visible to torch: pass --device cpu", file=sys.stderr)
        return 2
    env = environment(args.device)  # once: nvidia-smi and package metadata, and one date for the whole report
    rows = []
    for workload in select(args.workloads, device):
        compare.check_same_settings(workload, args.smoke)
        row = Row(workload)
        rows.append(row)
        started = time.perf_counter()
        try:
            run_row(row, args, device)
        except Exception as error:  # the other rows still run and the report says what failed
            row.error = bare_loops.one_line(error)
        print(f"{workload.name}: {time.perf_counter() - started:.0f} s", flush=True)
        release(device)
        write_report(rows, args, env)
    print(render(rows, *run_header(args, env)))
    return 1 if any(row.error for row in rows) else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads", default=",".join(DEFAULT_ROWS), help=f"comma-separated, of: {', '.join(OFFERED)}"
    )
    parser.add_argument("--rounds", type=int, default=15, help="harness blocks, each between two bare blocks")
    parser.add_argument("--block-seconds", type=float, default=2.0, help="about how long a block lasts (not the MLP's)")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--smoke", action="store_true", help="compare.py's --smoke sizes: seconds on a CPU")
    parser.add_argument("--out", type=Path, default=compare.ROOT / "results")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="pool the pair ratios of earlier reports into one table; runs nothing",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: an interval needs two pairs")
    return args


def select(names: str, device: torch.device) -> list[compare.Workload]:
    by_name = {w.name: w for w in compare.WORKLOADS}
    chosen = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in OFFERED:
            print(f"interleaved.py: no row {name!r} here: choose from {', '.join(OFFERED)}", file=sys.stderr)
            raise SystemExit(2)
        if name == "mlp_fast" and device.type != "cuda":
            print("mlp_fast: skipped, whole-step CUDA graphs need a CUDA device", flush=True)
            continue
        chosen.append(by_name[name])
    return chosen


# -- building the two sides ----------------------------------------------------------------------------


def numerics_in_force() -> tuple[Any, ...]:
    """The process-wide switches both sides set: they must agree, or the row would compare two settings."""
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.benchmark,
    )


def run_row(row: Row, args: argparse.Namespace, device: torch.device) -> None:
    workload = row.workload
    bare = bare_side(workload, args, device)
    bare_numerics = numerics_in_force()
    harness, cell = harness_side(workload, args, device, bare.steps)
    if device.type == "cuda" and numerics_in_force() != bare_numerics:
        raise RuntimeError(f"the sides set different numerics: bare {bare_numerics}, harness {numerics_in_force()}")
    row.settings = {
        "bare": " ".join(compare.bare_command(workload, args)[2:]),
        "harness": " ".join(compare.harness_overrides(workload, args)),
        "steps_per_block": bare.steps,
        "numerics (tf32 matmul, tf32 cuDNN, fp32 matmul precision, cuDNN benchmark)": list(bare_numerics),
        "bare notes": bare.notes,
        "harness cell": f"{cell.framework.name} task={cell.task.name} precision={cell.precision.name}",
    }
    bare.block(), harness.block()  # one untimed block each: first-epoch allocations, cuDNN's choices
    for round_ in range(args.rounds):
        if round_ == 0:
            row.bare.append(bare.block())
        started = time.perf_counter()
        row.harness.append(harness.block())
        row.block_s.append(time.perf_counter() - started)
        row.bare.append(bare.block())
    ratios = row.pair_ratios()
    print(
        f"{workload.name}: bare {compare.spread(row.bare)}, harness {compare.spread(row.harness)}, "
        f"paired {fmt_estimate(compare.paired_estimate(ratios))}",
        flush=True,
    )


def bare_side(workload: compare.Workload, args: argparse.Namespace, device: torch.device) -> Side:
    options = compare.bare_options(workload, args.smoke)
    if workload.name == "mlp_fast":
        options["--variant"] = "graph"  # the bare fast variant's winner on CUDA, recorded without torch.compile
    argv = [workload.family, *[t for flag, value in options.items() for t in (flag, value) if t is not None]]
    bargs = bare_loops.parse_args([*argv, "--device", device.type])
    synchronize = bare_loops.synchronizer(device)
    torch.manual_seed(0)
    if workload.family == "mlp_epoch":
        numerics, images, labels = bare_loops.mlp_data(bargs, device)
        builder = bare_loops.graph_epochs if bargs.variant == "graph" else bare_loops.eager_epochs
        loop = builder(bare_loops.seed_mlp().to(device), images, labels, bargs, numerics)

        def epoch() -> float:  # as bare_loops.epoch_result times one: the permutation is inside its block
            synchronize()
            start = time.perf_counter()
            loop.run(torch.randperm(bargs.samples, device=device))
            synchronize()
            return bargs.samples / (time.perf_counter() - start)

        return Side(epoch, -(-bargs.samples // bargs.batch_size), list(loop.notes))
    if workload.family == "matmul":
        product = bare_loops.matmul_product(bargs, device)
        flops = 2.0 * bargs.n**3
        return steps_side(product, bargs.warmup, synchronize, args.block_seconds, lambda s, n: flops * n / s / 1e12)
    build = bare_loops.resnet50_step if workload.family == "resnet50" else bare_loops.transformer_step
    step = build(bargs, device)
    side = steps_side(step.run, bargs.warmup, synchronize, args.block_seconds, lambda s, n: bargs.batch_size * n / s)
    side.notes = step.notes
    return side


def steps_side(
    step: Callable[[], None],
    warmup: int,
    synchronize: Callable[[], None],
    block_seconds: float,
    rate: Callable[[float, int], float],
) -> Side:
    """Warm up, then size the block: as many steps as last about `block_seconds` (at least 5)."""
    for _ in range(max(warmup, 1)):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(3):
        step()
    synchronize()
    steps = max(5, round(block_seconds / ((time.perf_counter() - start) / 3)))

    def block() -> float:
        synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize()
        return rate(time.perf_counter() - start, steps)

    return Side(block, steps)


def harness_side(
    workload: compare.Workload, args: argparse.Namespace, device: torch.device, steps: int
) -> tuple[Side, Any]:
    """The harness's trainer for the row's overrides, and its task's timed block."""
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data as datasets
    from trainbench import frameworks
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(compose("config", overrides=compare.harness_overrides(workload, args)))
    cell = cell.task.prepared(cell)
    framework = frameworks.load(cell)
    device = framework.bind(cell.device)
    sync = device.synchronize
    task = cell.task.name
    if task == "matmul":
        (n,) = cell.task.sizes
        multiply = framework.matmul(n, cell.task.shape).step

        def product(_: int) -> None:
            multiply()

        time_block(product, cell.task.warmup_steps, sync)
        return Side(lambda: 2.0 * n**3 * steps / time_block(product, steps, sync).seconds / 1e12, steps), cell
    data = datasets.load(cell.data, cell.seed)
    model = framework.build(cell.model, data).network
    trainer = framework.trainer(model, data, cell)
    if task == "train":
        epochs = itertools.count(1)

        def epoch() -> float:
            trainer.begin_epoch(next(epochs))
            block = time_block(trainer.step, trainer.steps_per_epoch, sync)
            trainer.end_epoch()
            return trainer.samples_per_epoch / block.seconds

        return Side(epoch, trainer.steps_per_epoch), cell
    step = trainer.resident_step()
    batch = int(cell.batch_size)

    def indexed(_: int) -> None:
        step()

    clock = device.step_clock()
    time_block(indexed, cell.task.warmup_steps, sync)
    return Side(lambda: batch * steps / time_block(indexed, steps, sync, clock).seconds, steps), cell


def release(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- the report ------------------------------------------------------------------------------------------


def fmt_estimate(estimate: tuple[float, float, float] | None) -> str:
    return "n/a" if estimate is None else f"{estimate[0]:.3f} ({estimate[1]:.3f}-{estimate[2]:.3f})"


def environment(device: str) -> dict[str, str]:
    env = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": compare.cpu_model(),
    }
    if device == "gpu":
        gpu = compare.gpu_identity()
        env.update(device=gpu["name"], driver=gpu.get("driver", "?"), cuda=torch.version.cuda or "")
    else:
        env["device"] = compare.cpu_model()
    for package in ("transformers", "torchvision", "trainbench"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            env[package] = metadata.version(package)
    return env


METHOD = (
    "bare, harness, bare, ... each block between two synchronizations; each harness block over the mean of the bare "
    "blocks beside it; geometric mean of those ratios with its 95% t-interval"
)


def run_header(args: argparse.Namespace, env: dict[str, str]) -> tuple[str, list[str]]:
    return f"Harness vs bare, interleaved in one process: {env['device']}, {env['date']}", [
        ", ".join(f"{key} {value}" for key, value in env.items() if key not in ("date", "device")),
        f"{args.rounds} rounds: {METHOD}" + (" (--smoke sizes)" if args.smoke else ""),
        "`python " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) + "`",
    ]


def render(rows: list[Row], title: str, header: list[str]) -> str:
    lines = [
        f"# {title}",
        "",
        *[f"- {line}" for line in header],
        "",
        "| workload | unit | steps a block | bare median (min-max) | harness median (min-max) | paired, geomean (95% CI)"
        " | >= 0.98 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name, unit = row.workload.name, row.workload.unit
        if row.error:
            lines.append(f"| {name} | {unit} | | failed: {row.error} | | | |")
            continue
        estimate = compare.paired_estimate(row.pair_ratios())
        lines.append(
            f"| {name} | {unit} | {row.settings['steps_per_block']} | {compare.spread(row.bare)} | "
            f"{compare.spread(row.harness)} | {fmt_estimate(estimate)} | {compare.verdict(estimate, None)} |"
        )
    lines += ["", "Settings of each row:", ""]
    for row in rows:
        if row.settings:
            lines.append(f"- {row.workload.name}: " + "; ".join(f"{k}: {v}" for k, v in row.settings.items()))
    return "\n".join(lines) + "\n"


def write_report(rows: list[Row], args: argparse.Namespace, env: dict[str, str]) -> None:
    """Rewritten after each row, so an interrupted call keeps what it measured."""
    stem = f"{env['date'][:10]}-{compare.slug(env['device'])}-interleaved"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(render(rows, *run_header(args, env)))
    samples = [
        {
            "workload": row.workload.name,
            "unit": row.workload.unit,
            "bare": row.bare,
            "harness": row.harness,
            "pair_ratios": row.pair_ratios(),
            "harness_block_s": row.block_s,
            "settings": row.settings,
            "error": row.error,
        }
        for row in rows
    ]
    (args.out / f"{stem}.json").write_text(json.dumps({"environment": env, "rows": samples}, indent=1))


def merge_reports(paths: list[str], out: Path) -> int:
    """One table from several runs' .json: each row's pair ratios pooled (each was paired within its own run)."""
    by_name = {w.name: w for w in compare.WORKLOADS}
    rows: dict[str, Row] = {}
    sources = []
    for path in paths:
        report = json.loads(Path(path).read_text())
        env = report["environment"]
        sources.append(f"`{path}`: {env['date']}, {env['device']}, torch {env['torch']}")
        for sample in report["rows"]:
            if sample["error"]:
                continue
            row = rows.setdefault(sample["workload"], Row(by_name[sample["workload"]], pooled_ratios=[]))
            row.bare += sample["bare"]
            row.harness += sample["harness"]
            row.pooled_ratios = [*(row.pooled_ratios or []), *sample["pair_ratios"]]
            steps = row.settings.get("steps_per_block")
            block = str(sample["settings"]["steps_per_block"])
            row.settings["steps_per_block"] = block if steps in (None, block) else f"{steps}, {block}"
            row.settings["harness"] = sample["settings"]["harness"]
    title = f"Harness vs bare, interleaved in one process: {len(paths)} reports pooled"
    header = [f"{METHOD}; the pair ratios of every report pooled", *[f"from {source}" for source in sources]]
    text = render(list(rows.values()), title, header)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pooled-interleaved.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
