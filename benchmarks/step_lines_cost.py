"""What the lines within a long epoch cost the epoch's timed block (progress.EpochsBar.steps_with_lines).

Two measurements, each as one JSON line, then a summary line:
- `noop`: a block of do-nothing steps, bare and wrapped, interleaved rounds, the fastest of each: the host work the
  wrapper adds to every step, in nanoseconds (a counter compared, the clock read about every 0.25-1 s of steps).
- `mlp_epoch`: the default cell's model and batch (model=mlp, batch 64; 2048 synthetic samples an epoch, PyTorch) on this machine's CPU,
  bare and wrapped, interleaved: the cost as a share of a real epoch (within the noise of a shared machine).
The share for another machine's steps is the `noop` nanoseconds over its step time.

    python benchmarks/step_lines_cost.py                 # about a minute on 2 cores
    python benchmarks/step_lines_cost.py --rounds 3 --noop-steps 200000
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainbench import progress  # noqa: E402
from trainbench.measure.timing import time_block  # noqa: E402


def wrapped(step, steps: int):  # noqa: ANN001, ANN201
    """The step as the epoch runs it, lines off (a line every hour: the wrapper's checks, no print)."""
    with progress.EpochsBar(1, "train") as bar:
        return bar.steps_with_lines(step, steps, "epoch 1/1", every_s=3600.0)


def noop(steps: int, rounds: int) -> dict[str, float]:
    """Wall clock and this process's CPU time (which other processes on a shared machine do not inflate)."""

    def step(_: int) -> None:
        pass

    wall: dict[str, list[float]] = {"bare": [], "wrapped": [], "blocks": []}
    cpu: dict[str, list[float]] = {"bare": [], "wrapped": [], "blocks": []}
    makers = {
        "bare": lambda: step,
        "wrapped": lambda: wrapped(step, steps),
        # task=benchmark's and task=inference's wrapper (progress.steps_with_lines), lines off
        "blocks": lambda: progress.steps_with_lines(step, "benchmark", every_s=3600.0),
    }
    for round_ in range(rounds):
        for kind in list(makers)[round_ % 3 :] + list(makers)[: round_ % 3]:
            block_step = makers[kind]()
            cpu_start = time.process_time()
            wall[kind].append(time_block(block_step, steps, lambda: None).seconds)
            cpu[kind].append(time.process_time() - cpu_start)
    per_step = {
        f"{clock}_{kind}_ns_per_step": min(times[kind]) / steps * 1e9
        for clock, times in (("wall", wall), ("cpu", cpu))
        for kind in times
    }
    per_step["added_cpu_ns_per_step"] = per_step["cpu_wrapped_ns_per_step"] - per_step["cpu_bare_ns_per_step"]
    per_step["added_wall_ns_per_step"] = per_step["wall_wrapped_ns_per_step"] - per_step["wall_bare_ns_per_step"]
    per_step["blocks_added_cpu_ns_per_step"] = per_step["cpu_blocks_ns_per_step"] - per_step["cpu_bare_ns_per_step"]
    return per_step


def mlp_epoch(rounds: int) -> dict[str, float]:
    from hydra import compose, initialize_config_dir

    import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
    from trainbench import data as datasets
    from trainbench import frameworks
    from trainbench.config import CONF_DIR, validate

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cell = validate(
            compose("config", overrides=["device=cpu", "model=mlp", "data.num_samples=2048", "data.num_val_samples=0"])
        )
    framework = frameworks.load(cell)
    device = framework.bind(cell.device)
    dataset = datasets.load(cell.data, cell.seed)
    trainer = framework.trainer(framework.build(cell.model, dataset).network, dataset, cell)
    steps = trainer.steps_per_epoch
    bare, lined = [], []
    epoch = 0
    for _ in range(rounds):
        for times, step in ((bare, trainer.step), (lined, None)):
            epoch += 1
            trainer.begin_epoch(epoch)
            block = time_block(step or wrapped(trainer.step, steps), steps, device.synchronize)
            trainer.end_epoch()
            times.append(block.seconds)
    return {
        "steps_per_epoch": steps,
        "bare_epoch_s_median": statistics.median(bare[1:]),  # the first epoch allocates
        "wrapped_epoch_s_median": statistics.median(lined[1:]),
        "step_ms_median": statistics.median(bare[1:]) / steps * 1e3,
        "difference_pct": (statistics.median(lined[1:]) / statistics.median(bare[1:]) - 1) * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noop-steps", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--mlp-rounds", type=int, default=4)
    args = parser.parse_args()
    args.mlp_rounds = max(2, args.mlp_rounds)  # the first epoch allocates: medians of the others
    machine = {"python": platform.python_version(), "machine": platform.machine(), "system": platform.platform()}
    cost = noop(args.noop_steps, args.rounds)
    print(json.dumps({"measurement": "noop", "steps": args.noop_steps, "rounds": args.rounds, **cost, **machine}))
    epoch = mlp_epoch(args.mlp_rounds)
    import torch

    print(json.dumps({"measurement": "mlp_epoch", "rounds": args.mlp_rounds, **epoch, "torch": torch.__version__}))
    added = max(cost["added_cpu_ns_per_step"], cost["added_wall_ns_per_step"])
    share = added / (epoch["step_ms_median"] * 1e6) * 100
    print(
        f"lines within an epoch add {added:.0f} ns a step (the larger of CPU time and wall clock): {share:.5f}% of this CPU's "
        f"{epoch['step_ms_median']:.2f} ms MLP step (measured difference of whole epochs: "
        f"{epoch['difference_pct']:+.2f}%, noise included)"
    )


if __name__ == "__main__":
    main()
