"""What the first screen sets next to the user's figure, read from real stores (sqlite in tmp_path).

Runs are logged into the store with the params and tags a real cell of the given overrides records (as
tests/test_report.py's make_entry composes them), then read back through trainbench.report.standing.after_sweep,
the function a sweep's end calls: a noisy figure is marked, a speed-up is quoted only where the two 95%
intervals separate, settings no other machine ran list the nearest ones that one did, and the published
depth study reaches the first screen in the same total_time_s row as in `python src/report.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import mlflow
import pytest

from conftest import ROOT, with_schema
from trainbench.config import params
from trainbench.config.compose import cells_for
from trainbench.measure import hardware
from trainbench.report import standing

XEON = {"hw.cpu": "Intel(R) Xeon(R) Processor", "hw.cpu_cores": "2", "trainbench.backend": "cpu"}
M1_MAX = {"hw.chip": "Apple M1 Max", "hw.gpu_cores": "32", "trainbench.backend": "metal"}
TINY = ["model=mlp", "device=cpu", "data.num_samples=64", "data.num_val_samples=16", "task.epochs=3"]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str, str]:
    monkeypatch.chdir(tmp_path)  # the page goes to outputs/compare/ under the working folder
    uri = with_schema(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.MlflowClient(uri)
    return client, uri, client.create_experiment("trainbench")


def log_cell(
    store: tuple[Any, str, str], overrides: list[str], machine: dict[str, str], metrics: dict[str, float], **tags: str
) -> str:
    """A finished cell as a real one of `overrides` records it, on `machine`, with `metrics`."""
    client, _, experiment_id = store
    (cell,) = cells_for(overrides)
    cell = cell.task.prepared(cell)
    all_tags = {
        **{key: str(value) for key, value in cell.task.tags(cell).items()},
        "trainbench.kind": "cell",
        "trainbench.outcome": "finished",
        "trainbench.framework": "pytorch",
        "trainbench.framework_version": "2.14.1",
        **machine,
        **tags,
    }
    run = client.create_run(experiment_id, tags=all_tags)
    client.log_batch(
        run.info.run_id,
        metrics=[mlflow.entities.Metric(k, v, 0, 0) for k, v in metrics.items()],
        params=[mlflow.entities.Param(k, str(v)) for k, v in params(cell).items()],
    )
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def first_screen(store: tuple[Any, str, str], mine: set[str]) -> tuple[list[standing.Standing], list[str]]:
    client, uri, experiment_id = store
    found, _ = standing.after_sweep(client, uri, experiment_id, mine, "test-sweep")
    return found, standing.terminal_lines(found)


def test_a_noisy_figure_is_marked_and_overlapping_intervals_quote_no_speedup(store) -> None:
    mine = log_cell(
        store,
        TINY,
        XEON,
        {"samples_per_s": 500.0, "samples_per_s_ci95": 120.0},
        **{"trainbench.noisy": "true", "trainbench.noisy_reason": "epoch times cv 31.0% > 10%"},
    )
    log_cell(store, TINY, M1_MAX, {"samples_per_s": 560.0, "samples_per_s_ci95": 30.0})
    (found,), lines = first_screen(store, {mine})
    assert lines[0].count("NOISY") == 1 and "500.0 ± 120.0 (95%, 2 repeats) NOISY samples/s here" in lines[0], lines
    assert "within noise of yours" in lines[0] and not re.search(r"\d\.\d\dx", lines[0]), lines
    page = next(Path("outputs/compare").glob("*.html")).read_text()
    assert "NOISY" in page and "within noise of yours" in page
    from trainbench.report import cli as report

    _, uri, _ = store
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        assert (
            report.main(["--out", "report", "--no-log", "--no-contributed", "--yours", found.yours.column.hw_label])
            == 0
        )
    (row,) = [
        line for line in Path("report/report.md").read_text().splitlines() if line.startswith("| ") and "560" in line
    ]
    assert "500.0 NOISY" in row and "560.0 (within noise)" in row and not re.search(r"\d×\)", row), row


def test_separate_intervals_quote_the_speedup(store) -> None:
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
    log_cell(store, TINY, M1_MAX, {"samples_per_s": 1000.0, "samples_per_s_ci95": 20.0})
    _, lines = first_screen(store, {mine})
    assert "2.00x (faster than yours)" in lines[0] and "NOISY" not in lines[0], lines


def test_another_machines_run_in_another_framework_says_which_ran_it_and_against_what(store) -> None:
    """The framework is not part of a setting: an M1 Max's compiled JAX run of your PyTorch setting is set against
    it, and the line names both, as it names a nearest setting's framework and as `trainbench results` does."""
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
    jax = {"trainbench.framework": "jax", "trainbench.framework_version": "0.10.2", "trainbench.compile": "true"}
    log_cell(store, [*TINY, "framework=jax"], M1_MAX, {"samples_per_s": 1000.0, "samples_per_s_ci95": 20.0}, **jax)
    log_cell(store, [*TINY, "framework=jax", "batch_size=16"], M1_MAX, {"samples_per_s": 900.0}, **jax)
    _, lines = first_screen(store, {mine})
    assert "fastest Apple M1 Max GPU (32 cores) (this store, jax 0.10, compiled) 1,000" in lines[0], lines
    assert lines[0].endswith("2.00x (faster than your pytorch)"), lines
    mine = log_cell(store, [*TINY, "batch_size=8"], XEON, {"samples_per_s": 400.0})
    _, lines = first_screen(store, {mine})
    (near,) = [line for line in lines if "batch_size 8 vs 16" in line]
    assert "Apple M1 Max GPU (32 cores) (this store, jax 0.10, compiled) 900.0" in near, lines
    import trainbench  # `trainbench results` names it alike

    frameworks = {
        row.values["machine"]: row.values["framework"] for row in trainbench.results(store[1], contributed=False).rows
    }
    assert frameworks == {
        "Apple M1 Max GPU (32 cores)": "jax 0.10, compiled",
        "Intel Xeon CPU (2 cores)": "pytorch 2.14",
    }


def test_a_contributed_run_of_a_machine_labelled_as_this_one_is_another_machine_not_history(store) -> None:
    """results/contributed/ runs, as a sweep imports them into the store's shared experiment, come from other
    machines even where one carries this machine's label: they stand as contributed, never as yours or history."""
    from trainbench.store.shared_runs import SHARED_EXPERIMENT

    client, uri, _ = store
    shared = (client, uri, client.create_experiment(SHARED_EXPERIMENT))
    log_cell(shared, TINY, XEON, {"samples_per_s": 1000.0, "samples_per_s_ci95": 10.0})
    log_cell(store, TINY, XEON, {"samples_per_s": 400.0, "samples_per_s_ci95": 10.0})  # an earlier run here
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
    (found,), lines = first_screen(store, {mine})
    assert found.yours is not None and found.yours.value == 500.0, lines
    assert "1 other machine(s), fastest Intel Xeon CPU (2 cores) (contributed, pytorch 2.14) 1,000" in lines[0], lines
    assert lines[0].endswith("2.00x (faster than yours)"), lines
    (history,) = [line for line in lines if "earlier here" in line]
    assert "median 400.0 samples/s of 1 run(s)" in history, lines


def test_the_suite_summary_keeps_a_contributed_machine_of_this_label_and_leaves_out_this_machines_history(store):
    """The suite's summary, as the first screen: a contributed run of this machine's label is a machine of its own;
    this machine's earlier run is left out."""
    from trainbench.report import suite_summary
    from trainbench.report.selection import Selection, select
    from trainbench.store import sources
    from trainbench.store.shared_runs import SHARED_EXPERIMENT

    client, uri, _ = store
    shared = (client, uri, client.create_experiment(SHARED_EXPERIMENT))
    log_cell(shared, TINY, XEON, {"samples_per_s": 1000.0, "samples_per_s_ci95": 10.0})
    jax = {"trainbench.framework": "jax", "trainbench.framework_version": "0.10.2"}
    log_cell(shared, TINY, XEON, {"samples_per_s": 800.0, "samples_per_s_ci95": 10.0}, **jax)
    log_cell(store, TINY, XEON, {"samples_per_s": 400.0, "samples_per_s_ci95": 10.0})  # an earlier run here
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
    opened = [sources.StoreSource(uri, uri, client=client), sources.shared_source(client, uri)]
    entries, _ = select(opened, Selection("trainbench"), mine_runs={mine}, histories=False)
    found = suite_summary.summarise(entries, {mine})
    (workload,) = found.workloads
    # marked as a colleague's, never shown under this machine's bare name
    assert workload.values == {
        "this machine": 500.0,
        "Intel Xeon CPU (2 cores) (contributed)": 1000.0,
        "Intel Xeon CPU (2 cores) (jax) (contributed)": 800.0,
    }
    lines = suite_summary.terminal_lines(found)
    assert "    Intel Xeon CPU (2 cores) (contributed): 1,000 ± 10.00 (95%, 2 repeats)  2x this machine" in lines, lines
    per_machine = [line.split(": geometric mean")[0] for line in lines if ": geometric mean over" in line]
    assert sorted(per_machine) == [
        "  Intel Xeon CPU (2 cores) (contributed)",
        "  Intel Xeon CPU (2 cores) (jax) (contributed)",
        "  Intel Xeon CPU (2 cores) (this machine)",
    ]


def test_where_no_other_machine_ran_the_setting_the_nearest_are_listed_apart(store) -> None:
    mine = log_cell(store, [*TINY, "batch_size=16"], XEON, {"samples_per_s": 500.0})
    log_cell(store, [*TINY, "batch_size=64"], M1_MAX, {"samples_per_s": 2000.0})
    log_cell(store, [*TINY, "batch_size=64", "precision=mixed_bf16"], M1_MAX, {"samples_per_s": 3000.0})
    log_cell(store, ["model=mlp_deep", "device=cpu"], M1_MAX, {"samples_per_s": 9.0})  # another model: not close
    (found,), lines = first_screen(store, {mine})
    assert not found.others and found.bars == [found.yours]  # never in the chart or a ratio
    assert "no other machine has this setting yet" in lines[0], lines
    assert lines[1].strip() == "close, not equal (other settings, no ratio):", lines
    assert re.search(
        r"Apple M1 Max .*\(this store, pytorch 2\.14\) 2,000 .*samples/s: batch_size 16 vs 64$", lines[2]
    ), lines
    assert re.search(r"3,000 .*: batch_size 16 vs 64, precision fp32 vs mixed_bf16$", lines[3]), lines
    assert "x (" not in "".join(lines[1:]) and "mlp_deep" not in "".join(lines)
    page = next(Path("outputs/compare").glob("*.html")).read_text()
    assert "Close, not equal" in page and "batch_size 16 vs 64" in page


def test_the_published_depth_study_reaches_the_first_screen_as_it_reaches_the_report(store, tmp_path) -> None:
    """The real references CSV, imported as `python src/references.py` does, and a depth-5 cell of the study
    on this CPU: the first screen compares it in total_time_s with the published machines, as the report."""
    from trainbench.references import cli as references
    from trainbench.report import cli as report

    _, uri, _ = store
    csv = (ROOT / "references" / "published-results.csv").read_text().splitlines(keepends=True)
    study = tmp_path / "depth-study.csv"  # the study's own rows of the real file: its import alone takes seconds
    study.write_text(csv[0] + "".join(line for line in csv[1:] if line.startswith("m1-tensorflow-benchmark,")))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        assert references.main([str(study)]) == 0
        mine = log_cell(
            store,
            ["+experiment=mlp_depth_study", "device=cpu", "model.depth=5"],
            {**hardware.host_tags(), "trainbench.backend": "cpu"},  # the report stands this host's runs
            {"samples_per_s": 5000.0, "total_time_s": 30.0, "device_init_time_s": 0.1},
            **{"trainbench.framework": "tensorflow", "trainbench.framework_version": "2.20.0"},
        )
        (found,), lines = first_screen(store, {mine})
        assert found.metric.name == "total_time_s", lines
        published = {b.column.hw_label: b.value for b in found.others if b.kind == "published"}
        assert {66.79, 50.57, 42.07, 23.02} <= set(published.values()), published
        assert re.search(
            r"30\.00 \(1 repeat\) s here; \d+ other machine\(s\), fastest .+ \(published, [^)]+\) 23\.02", lines[0]
        )
        assert report.main(["--out", str(tmp_path / "report"), "--no-log", "--model", "mlp_deep"]) == 0
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    (depth,) = [s for s in data["standing"] if "mlp_deep" in s["setting"]]
    assert depth["metric"] == "total_time_s" and 23.02 in [b["value"] for b in depth["bars"]], depth


def test_a_machine_named_with_escapes_and_markup_is_text_on_the_compare_page(store) -> None:
    """An imported run's machine name reaches the comparison page spelled out: no raw ESC or BEL byte (a `cat` of
    the page would clear the screen and retitle the window), no live markup. (The sweep prints the terminal lines
    through trainbench.untrusted.shown.)"""
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
    hostile = {**M1_MAX, "hw.chip": "Evil\x1b]0;owned\x07\x1b[2J<img src=y onerror=alert(1)>"}
    log_cell(store, TINY, hostile, {"samples_per_s": 1000.0, "samples_per_s_ci95": 20.0})
    first_screen(store, {mine})
    page = next(Path("outputs/compare").glob("*.html")).read_text()
    assert "Evil" in page and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", page)
    assert "<img" not in page and "&lt;img src=y onerror=alert(1)&gt;" in page


ONE_EPOCH = [*TINY, "task.epochs=1"]  # one timed epoch: a figure with no interval, as a GEMM's peak or one pass


def test_figures_without_an_interval_claim_no_small_speedup_on_any_screen(store) -> None:
    """606 against 622, one measurement each: no "1.03x faster" on the first screen, its page, the report or
    trainbench.compare; a difference beyond the documented +-20% each is still quoted, saying what it rests on."""
    import trainbench

    mine = log_cell(store, ONE_EPOCH, XEON, {"samples_per_s": 606.0})
    log_cell(store, ONE_EPOCH, M1_MAX, {"samples_per_s": 622.0})
    _, lines = first_screen(store, {mine})
    assert lines[0].endswith("622.0 (1 repeat), too close to call against yours (no interval recorded)")
    assert not re.search(r"\d\.\d\dx", lines[0]), lines
    page = next(Path("outputs/compare").glob("*.html")).read_text()
    assert "too close to call against yours" in page and "1.03x" not in page
    (row,) = trainbench.compare(mine, tracking_uri=store[1])
    (other,) = row.others
    assert (other.speedup, other.within_noise, other.no_interval) == (None, True, True)

    from trainbench.report import cli as report

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", store[1])
        assert report.main(["--out", "report", "--no-log", "--no-contributed", "--yours", row.yours[0].machine]) == 0
    report_md = Path("report/report.md").read_text()
    (table_row,) = [line for line in report_md.splitlines() if line.startswith("| ") and "622" in line]
    assert "622.0 (too close to call: no interval)" in table_row and not re.search(r"\d×\)", table_row), table_row
    assert "too close to call against yours" in report_md  # its own first-screen section


def test_a_difference_beyond_what_one_measurement_may_vary_is_quoted_as_resting_on_one(store) -> None:
    mine = log_cell(store, ONE_EPOCH, XEON, {"samples_per_s": 600.0})
    log_cell(store, ONE_EPOCH, M1_MAX, {"samples_per_s": 1200.0})
    _, lines = first_screen(store, {mine})
    assert lines[0].endswith("2.00x (faster than yours; no interval recorded)"), lines


def test_one_measurement_is_given_the_widest_spread_a_figure_that_is_not_noisy_may_have() -> None:
    from trainbench import figures
    from trainbench.tasks.base import NOISY_CV_PCT

    assert figures.WITHOUT_INTERVAL == 2 * NOISY_CV_PCT / 100  # the documented rule (docs/comparing.md)


def test_another_machines_runs_are_quoted_with_what_they_measured_and_two_runs_still_tell_machines_apart(
    store,
) -> None:
    """An H100's two runs of the default cell, 40,517 (no interval recorded) and 53,397 +- 900: their median with
    the span they measured, 46,957 (40,517-53,397 over 2 runs), 36.6x this CPU. A 95% interval of two runs' mean
    (Student's t 12.7) made it +-81,833 and "within noise" of a 2-core CPU at 1,283."""
    h100 = {"hw.gpu": "NVIDIA H100 80GB HBM3", "hw.gpu_memory_gb": "80", "trainbench.backend": "cuda"}
    mine = log_cell(store, TINY, XEON, {"samples_per_s": 1283.0, "samples_per_s_ci95": 60.0})
    log_cell(store, TINY, h100, {"samples_per_s": 40517.0})
    log_cell(store, TINY, h100, {"samples_per_s": 53397.0, "samples_per_s_ci95": 900.0})
    _, lines = first_screen(store, {mine})
    assert "46,957 (40,517-53,397 over 2 runs), 36.60x (faster than yours)" in lines[0], lines


def test_the_published_rows_a_sweep_imported_are_in_the_report_and_results_once_whoever_imported_them(
    store, tmp_path
) -> None:
    """A sweep imports the published rows into the store's shared experiment; `python src/references.py` into the
    store's own. The report and `trainbench results` read both, as the first screen does, and a row imported by
    both counts once (2026-11-29: they read neither the shared experiment, "0 reference run(s)", and the first
    screen counted a row imported both ways twice)."""
    import trainbench
    from trainbench.references import cli as references
    from trainbench.report import cli as report
    from trainbench.store.shared_runs import SHARED_EXPERIMENT

    _, uri, _ = store
    csv = (ROOT / "references" / "published-results.csv").read_text().splitlines(keepends=True)
    study = tmp_path / "depth-study.csv"
    rows = [line for line in csv[1:] if line.startswith("m1-tensorflow-benchmark,")]
    study.write_text(csv[0] + "".join(rows))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        assert references.main([str(study), "--experiment", SHARED_EXPERIMENT]) == 0
        log_cell(store, TINY, XEON, {"samples_per_s": 500.0, "samples_per_s_ci95": 10.0})
        assert report.main(["--out", str(tmp_path / "shared"), "--no-log", "--no-contributed"]) == 0
        assert references.main([str(study)]) == 0  # the same rows into the store's own experiment too
        assert report.main(["--out", str(tmp_path / "both"), "--no-log", "--no-contributed"]) == 0
        listed = trainbench.results(uri, contributed=False)
    published = [r for r in listed.rows if r.values.get("from") == "published: m1-tensorflow-benchmark"]
    assert all(r.values["total s"] and not r.values["date"] for r in published), published[:1]
    counted = [
        re.search(r"(\d+) reference run\(s\)", (tmp_path / name / "report.md").read_text())
        for name in ("shared", "both")
    ]
    assert [int(m.group(1)) for m in counted if m] == [len(published)] * 2 and published, (counted, len(published))


def test_a_setting_started_with_a_thread_count_reads_apart_in_its_words_and_its_runs_table_tag(store) -> None:
    """OMP_NUM_THREADS=1 makes another setting (threads.* params): the first screen's title and the
    trainbench.setting_name tag the MLflow runs table groups by say so, where both read alike before."""
    from trainbench.store.runs import SETTING_NAME_TAG, tag_setting_name

    client = store[0]
    plain = log_cell(store, TINY, XEON, {"samples_per_s": 300.0, "samples_per_s_ci95": 10.0})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        pinned = log_cell(store, TINY, XEON, {"samples_per_s": 900.0, "samples_per_s_ci95": 10.0})
    for run_id in (plain, pinned):
        tag_setting_name(client, run_id)
    names = [client.get_run(run_id).data.tags[SETTING_NAME_TAG] for run_id in (plain, pinned)]
    assert names[1] == names[0] + ", threads OMP_NUM_THREADS=1", names
    found, _ = first_screen(store, {plain, pinned})
    titles = sorted(s.title for s in found)
    assert len(titles) == 2 and titles[1] == titles[0] + ", threads OMP_NUM_THREADS=1", titles


def test_a_noisy_figure_without_an_interval_is_within_noise_of_a_close_one_and_apart_from_one_100x_away() -> None:
    """A noisy inference figure records no interval: it is given +-50% (not infinity), so a GPU's 2,291 against
    a 2-core CPU's 19.74 is a ratio, and against 2,331 within noise (2026-11-29: both read "within noise")."""
    from trainbench import figures

    assert figures.judged(2291.0, None, True, 19.74, None, False) == figures.APART
    assert figures.judged(2291.0, None, True, 2331.0, 30.2, False) == figures.WITHIN_NOISE
    assert figures.judged(2291.0, None, True, 4000.0, None, False) == figures.WITHIN_NOISE  # 1.7x: within reach
    # two runs that recorded no interval are not exact either: two GEMM peaks at 606 and 610 against one of 622
    low, high = figures.span([606.0, 610.0], [None, None])
    verdict = figures.judged(608.0, figures.half_width(608.0, low, high), False, 622.0, None, False)
    assert (low, high) == (486.4, 729.6) and verdict != figures.APART, (low, high, verdict)
