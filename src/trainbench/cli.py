"""What `python src/run.py` does around Hydra: validate every cell first, open the session (store,
sweep parent run), let Hydra run the jobs, then print the summary and exit with the sweep's status.

Exit status: 0 every cell finished; 1 some cell did not (failed, unavailable); 2 bad input (config,
tracking store), nothing run; 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from trainbench import plan as planning
from trainbench.config import ConfigError, validate
from trainbench.session import EXIT_OK, Session, fail
from trainbench.tracking import TrackingUnavailable

_session: Session | None = None


def main(hydra_main: Callable[[], Any], argv: list[str] | None = None) -> int:
    global _session
    argv = sys.argv[1:] if argv is None else argv
    if planning.is_informational(planning.parse_args(argv)):
        hydra_main()  # --help, --cfg job, --info ...: Hydra prints, nothing runs
        return EXIT_OK
    try:
        plan = planning.plan(argv)
        _session = Session(plan.cells, plan.multirun, plan.overrides)
    except (ConfigError, TrackingUnavailable) as error:
        return fail(str(error))
    try:
        hydra_main()
    except KeyboardInterrupt:
        _session.interrupted()
    code = _session.finish()
    _session = None
    return code


def run_job(cfg: DictConfig) -> None:
    """Hydra's task function: one composed cell, run in its own process, recorded in MLflow."""
    from hydra.core.hydra_config import HydraConfig

    if _session is None:
        raise RuntimeError("run trainbench through `python src/run.py` (trainbench.cli.main)")
    _session.run(validate(cfg), list(HydraConfig.get().overrides.task))
