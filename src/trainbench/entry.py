"""What the command line and trainbench.run() share to start a run: the refusal of bad input (one line, exit 2,
handed to trainbench.run() and to `mlflow run`), and Hydra's main around the sweep's job. Below both
trainbench.cli and trainbench.api, which import it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

EXIT_BAD_INPUT = 2


def fail(message: str) -> int:
    from trainbench.store.mlflow_project import record_refusal
    from trainbench.store.tracking import private
    from trainbench.sweep import handoff
    from trainbench.untrusted import for_terminal

    print(f"trainbench: {for_terminal(private(message))}", file=sys.stderr, flush=True)  # one line, whatever it quotes
    handoff.write_refusal(private(message))  # for trainbench.run(), which raises it as trainbench.BadInput
    record_refusal(message)  # under `mlflow run`: the run it names says why it failed
    return EXIT_BAD_INPUT


def hydra_entry() -> Callable[[], Any]:
    from trainbench.stops import exit_quietly_on_stop

    with exit_quietly_on_stop():  # Ctrl-C while Hydra loads: exit 130, no traceback
        import hydra

        import trainbench.config.plugins  # noqa: F401  (the schemas a composed cell names)
        from trainbench.config import CONF_DIR
        from trainbench.sweep.job import run_job

    return hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(run_job)
