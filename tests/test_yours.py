""" "Yours" is this sweep's figure, and every screen quotes it alike: two real sweeps of one tiny setting into one
store, then `trainbench results` and `python src/report.py` as a user runs them.

After the second sweep its first screen shows the second run's samples/s (with the repeats that made it), the
first run apart as history; the summary table, the first screen, `trainbench results` and the report's opening
section give the same text for that run; and the report, like the first screen, reads results/contributed/.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, child_env, invoke, runs_in

pytestmark = pytest.mark.slow  # two tiny sweeps (~10 s of CPU each), the results table and a report

SETTING = [
    "model=mlp",
    "device=cpu",
    "data.num_samples=64",
    "data.num_val_samples=16",
    "batch_size=16",
    "task.epochs=3",
    "tracking.system_metrics_interval_s=0",
]


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("yours")
    outs = []
    for _ in range(2):
        done = invoke(folder, *SETTING, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        outs.append(done.stdout)
    first, second = sorted(
        (r for r in runs_in(done.uri) if r.data.tags.get("trainbench.kind") == "cell"), key=lambda r: r.info.start_time
    )
    return {"folder": folder, "uri": done.uri, "outs": outs, "first": first, "second": second}


def figure_of(run) -> str:
    """The run's samples/s as the screens quote it: its value and the steady epochs that made it."""
    from trainbench import figures

    metrics, tags = run.data.metrics, run.data.tags
    value = metrics["samples_per_s"]
    text = f"{value:,.0f}" if value >= 1000 else f"{value:.1f}" if value >= 100 else f"{value:.2f}"
    assert figures.quoted(value, figures.ci95(metrics, "samples_per_s"), 2, figures.noisy(tags)).startswith(text)
    # 3 epochs, the first left out: two repeats, and their interval where the run recorded one
    return figures.quoted(value, figures.ci95(metrics, "samples_per_s"), 2, figures.noisy(tags))


def test_the_second_sweeps_first_screen_shows_its_own_figure_and_the_first_as_history(two_sweeps) -> None:
    out = two_sweeps["outs"][1]
    (line,) = [line for line in out.splitlines() if line.startswith("  mlp (train):")]
    assert f": {figure_of(two_sweeps['second'])} samples/s here" in line, (line, two_sweeps["second"].data.metrics)
    (history,) = [line for line in out.splitlines() if "earlier here (history" in line]
    earlier = two_sweeps["first"].data.metrics["samples_per_s"]
    assert f"median {figure_of(two_sweeps['first']).split()[0]} " in history and "of 1 run(s)" in history, (
        history,
        earlier,
    )


def test_one_run_reads_the_same_in_the_summary_the_first_screen_results_and_the_report(two_sweeps, tmp_path) -> None:
    second, folder = two_sweeps["second"], two_sweeps["folder"]
    figure = figure_of(second)
    summary = [line for line in two_sweeps["outs"][1].splitlines() if line.startswith(second.info.run_name)]
    assert len(summary) == 1 and f"finished  {figure}" in summary[0], summary
    env = child_env({"MLFLOW_TRACKING_URI": two_sweeps["uri"], "PYTHONPATH": str(ROOT / "src")})
    results = subprocess.run(
        [sys.executable, "-m", "trainbench.cli", "results"], cwd=folder, env=env, capture_output=True, text=True
    )
    assert results.returncode == 0, results.stderr
    (row,) = [
        line
        for line in results.stdout.splitlines()
        if second.info.run_name in line and second.data.tags["hw.label"] in line and figure in line
    ]
    assert "contributed" in results.stdout or "NVIDIA H100" in results.stdout  # results/contributed/ by default
    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, str(ROOT / "src" / "report.py"), "--out", str(out), "--no-log"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    (setting,) = [s for s in json.loads((out / "report.json").read_text())["standing"] if "64 samples" in s["setting"]]
    (yours,) = [b for b in setting["bars"] if b["kind"] == "yours"]
    assert yours["figure"] == figure and [h["runs"] for h in setting["history"]] == [1], setting
    contributed = {
        run["tags"].get("hw.label")
        for path in (ROOT / "results" / "contributed").glob("*.json")
        for run in json.loads(path.read_text())["runs"]
    }
    nearest = [(n["hw_label"], n["kind"]) for n in setting["nearest"]]
    assert nearest and all(kind == "contributed" and label in contributed for label, kind in nearest), nearest


def test_the_reports_table_keeps_yours_this_machines_earlier_runs_and_colleagues_apart(two_sweeps, tmp_path) -> None:
    """The report's table as its opening section: this machine's latest run is the figure in its column, its
    earlier run a column of its own ("[earlier here]"), never a median of both; a contributed machine a column of
    its own ("[contributed]") even where it has this machine's label (2026-11-29: the table showed "median of 3
    runs" where the section said 1 repeat, and a contributed run of this label filled yours)."""
    env = child_env({"MLFLOW_TRACKING_URI": two_sweeps["uri"], "PYTHONPATH": str(ROOT / "src")})
    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, str(ROOT / "src" / "report.py"), "--out", str(out), "--no-log"],
        cwd=two_sweeps["folder"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    document = json.loads((out / "report.json").read_text())
    (table,) = [t for t in document["tables"] if t["model"] == "mlp" and t["metric"] == "samples_per_s"]
    labels = [c["label"] for c in table["columns"]]
    assert len(labels) == len(set(labels)), labels
    (row,) = [r for r in table["rows"] if r["setting"].get("data.num_samples") == "64"]
    second, first = two_sweeps["second"], two_sweeps["first"]
    (mine,) = [c["label"] for c in table["columns"] if c["mine"]]
    (earlier,) = [c["label"] for c in table["columns"] if c["history"]]
    assert earlier == f"{mine} [earlier here]"
    for label, run in ((mine, second), (earlier, first)):
        cell = row["cells"][label]
        assert cell["runs"] == [run.info.run_id] and cell["value"] == run.data.metrics["samples_per_s"], cell
    assert any(label.endswith("[contributed]") for label in labels), labels
