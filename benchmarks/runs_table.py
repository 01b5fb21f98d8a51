"""Print the cells of an MLflow store as a markdown table (what results/*.md files are made of).

python benchmarks/runs_table.py sqlite:///path/to/mlflow.db [--experiment trainbench]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run as a script, from anywhere
from trainbench.runs import search_all  # noqa: E402

COLUMNS = [
    ("cell", lambda r: r.info.run_name),
    ("device", lambda r: r.data.tags.get("hw.label", "")),
    ("precision", lambda r: r.data.tags.get("trainbench.precision", "")),
    ("outcome", lambda r: r.data.tags.get("trainbench.outcome", "")),
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
            if k in ("sw.torch", "sw.cuda", "sw.keras", "sw.jax", "sw.tensorflow")
        ),
    ),
]


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri")
    parser.add_argument("--experiment", default="trainbench")
    args = parser.parse_args()
    client = MlflowClient(tracking_uri=args.uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        parser.error(f"no experiment {args.experiment!r} in {args.uri}")
    runs = search_all(client, [experiment.experiment_id], "tags.`trainbench.kind` = 'cell'")
    print("| " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for run in sorted(runs, key=lambda r: r.info.start_time):
        print("| " + " | ".join(cell(run) for _, cell in COLUMNS) + " |")


if __name__ == "__main__":
    main()
