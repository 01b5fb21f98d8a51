"""hydra/sweeper=trainbench: Hydra's basic sweeper, with trainbench's owner between expansion and launch.

Hydra expands the command line (comma lists, glob, range, choice; a preset's `hydra.sweeper.params`)
exactly as its basic sweeper does; every job is then composed and judged before the first one runs, and
trainbench.sweep.owner.Sweep runs them through the configured launcher (basic, joblib, submitit, ray)
and owns their runs, summary and exit status; trainbench.sweep.launchers bounds how many cells a launcher runs
at once and ties its workers to the sweep's life. Hydra finds this plugin in the `hydra_plugins` namespace.
"""

import sys
from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus


@dataclass
class TrainbenchSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.trainbench_sweeper.trainbench_sweeper.TrainbenchSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="trainbench", node=TrainbenchSweeperConf, provider="trainbench"
)


class TrainbenchSweeper(BasicSweeper):
    _cpus_per_cell: int | None = None  # the most cores a cell of this sweep pins (cell.cpus): bounds parallelism

    def sweep(self, arguments: list[str]) -> Any:
        from trainbench.config import ConfigError, PlainError
        from trainbench.config.compose import expand_and_judge
        from trainbench.entry import fail
        from trainbench.frameworks import not_installed
        from trainbench.store.tracking import TrackingUnavailable
        from trainbench.sweep.owner import Sweep

        assert self.hydra_context is not None and self.config is not None and self.launcher is not None
        try:
            params = [f"{key}={value}" for key, value in (self.params or {}).items()]
            parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
            jobs, cells = expand_and_judge(parser, params + list(arguments), self._compose)
            # Slurm runs the cells on other machines, with Pythons of their own: each cell finds out there.
            missing = None if "Slurm" in type(self.launcher).__name__ else not_installed(cells)
            if missing:
                raise PlainError("framework", missing)
            self._cpus_per_cell = max((cell.cell.cpus or 0 for cell in cells), default=0) or None
            # Slurm and Ray on AWS run cells on machines whose devices this one cannot see.
            here = not any(remote in type(self.launcher).__name__ for remote in ("Slurm", "AWS"))
            in_this_process = type(self.launcher).__name__ == "BasicLauncher"
            code = Sweep(
                cells,
                jobs,
                self._launch,
                command_line=list(arguments),
                cells_run_here=here,
                runs_cells_in_this_process=in_this_process,
            ).run()
        except (ConfigError, TrackingUnavailable) as error:
            code = fail(str(error))
        sys.stdout.flush()
        raise SystemExit(code)

    def _compose(self, overrides: list[str]) -> Any:
        assert self.hydra_context is not None and self.config is not None
        return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)

    def _launch(self, jobs: list[list[str]]) -> list[Any]:
        from trainbench.sweep import launchers

        assert self.launcher is not None
        at_a_time = max(1, launchers.prepare(self.launcher, len(jobs), self._cpus_per_cell))
        returns: list[Any] = []
        try:
            with launchers.ctrl_c_for_the_sweep_alone(self.launcher):
                for first in range(0, len(jobs), at_a_time):
                    returns += self.launcher.launch(jobs[first : first + at_a_time], initial_job_idx=first)
        except BaseException:  # stopped (Ctrl-C, SIGTERM, SIGHUP) or failed: no cell runs on without the sweep
            launchers.stop_local_workers()
            raise
        results: list[Any] = []
        for job in returns:
            if job.status == JobStatus.COMPLETED:
                results.append(job.return_value)
            else:
                error = job._return_value  # noqa: SLF001  (the exception; .return_value would raise it)
                results.append(
                    f"the job failed: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
                )
        return results
