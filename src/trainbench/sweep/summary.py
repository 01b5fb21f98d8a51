"""What a sweep shows as it ends, and what its dry run lists: the summary table with each cell's figure as every
screen quotes it, the links to MLflow and to the comparison page, where this machine stands against others, and
each cell's setting id. Each convenience here costs only itself when the store fails under it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from trainbench import figures, untrusted
from trainbench.config import PROJECT_ROOT, CellConfig
from trainbench.stops import STOP_SIGNALS
from trainbench.store import tracking
from trainbench.sweep import resume
from trainbench.sweep.cell_run import CellResult, Stopped
from trainbench.tasks.base import task_of


def browse_hint(uri: str) -> str:
    """How to open this sweep in MLflow's UI. `mlflow ui` starts on its home page (a list of experiments) and
    has no option to start elsewhere, so the hint sends the reader on to the links printed beside it, which
    open the sweep's runs and the compare view directly."""
    then = ", then open the Browse link (or a Side by side link to compare machines)"
    if uri == tracking.default_tracking_uri():
        where = "the project root" if tracking.default_store_folder() == PROJECT_ROOT else "this folder"
        return f"start MLflow's UI with `mlflow ui` from {where}{then}"
    if uri.startswith(("http://", "https://")):
        return "open the Browse link in the server's own UI (or a Side by side link to compare machines)"
    return f"start MLflow's UI with `mlflow ui --backend-store-uri {tracking.pasteable(uri)}`{then}"


def where_it_stands(store: Any, uri: str, experiment_id: str, mine: set[str], sweep_id: str) -> Path | None:
    """Print, per setting the sweep finished, where this machine stands against every other machine's run of
    that setting (the store, results/contributed/, published references), and write the page that shows it
    (trainbench.report.standing); return its path. A convenience: a store that fails here costs the page only."""
    if not mine:
        return None
    from trainbench.report import standing

    try:
        found, path = standing.after_sweep(store, uri, experiment_id, mine, sweep_id)
    except tracking.StoreFailed:
        return None
    except Exception as error:
        sys.stderr.write(f"trainbench: no comparison page: {tracking.private(str(error)).splitlines()[0][:200]}\n")
        return None
    compared = sum(1 for s in found if s.others)
    print(
        f"Where this machine stands: {compared} of {len(found)} setting(s) also measured on another machine "
        "(this store, results/contributed/, published figures)",
        flush=True,
    )
    for line in standing.terminal_lines(found):
        print(untrusted.shown(line), flush=True)  # other machines' names and tags: from files, never control
    print(f"Compare: {tracking.as_seen_here(str(path.resolve()))}  -- open it in a browser", flush=True)
    return path


def print_suite_summary(store: Any, uri: str, experiment_id: str, mine: set[str]) -> None:
    """After `trainbench suite`: per workload every machine that ran it, and one geometric-mean line per machine
    (trainbench.report.suite_summary). A convenience, as the page is: a failure here costs the summary only."""
    from trainbench.report import suite_summary

    try:
        lines = suite_summary.after_suite(store, uri, experiment_id, mine)
    except tracking.StoreFailed:
        return
    except Exception as error:
        sys.stderr.write(f"trainbench: no suite summary: {tracking.private(str(error)).splitlines()[0][:200]}\n")
        return
    for line in lines:
        print(untrusted.shown(line), flush=True)  # machine names from other machines' files


class _ImportStopped(Exception):
    pass


def _stop_import(signum: int, frame: Any) -> None:
    raise _ImportStopped()


def bring_other_machines(store: Any, uri: str) -> bool:
    """Published and contributed runs into the store's shared experiment, when their files changed; False when a
    stop (Ctrl-C, SIGTERM) cut the import short. The sweep's end runs with stops ignored, so that it is recorded
    whole; this import may take tens of seconds and records nothing of the sweep's, so a stop here ends it (its
    process killed by subprocess.run) and the next sweep imports again."""
    from trainbench.store.shared_runs import refresh

    previous = {sig: signal.signal(sig, _stop_import) for sig in STOP_SIGNALS}
    try:
        line = refresh(store, uri)
    except _ImportStopped:
        print("trainbench: stopped while importing other machines' runs; the next sweep imports them", flush=True)
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if line:
        print(line, flush=True)
    return True


def print_side_by_side(store: Any, uri: str, experiment_id: str, mine: set[str]) -> None:
    """Per setting, the link to MLflow's compare-runs page with this machine's run and other machines' runs."""
    from trainbench.report.side_by_side import side_by_side
    from trainbench.store.runs import LOCAL_UI
    from trainbench.store.shared_runs import SHARED_EXPERIMENT

    try:
        shared = store.get_experiment_by_name(SHARED_EXPERIMENT)
        ids = [experiment_id, *([shared.experiment_id] if shared else [])]
        found = side_by_side(store, ids, mine)
    except Exception as error:  # a convenience: never fail a sweep over it
        print(f"trainbench: no side-by-side links: {tracking.private(str(error))[:160]}", flush=True)
        return
    base = uri if uri.startswith(("http://", "https://")) else LOCAL_UI
    for entry in found:
        print(
            untrusted.shown(f"Side by side in MLflow: {entry.setting_name}: {tracking.redact(entry.url(base))}"),
            flush=True,
        )


def comparison_link(store: Any, uri: str, experiment_id: str, parent: str | None) -> str:
    """The runs view of this sweep's cells with hw.label and samples_per_s as the first columns, fastest
    first (a saved view in the experiment; see trainbench.store.runs.ui_url)."""
    from trainbench.store.runs import ui_url

    try:
        return tracking.redact(ui_url(uri, experiment_id, sweep_run_id=parent))
    except tracking.StoreFailed:
        return "(no link: the tracking store stopped taking writes)"
    except Exception as error:  # the link is a convenience: never fail a sweep over it
        return f"(no link: {tracking.private(str(error))[:120]})"


def summary_table(results: list[CellResult], quoted: dict[str, str] | None = None) -> str:
    """`quoted`: run id -> its figure as every screen quotes it (interval, repeats, noise; `recorded_figures`)."""
    # one column of figures: samples/s, or a GEMM's TFLOPS (each says so) where the sweep has one
    header = "figure" if any(r.peak_tflops is not None for r in results) else "samples/s"
    rows = [("cell", "outcome", header, "reason")]
    for r in results:
        speed = f"{r.samples_per_s:,.1f}" if r.samples_per_s is not None else "-"
        if r.run_id and r.samples_per_s is not None and (quoted or {}).get(r.run_id):
            speed = (quoted or {})[r.run_id]
        if r.peak_tflops is not None:
            speed = f"{figures.number(r.peak_tflops)} TFLOPS peak"  # as the first screen and the run's note
        rows.append((r.name, r.outcome, speed, tracking.private(r.reason or "")))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join([row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]), row[3]]).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(lines)


def recorded_figures(store: Any, experiment_id: str, sweep_id: str) -> dict[str, str]:
    """Run id -> samples_per_s of this sweep's cells as the first screen, `trainbench results` and the report
    quote it (trainbench.figures: with its interval, repeats and noise), read back from the store."""
    try:
        runs = store.search_runs([experiment_id], f"tags.`trainbench.sweep_id` = '{sweep_id}'", max_results=10_000)
    except (Exception, tracking.StoreFailed):  # the store is unreachable now: the table shows the bare figures
        return {}
    found = {}
    for run in runs:
        metrics, value = run.data.metrics, run.data.metrics.get("samples_per_s")
        if value is not None:
            found[run.info.run_id] = figures.quoted(
                value,
                figures.ci95(metrics, "samples_per_s"),
                figures.repeats(run.data.params, "samples_per_s"),
                figures.noisy(run.data.tags),
            )
    return found


def cell_setting_id(cell: CellConfig) -> str:
    """The short name of the comparison setting the cell will record (trainbench.store.setting.setting_id): two
    cells with one id measure the same quantity, wherever they run."""
    from trainbench.config import params
    from trainbench.store.setting import setting, setting_id

    prepared = task_of(cell).prepared(cell)
    return setting_id(setting({key: str(value) for key, value in params(prepared).items()}, {}))


def sweep_outcome(
    rows: list[CellResult], stopped: Stopped | None, broken: BaseException | None
) -> tuple[str, str | None]:
    """The sweep's outcome and, when it is not finished, why."""
    done = sum(r.outcome in ("finished", "skipped") for r in rows)
    outcome = "killed" if stopped else "finished" if done == len(rows) and not broken else "failed"
    if stopped:
        return outcome, stopped.reason
    if broken:
        return outcome, str(broken)
    return outcome, None if outcome == "finished" else f"{len(rows) - done} of {len(rows)} cells did not finish"


def plan_table(
    cell_names: list[str], jobs: list[list[str]], settings: list[str], plans: list[resume.Decision] | None = None
) -> str:
    """The dry run's list: each cell's name, its setting's id, with sweep.resume whether it would run or be
    skipped (and which run holds its result), and the overrides that make it. The sweep's own switches
    (sweep.dry_run, sweep.resume, ...) are the same for every cell and are left out of the rows."""
    width = max(len(n) for n in cell_names)
    shown_plans = [plan_text(plan) for plan in plans] if plans is not None else None
    plan_width = max(len(p) for p in ["plan", *shown_plans]) if shown_plans else 0
    plan_head = f"{'plan'.ljust(plan_width)}  " if shown_plans else ""
    plan_rule = f"{'-' * plan_width}  " if shown_plans else ""
    lines = [
        f"{'cell'.ljust(width)}  setting       {plan_head}overrides",
        f"{'-' * width}  ------------  {plan_rule}---------",
    ]
    for i, (name, job, setting_id) in enumerate(zip(cell_names, jobs, settings, strict=True)):
        shown = " ".join(o for o in job if not o.lstrip("+").startswith("sweep."))
        plan = f"{shown_plans[i].ljust(plan_width)}  " if shown_plans else ""
        lines.append(f"{name.ljust(width)}  {setting_id}  {plan}{tracking.private(shown) or '(defaults)'}")
    return "\n".join(lines)


def plan_text(plan: resume.Decision) -> str:
    if plan.run:
        return "run"
    if plan.prior_run is not None:
        return f"skip: recorded in run {plan.prior_run.info.run_id}"
    return "skip: " + plan.reason.split(" (sweep.resume")[0]
