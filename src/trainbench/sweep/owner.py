"""The one owner of a sweep: its cells, its store, its parent run, its summary and its exit status.

trainbench's Hydra sweeper (hydra_plugins/trainbench_sweeper) expands the command line into jobs, composes
and judges every one of them, and hands them here. The owner then, before any cell runs: opens the store
(closing runs whose process vanished as `lost`), makes sure every dataset and pretrained weights file the
sweep needs is on disk and every dataset file can be read, decides what `sweep.resume` skips, and creates the
parent run. The cells run through whatever Hydra launcher is configured (in this process, or joblib,
submitit, Ray workers): each job carries its cell's order, made here once (trainbench.cell.order), and its own process
creates, heartbeats and closes the cell's run (trainbench.sweep.cell_run). The owner reads the outcomes back (from the launcher, else from the
store), closes anything left open, prints the summary and returns the exit status:
  0 every cell finished (or was skipped by resume); 1 some cell did not; 2 bad input, nothing ran;
  128 + the signal when stopped (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from trainbench import suite, untrusted
from trainbench.cell import names
from trainbench.cell.order import IN_FORCE_TAGS, CellOrder, StoreAddress, launcher_override
from trainbench.config import CellConfig, config_hash
from trainbench.measure import device_probe, hardware
from trainbench.measure.timeline import mark
from trainbench.stops import STOP_SIGNALS, raising_on_stop
from trainbench.store import mlflow_project, tracking
from trainbench.sweep import cell_process, handoff, job, job_states, liveness, resume, sweep_clock
from trainbench.sweep.cell_run import CellResult, Stopped
from trainbench.sweep.needed_files import fetch_or_refuse_missing_files
from trainbench.sweep.summary import (
    bring_other_machines,
    browse_hint,
    cell_setting_id,
    comparison_link,
    plan_table,
    plan_text,
    print_side_by_side,
    print_suite_summary,
    recorded_figures,
    summary_table,
    sweep_outcome,
    where_it_stands,
)
from trainbench.tasks.base import task_of

EXIT_OK, EXIT_CELLS_DID_NOT_FINISH, EXIT_BAD_INPUT = 0, 1, 2

# launch(list of job overrides) -> per job, in order: its CellResult as a dict, or why the job failed
Launch = Callable[[list[list[str]]], list[dict[str, Any] | str]]


class Sweep:
    def __init__(
        self,
        cells: list[CellConfig],
        jobs: list[list[str]],
        launch: Launch,
        command_line: list[str] | None = None,
        cells_run_here: bool = True,
        runs_cells_in_this_process: bool = False,
    ) -> None:
        self.cells, self.jobs, self.launch = cells, jobs, launch
        # True: the launcher runs each cell's job in this process (Hydra's basic launcher), so the first cell's
        # process can start, and its line be printed, before the store opens (see run)
        self.runs_cells_in_this_process = runs_cells_in_this_process
        self.cells_run_here = cells_run_here  # False: a launcher runs them on other machines, with other devices
        # Each cell's kind for the sweep's estimate; `-` for one recorded `unavailable` without starting.
        devices = {cell.device.name for cell in cells}
        absent = {device for device in devices if cells_run_here and device_probe.absent(device)}
        self.kinds = [sweep_clock.ABSENT if cell.device.name in absent else sweep_clock.kind(cell) for cell in cells]
        self.command_line = command_line  # the overrides as typed (sweep syntax and all), for the record
        self.settings = cells[0].sweep
        base = [names.run_name(cell, names.shown_device(cell.device.name)) for cell in cells]
        self.suffixes = names.suffixes(base, jobs)
        self.names = [b + s for b, s in zip(base, self.suffixes, strict=True)]
        self.started = time.time()
        self.sweep_name = ""
        self.linked_run: str | None = None  # `mlflow run`'s run in another experiment, leading to the sweep's
        self.job_states: Path | None = None  # what each job got to, on this machine's disk (sweep.job_states)

    def run(self) -> int:
        self._name_absent_devices()
        if self.settings.dry_run:
            plans = self._resume_plans() if self.settings.resume is not False else None
            ids = [cell_setting_id(cell) for cell in self.cells]
            skipped = sum(not plan.run for plan in plans or [])
            resumed = f", {skipped} would be skipped (sweep.resume)" if plans is not None else ""
            try:
                print(plan_table(self.names, self.jobs, ids, plans), flush=True)
                done = f"{len(self.cells)} cell(s){resumed}; nothing was run or recorded (sweep.dry_run=true)"
                print(done, flush=True)
                mlflow_project.note("finished", None, f"trainbench listed {done}.")
            except BrokenPipeError:  # `... sweep.dry_run=true | head`: the reader has what it wanted
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush is quiet too
            self._hand_over_plan(ids, plans)
            return EXIT_OK
        first = self.cells[0]
        uri = tracking.resolve_tracking_uri(first.tracking.uri)
        mark("parent: cells composed and judged")
        if self.runs_cells_in_this_process and self.kinds[0] != sweep_clock.ABSENT:
            # Importing MLflow and opening the store take seconds: the first cell's process loads its framework
            # meanwhile (it computes nothing before its run exists), and the user sees which cell comes first.
            cell_process.prestart(task_of(first).prepared(first))
            if self.settings.resume is False:  # with resume, the store decides whether it runs
                job.announce(1, len(self.cells), self.names[0], self.jobs[0])
        try:
            return self._run_in_store(first, uri)
        finally:
            cell_process.discard_prestarted()

    def _run_in_store(self, first: CellConfig, uri: str) -> int:
        store = tracking.open_store(uri, outage_s=first.tracking.outage_s)  # TrackingUnavailable before any work
        mark("parent: store open")
        lost = liveness.close_lost_runs(store, self.settings.lost_after_s)
        if lost:
            print(f"trainbench: closed {len(lost)} run(s) whose process had vanished as `lost`", flush=True)
        mark("parent: lost runs closed")
        fetch_or_refuse_missing_files(self.cells)
        adopted = mlflow_project.adopted_run(store, first.tracking.experiment)
        if adopted:
            experiment_id = str(store.get_run(adopted).info.experiment_id)
        else:
            experiment_id = tracking.experiment_id(store, first.tracking.experiment, uri)
            self.linked_run = mlflow_project.run_id()
        decisions = resume.decide(self.cells, store, experiment_id, self.settings.resume)
        sweep_name = self.sweep_name = names.sweep_name()
        # Under `mlflow run`, even one cell has a sweep's run: the run `mlflow run` names is it, or leads to it.
        wants_parent = len(self.cells) > 1 or self.linked_run is not None
        parent = adopted or (self._create_parent(store, experiment_id, sweep_name) if wants_parent else None)
        if parent:
            tracking.set_tags(store, parent, self._parent_tags(sweep_name))
        if self.linked_run and parent:
            self._describe_linked_run(store, "", experiment_id, parent, "running", None, "")
        sweep_id = parent or sweep_name
        with job_states.kept() as self.job_states:
            return self._run_cells(store, uri, experiment_id, parent, sweep_id, decisions, adopted is not None)

    def _run_cells(
        self,
        store: Any,
        uri: str,
        experiment_id: str,
        parent: str | None,
        sweep_id: str,
        decisions: list[resume.Decision],
        adopted: bool,
    ) -> int:
        results: dict[int, CellResult] = {}
        job_errors: dict[int, str] = {}
        stopped: Stopped | None = None
        broken: tracking.StoreFailed | None = None  # the store stopped accepting writes: the sweep ends there
        to_run = [i for i, d in enumerate(decisions) if d.run]
        try:
            with _stop_signals_raise(), _parent_heartbeat(store, parent, self.settings.heartbeat_s):
                for i, decision in enumerate(decisions):
                    if not decision.run:
                        results[i] = self._record_skipped(store, experiment_id, parent, sweep_id, i, decision)
                address = StoreAddress(uri, experiment_id, parent, sweep_id)
                jobs = [self.jobs[i] + [launcher_override(self._order(address, i))] for i in to_run]
                if jobs:
                    for i, returned in zip(to_run, self._launch_all(jobs), strict=True):
                        if isinstance(returned, dict):
                            results[i] = CellResult(**returned)
                        else:
                            job_errors[i] = returned
        except Stopped as stop:
            stopped = stop
            tracking.OUTAGE.stop_waiting()
        except tracking.StoreFailed as fault:
            broken = fault
        finally:
            with _stop_signals_ignored():  # a second Ctrl-C must not leave the sweep half-recorded
                # Runs a dead job left open are closed first, so that the summary reads their reason back.
                self._close_left_open(store, experiment_id, sweep_id, stopped, broken)
                results.update(self._recorded(store, experiment_id, sweep_id, results))
                rows = self._rows(results, job_errors, stopped, broken)
                table = summary_table(rows, recorded_figures(store, experiment_id, sweep_id))
                print(untrusted.shown(table, keep_newlines=True), flush=True)
                if broken is not None:
                    print(
                        f"trainbench: {broken}. The sweep stopped there; what it could not close, the next "
                        "invocation against the store closes as `lost`",
                        file=sys.stderr,
                        flush=True,
                    )
                mine = {r.run_id for r in rows if r.outcome == "finished" and r.run_id}
                mine |= {d.prior_run.info.run_id for d in decisions if d.prior_run is not None}
                imported = bool(mine) and not (stopped or broken) and bring_other_machines(store, uri)
                page = (
                    None
                    if stopped or broken or (mine and not imported)
                    else where_it_stands(store, uri, experiment_id, mine, self.sweep_name or sweep_id)
                )
                if page is not None:
                    print_side_by_side(store, uri, experiment_id, mine)
                if suite.tags() and mine and not (stopped or broken):
                    print_suite_summary(store, uri, experiment_id, mine)
                print(
                    f"MLflow: {tracking.as_seen_here(uri)} (experiment {experiment_id}"
                    + (f", sweep run {parent}" if parent else "")
                    + f")  -- {browse_hint(uri)}",
                    flush=True,
                )
                link = comparison_link(store, uri, experiment_id, parent)
                print(f"Browse: {link}", flush=True)
                if parent:
                    self._close_parent(store, parent, rows, table, stopped, adopted, page, broken)
                if self.linked_run and parent:
                    outcome, reason = sweep_outcome(rows, stopped, broken)
                    self._describe_linked_run(store, link, experiment_id, parent, outcome, reason, table)
        mark("parent: summary printed")
        self._hand_over(rows, uri, experiment_id, sweep_id, parent)
        if stopped is not None:
            return 128 + stopped.signum
        finished = all(r.outcome in ("finished", "skipped") for r in rows) and broken is None
        return EXIT_OK if finished else EXIT_CELLS_DID_NOT_FINISH

    def _hand_over(
        self, rows: list[CellResult], uri: str, experiment_id: str, sweep_id: str, parent: str | None
    ) -> None:
        """The cells as the summary has them, for the Python API that started this sweep (sweep.handoff)."""
        if not handoff.wanted():
            return
        cells = [
            {**row.to_dict(), "setting_id": cell_setting_id(cell)} for row, cell in zip(rows, self.cells, strict=True)
        ]
        handoff.write_sweep(
            tracking_uri=uri,
            experiment_id=experiment_id,
            sweep_id=sweep_id,
            sweep_run_id=parent,
            dry_run=False,
            cells=cells,
        )

    def _hand_over_plan(self, setting_ids: list[str], plans: list[resume.Decision] | None) -> None:
        """The dry run's list, for the Python API: each cell's name and setting; with sweep.resume, its plan."""
        if not handoff.wanted():
            return
        cells = []
        for i, (name, setting_id) in enumerate(zip(self.names, setting_ids, strict=True)):
            plan = plans[i] if plans is not None else None
            skipped = plan is not None and not plan.run
            reason = plan_text(plan) if plan is not None and skipped else None
            prior = plan.prior_run.info.run_id if plan is not None and plan.prior_run is not None else None
            cells.append(
                {
                    "index": i + 1,
                    "name": name,
                    "outcome": "would be skipped" if skipped else "would run",
                    "samples_per_s": None,
                    "reason": reason,
                    "run_id": prior,
                    "setting_id": setting_id,
                }
            )
        handoff.write_sweep(
            tracking_uri=None, experiment_id=None, sweep_id=None, sweep_run_id=None, dry_run=True, cells=cells
        )

    def _name_absent_devices(self) -> None:
        """Before the first cell (and in a dry run): a device this machine cannot have, in one line, so that
        nobody waits for the other cells to learn it."""
        if not self.cells_run_here:
            return
        will = "would" if self.settings.dry_run else "will"
        for line in device_probe.notice([cell.device.name for cell in self.cells], will):
            print(line, file=sys.stderr, flush=True)

    def _resume_plans(self) -> list[resume.Decision]:
        """What sweep.resume would decide for each cell, read from the store without writing to it (a store
        that does not exist yet holds nothing to skip, and is not created)."""
        first = self.cells[0]
        uri = tracking.resolve_tracking_uri(first.tracking.uri)
        if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :].split("?", 1)[0]).exists():
            return [resume.Decision(True) for _ in self.cells]
        store = tracking.open_store(uri, outage_s=first.tracking.outage_s)
        adopted = mlflow_project.run_id()
        if adopted and mlflow_project.adoptable(store, adopted, first.tracking.experiment):
            experiment_id = str(store.get_run(adopted).info.experiment_id)
        else:
            experiment = store.get_experiment_by_name(first.tracking.experiment)
            if experiment is None:
                return [resume.Decision(True) for _ in self.cells]
            experiment_id = str(experiment.experiment_id)
        return resume.decide(self.cells, store, experiment_id, self.settings.resume)

    # -- the cells' runs ----------------------------------------------------------------------------
    def _launch_all(self, jobs: list[list[str]]) -> list[dict[str, Any] | str]:
        """The launcher's returns; when the launcher itself fails (its settings, a cluster it cannot reach),
        why, for each of its jobs: the cells that ran anyway are then read back from the store."""
        try:
            return self.launch(jobs)
        except Exception as error:
            text = str(error).strip()
            why = f"the launcher failed: {type(error).__name__}" + (f": {text.splitlines()[0][:300]}" if text else "")
            sys.stderr.write(f"trainbench: {tracking.private(why)}\n")
            return [why] * len(jobs)

    def _order(self, address: StoreAddress, i: int) -> CellOrder:
        """The i-th cell's order (trainbench.cell.order): made once, here, for its job and its processes."""
        cell = self.cells[i]
        asked = {
            "trainbench.kind": "cell",
            "trainbench.framework": cell.framework.name,
            "trainbench.device": cell.device.name,
            # The cell as it runs (its task's prepared form), as resume and scaling_efficiency look it up.
            "trainbench.config_hash": config_hash(task_of(cell).prepared(cell)),
            "trainbench.sweep_id": address.sweep_id,
            "trainbench.cell_index": i + 1,
            **task_of(cell).tags(task_of(cell).prepared(cell)),
            **suite.tags(),
        }
        return CellOrder(
            cell=cell,
            overrides=tuple(self.jobs[i]),
            store=address,
            index=i + 1,
            total=len(self.cells),
            name_suffix=self.suffixes[i],
            started_at=round(self.started, 3),
            kinds=tuple(self.kinds),
            tags={key: str(value) for key, value in asked.items() if value is not None and key not in IN_FORCE_TAGS},
        )

    def _record_skipped(
        self, store: Any, experiment_id: str, parent: str | None, sweep_id: str, i: int, decision: resume.Decision
    ) -> CellResult:
        prior = decision.prior_run
        tags = {
            "trainbench.kind": "cell",
            "trainbench.sweep_id": sweep_id,
            "trainbench.cell_index": i + 1,
            "trainbench.result_run_id": prior.info.run_id if prior else None,
            **{
                k: v
                for k, v in (prior.data.tags.items() if prior else ())
                if k.startswith(("trainbench.", "hw."))
                and k
                not in (
                    "trainbench.outcome",
                    "trainbench.reason",
                    "trainbench.sweep_id",
                    "trainbench.cell_index",
                    "trainbench.process",
                    "trainbench.heartbeat",
                )
            },
        }
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = store.create_run(
            experiment_id, run_name=self.names[i], tags={k: str(v) for k, v in tags.items() if v is not None}
        )
        tracking.close(store, run.info.run_id, "skipped", decision.reason)
        speed = prior.data.metrics.get("samples_per_s") if prior else None
        reason = untrusted.shown(decision.reason)  # may quote a run read back from the store
        print(f"[cell {i + 1}/{len(self.cells)}] {self.names[i]}: skipped, {reason}", flush=True)
        return CellResult(i + 1, self.names[i], "skipped", speed, decision.reason, run.info.run_id)

    def _recorded(
        self, store: Any, experiment_id: str, sweep_id: str, known: dict[int, CellResult]
    ) -> dict[int, CellResult]:
        """Outcomes of this sweep's cells as the store has them: for launchers that lost their results
        (a Ctrl-C in the middle of a batch) or cells run on other machines."""
        try:
            runs = store.search_runs([experiment_id], f"tags.`trainbench.sweep_id` = '{sweep_id}'", max_results=10_000)
        except (Exception, tracking.StoreFailed):  # the store is unreachable now: report what the launcher returned
            return {}
        found: dict[int, CellResult] = {}
        for run in runs:
            tags, index = run.data.tags, int(run.data.tags.get("trainbench.cell_index", "0")) - 1
            if index < 0 or index in known:
                continue
            found[index] = CellResult(
                index + 1,
                run.info.run_name,
                tags.get("trainbench.outcome", "running"),
                run.data.metrics.get("samples_per_s"),
                tags.get("trainbench.reason"),
                run.info.run_id,
                run.data.metrics.get("peak_tflops"),
            )
        return found

    def _close_left_open(
        self, store: Any, experiment_id: str, sweep_id: str, stopped: Stopped | None, broken: BaseException | None
    ) -> None:
        """A cell whose launcher died without closing its run (a killed joblib worker, a store that failed under
        it): close it now, if the store still takes that write."""
        try:
            runs = store.search_runs(
                [experiment_id],
                f"tags.`trainbench.sweep_id` = '{sweep_id}' and attributes.status = 'RUNNING'",
                max_results=10_000,
            )
        except (Exception, tracking.StoreFailed):
            return
        for run in runs:
            outcome = "killed" if stopped else "failed"
            reason = (
                stopped.reason
                if stopped
                else str(broken)
                if broken
                else "the job running this cell ended without closing its run"
            )
            try:
                tracking.close(store, run.info.run_id, outcome, reason)
            except (Exception, tracking.StoreFailed):  # (the next invocation closes it as lost)
                continue

    def _rows(
        self,
        results: dict[int, CellResult],
        job_errors: dict[int, str],
        stopped: Stopped | None,
        broken: BaseException | None = None,
    ) -> list[CellResult]:
        rows = []
        for i, name in enumerate(self.names):
            if i in results:
                found = results[i]
                outcome, reason = found.outcome, found.reason
                if found.outcome == "running" and broken is not None:
                    # Its run was read back still open: the cell ran, and its outcome never reached the store.
                    outcome, reason = "lost", f"it ran; its record was lost: {broken}"
                elif found.outcome == "running":
                    outcome = "killed"
                rows.append(
                    CellResult(
                        i + 1,
                        name if found.outcome == "skipped" else found.name or name,
                        outcome,
                        found.samples_per_s,
                        reason,
                        found.run_id,
                        found.peak_tflops,
                    )
                )
            elif i in job_errors:
                rows.append(CellResult(i + 1, name, "failed", None, job_errors[i], None))
            elif broken is not None and getattr(broken, "cell_index", None) == i + 1:
                rows.append(CellResult(i + 1, name, "failed", None, f"stopped: {broken}", None))
            elif broken is not None:
                rows.append(self._unread(i, name, broken))
            else:
                why = "the sweep was stopped before it started" if stopped else "its job left no record"
                rows.append(CellResult(i + 1, name, "not started" if stopped else "failed", None, why, None))
        return rows

    def _unread(self, i: int, name: str, broken: BaseException) -> CellResult:
        """A cell whose outcome neither its launcher returned (a parallel launcher drops every job's return when
        one job's store fault stops it) nor the failed store gives back: what its job wrote on this machine."""
        state = job_states.read(self.job_states, i + 1)
        if state is None and self.cells_run_here:
            return CellResult(i + 1, name, "not started", None, "the tracking store stopped taking writes", None)
        if state is None:  # its job ran on another machine, or never started: nothing here says which
            return CellResult(i + 1, name, "lost", None, f"its outcome could not be read back: {broken}", None)
        if state.get("state") != "ended":
            return CellResult(
                i + 1, name, "lost", None, f"it ran until the sweep stopped; its record was lost: {broken}", None
            )
        ended = str(state.get("outcome"))
        return CellResult(
            i + 1,
            str(state.get("name") or name),
            "lost",
            state.get("samples_per_s"),
            f"it ran ({ended}); its record was lost: {broken}",
            state.get("run_id"),
            state.get("peak_tflops"),
        )

    # -- the parent run -----------------------------------------------------------------------------
    def _create_parent(self, store: Any, experiment_id: str, sweep_name: str) -> str:
        run = store.create_run(experiment_id, run_name=sweep_name, tags={"trainbench.kind": "sweep"})
        return str(run.info.run_id)

    def _parent_tags(self, sweep_name: str) -> dict[str, Any]:
        typed = self.command_line if self.command_line is not None else sorted({o for job in self.jobs for o in job})
        overrides = list(typed)
        return {
            "trainbench.kind": "sweep",
            "trainbench.outcome": "running",
            "trainbench.sweep_name": sweep_name,
            "trainbench.cells": len(self.cells),
            "trainbench.overrides": tracking.private(" ".join(overrides)) or "(defaults)",
            **suite.tags(),
            "git.commit": tracking.git_commit(),
            **hardware.host_tags(),
            **liveness.alive_tags(),
        }

    def _describe_linked_run(
        self,
        store: Any,
        link: str,
        experiment_id: str,
        parent: str,
        outcome: str,
        reason: str | None,
        table: str,
    ) -> None:
        """The run `mlflow run` made in an experiment where trainbench's tools never look (MLflow's Default):
        kept, with the sweep's outcome and the way to its run and cells (`mlflow run` ends it from our exit
        status). A store that fails here costs this run's tags only."""
        assert self.linked_run is not None
        experiment = store.get_experiment(experiment_id).name
        lines = [
            f"trainbench recorded this sweep in experiment `{experiment}` (id {experiment_id}) as run `{parent}`; "
            "its cells are that run's children.",
        ]
        if link.startswith("http"):
            lines.append(f"[The sweep's cells]({link})")
        if table:
            lines.append("```\n" + untrusted.shown(table, keep_newlines=True) + "\n```")
        try:
            mlflow_project.describe(
                store,
                self.linked_run,
                outcome,
                reason,
                "\n\n".join(lines),
                **{"trainbench.sweep_run_id": parent},
            )
        except (Exception, tracking.StoreFailed) as error:
            sys.stderr.write(f"trainbench: could not tag `mlflow run`'s run: {tracking.private_line(error)}\n")

    def _close_parent(
        self,
        store: Any,
        parent: str,
        rows: list[CellResult],
        table: str,
        stopped: Stopped | None,
        adopted: bool,
        page: Path | None = None,
        broken: BaseException | None = None,
    ) -> None:
        done = [r for r in rows if r.outcome in ("finished", "skipped")]
        outcome, reason = sweep_outcome(rows, stopped, broken)
        try:
            tracking.log_metrics(
                store,
                parent,
                {"cells": len(rows), "cells_finished": len(done), "sweep_time_s": time.time() - self.started},
            )
            # Artifacts may live where the database does not (a read-only artifact folder): the run is
            # closed whatever becomes of them.
            with contextlib.suppress(tracking.StoreFailed):
                store.log_text(parent, table + "\n", "summary.txt")
                if page is not None:
                    store.log_artifact(parent, str(page))  # the first screen, with the sweep's run
            if adopted:  # `mlflow run` closes its own run from our exit status
                tracking.set_tags(store, parent, {"trainbench.outcome": outcome, "trainbench.reason": reason})
            else:
                tracking.close(store, parent, outcome, reason)
        except tracking.StoreFailed:  # said once already, with the summary
            return
        except Exception as error:
            sys.stderr.write(f"trainbench: could not close the sweep's run: {tracking.private_line(error)}\n")


# ----------------------------------------------------------------------------------------- signals


def _stop_signals_raise() -> AbstractContextManager[None]:
    """SIGTERM and SIGHUP stop the sweep the way Ctrl-C does: the running cell is recorded `killed`, the
    rest `not started`, the summary printed. (A timeout, CI cancelling a job, `kill <pid>`.)"""
    return raising_on_stop(Stopped)


@contextmanager
def _stop_signals_ignored() -> Iterator[None]:
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _parent_heartbeat(store: Any, parent: str | None, interval_s: float) -> Iterator[None]:
    if parent is None:
        yield
        return
    with liveness.Heartbeat(store, parent, interval_s):
        yield
