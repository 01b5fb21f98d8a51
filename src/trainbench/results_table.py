"""The runs of a store as a table in the terminal (markdown, what results/*.md files are made of).

trainbench results                                     # this machine's store, experiment trainbench
trainbench results --uri sqlite:///path/to/mlflow.db --experiment trainbench --sweep RUN_ID
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainbench import tracking
from trainbench.runs import search_all

COLUMNS = [
    ("cell", lambda r: r.info.run_name),
    ("outcome", lambda r: r.data.tags.get("trainbench.outcome", "")),
    ("device", lambda r: r.data.tags.get("hw.label", "")),
    ("precision", lambda r: r.data.tags.get("trainbench.precision", "")),
    ("samples/s", lambda r: _number(r.data.metrics.get("samples_per_s"))),
    ("step ms p50", lambda r: _number(r.data.metrics.get("step_time_ms_p50"), 2)),
    ("cv %", lambda r: _number(r.data.metrics.get("step_time_cv_pct"), 2)),
    ("peak GPU MB", lambda r: _number(r.data.metrics.get("peak_device_memory_mb"))),
    ("MFU", lambda r: _number(r.data.metrics.get("mfu"), 3)),
    ("avg W", lambda r: _number(r.data.metrics.get("avg_power_w"))),
    ("samples/J", lambda r: _number(r.data.metrics.get("samples_per_j"), 2)),
    ("energy", lambda r: r.data.tags.get("energy.source", "")),
    ("peak TFLOPS", lambda r: _number(r.data.metrics.get("peak_tflops"))),
    (
        "versions",
        lambda r: " ".join(
            f"{k[3:]} {v}"
            for k, v in sorted(r.data.tags.items())
            if k in ("sw.torch", "sw.cuda", "sw.keras", "sw.jax", "sw.tensorflow", "sw.mlx")
        ),
    ),
]


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainbench results", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--uri", default=None, help="tracking store (default: $MLFLOW_TRACKING_URI, else this project's)"
    )
    parser.add_argument("--experiment", default="trainbench")
    parser.add_argument("--sweep", default=None, help="only the cells of this sweep run")
    args = parser.parse_args(argv)
    uri = tracking.resolve_tracking_uri(args.uri)
    try:
        client = tracking.open_store(uri)
    except tracking.TrackingUnavailable as error:
        parser.exit(2, f"trainbench: {error}\n")
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        parser.exit(2, f"trainbench: no experiment {args.experiment!r} in {tracking.private(uri)}: run a cell first\n")
    query = "tags.`trainbench.kind` = 'cell'"
    if args.sweep:
        query += f" and tags.`mlflow.parentRunId` = '{args.sweep}'"
    runs = search_all(client, [experiment.experiment_id], query)
    print("| " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for run in sorted(runs, key=lambda r: r.info.start_time):
        print("| " + " | ".join(cell(run) for _, cell in COLUMNS) + " |")
    return 0
