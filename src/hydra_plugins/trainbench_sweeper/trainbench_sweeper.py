"""hydra/sweeper=trainbench: Hydra's basic sweeper, with trainbench's owner between expansion and launch.

Hydra expands the command line (comma lists, glob, range, choice; a preset's `hydra.sweeper.params`)
exactly as its basic sweeper does; every job is then composed and judged before the first one runs, and
trainbench.sweep.owner.Sweep runs them through the configured launcher (basic, joblib, submitit, ray)
and owns their runs, summary and exit status; trainbench.sweep.launchers bounds how many cells a launcher runs
at once and ties its workers to the sweep's life. Hydra finds this plugin in the `hydra_plugins` namespace.
"""

import pickle
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf


@dataclass
class TrainbenchSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.trainbench_sweeper.trainbench_sweeper.TrainbenchSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="trainbench", node=TrainbenchSweeperConf, provider="trainbench"
)


class TrainbenchSweeper(BasicSweeper):
    _cpus_per_cell: int | None = None  # the most cores a cell of this sweep pins (cell.cpus): bounds parallelism
    # Each judged job's composition (pickled: far smaller than the live object), by its overrides: the launcher's
    # composition of the same job is a copy of it
    _judged: dict[tuple[str, ...], bytes] | None = None

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
        composed = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        if self._judged is None:
            self._judged = {}
        self._judged[tuple(overrides)] = pickle.dumps(composed)  # before judging reads it
        return composed

    @contextmanager
    def _launched_as_judged(self) -> Iterator[None]:
        """While an in-process launcher (Hydra's basic one) runs, its composition of a judged job is a copy of the
        one judged, not a second composition of the same overrides (a tenth of a second of each cell's start)."""
        assert self.hydra_context is not None
        loader, judged, master = self.hydra_context.config_loader, self._judged or {}, self.config
        compose = loader.load_sweep_config

        def load_sweep_config(master_config: Any, sweep_overrides: list[str]) -> Any:
            reused = as_launched(judged, master_config, sweep_overrides) if master_config is master else None
            return compose(master_config, sweep_overrides) if reused is None else reused

        loader.load_sweep_config = load_sweep_config
        try:
            yield
        finally:
            del loader.load_sweep_config

    def _launch(self, jobs: list[list[str]]) -> list[Any]:
        from trainbench.sweep import launchers

        assert self.launcher is not None
        at_a_time = max(1, launchers.prepare(self.launcher, len(jobs), self._cpus_per_cell))
        returns: list[Any] = []
        # Launchers that compose in other processes (joblib's workers, submitit's jobs) compose there as Hydra does.
        in_this_process = type(self.launcher).__name__ == "BasicLauncher"
        try:
            with (
                launchers.ctrl_c_for_the_sweep_alone(self.launcher),
                self._launched_as_judged() if in_this_process else nullcontext(),
            ):
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


# The settings the sweep's owner adds to a judged job for its launcher (trainbench.cell.order.launcher_override).
ADDED_AT_LAUNCH = "hydra.job.env_set."


def as_launched(judged: dict[tuple[str, ...], bytes], master_config: Any, overrides: list[str]) -> Any:
    """What Hydra's load_sweep_config(master_config, overrides) composes, made from the judged composition of the
    same job (a copy) when `overrides` are that job's plus settings of hydra.job.env_set alone: those applied and
    recorded as Hydra records them, with the runtime values Hydra reads at composition (working folder,
    hydra.job.env_copy, the sweep's resolver cache) read now. None where no judged job matches."""
    import os

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from omegaconf import open_dict

    for cut in range(len(overrides), -1, -1):
        found = judged.get(tuple(overrides[:cut]))
        if found is not None:
            break
    else:
        return None
    added = OverridesParser.create().parse_overrides(overrides[cut:])
    if any(not o.key_or_group.startswith(ADDED_AT_LAUNCH) or o.is_sweep_override() for o in added):
        return None
    sweep_config = pickle.loads(found)  # noqa: S301  (this process's own pickle)
    ConfigLoaderImpl._apply_overrides_to_config(added, sweep_config)  # noqa: SLF001  (Hydra's own, as it composes)
    for override in added:
        sweep_config.hydra.overrides.hydra.append(override.input_line)
    with open_dict(sweep_config.hydra):
        for key in sweep_config.hydra.job.env_copy:
            sweep_config.hydra.job.env_set[key] = os.environ[key]
    sweep_config.hydra.runtime.cwd = os.getcwd()
    OmegaConf.copy_cache(from_config=master_config, to_config=sweep_config)
    return sweep_config
