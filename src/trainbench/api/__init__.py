"""trainbench from Python: run a sweep (or one cell) with the command line's overrides and get typed results back;
read where a run stands against other machines, as the first screen shows it; run the standard suite; read, export
and import a store's runs; import published figures; fetch a dataset; list what can be chosen.

    import trainbench

    sweep = trainbench.run(["model=mlp", "batch_size=32,64"], tracking_uri="sqlite:///mlflow.db")
    for cell in sweep.cells:
        print(cell.name, cell.outcome, cell.figure, cell.run_id, cell.setting_id)
    for row in trainbench.compare(sweep, tracking_uri="sqlite:///mlflow.db"):
        print(row.title, [(m.machine, m.figure, m.speedup) for m in row.machines])

The command line is built on these functions: `trainbench OVERRIDES...` is run_command_line (which run() calls
too), `trainbench suite` runs suite_plan()'s command line the same way (run_suite() through run()), and
`trainbench results`, `export`, `import`, `report`, `references`, `download` and `list` parse their arguments,
call results(), export(), import_runs(), write_report(), import_references(), download() and choices(), and print
what they return; run_doctor() runs `trainbench doctor`'s cells and checks and returns its findings. The names are not the subcommands' where those are trainbench's own modules (trainbench.suite,
trainbench.references, trainbench.report). Bad input raises BadInput with the line the command line prints (its
exit 2), and nothing is recorded.

Light on purpose: `import trainbench` loads this package on first use, and nothing here imports MLflow or Hydra
until called.
"""

from trainbench.api.comparison import Comparison, Machine, compare
from trainbench.api.doctoring import DoctorResult, run_doctor
from trainbench.api.errors import DEFAULT_EXPERIMENT, BadInput, StoreError, SweepError
from trainbench.api.preparing import Downloaded, ReferenceRun, References, download, import_references
from trainbench.api.stores import (
    Choice,
    Exported,
    Imported,
    Report,
    ResultRow,
    Results,
    choices,
    export,
    import_runs,
    results,
    write_report,
)
from trainbench.api.suite import SuitePlan, as_the_suite, run_suite, suite_plan
from trainbench.api.sweeps import Cell, SweepResult, run, run_command_line

__all__ = [
    "DEFAULT_EXPERIMENT",
    "BadInput",
    "Cell",
    "Choice",
    "Comparison",
    "DoctorResult",
    "Downloaded",
    "Exported",
    "Imported",
    "Machine",
    "ReferenceRun",
    "References",
    "Report",
    "ResultRow",
    "Results",
    "StoreError",
    "SuitePlan",
    "SweepError",
    "SweepResult",
    "as_the_suite",
    "choices",
    "compare",
    "run_doctor",
    "download",
    "export",
    "import_runs",
    "import_references",
    "results",
    "run",
    "run_command_line",
    "run_suite",
    "suite_plan",
    "write_report",
]
