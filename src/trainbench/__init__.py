"""trainbench: how fast does training run on this machine? From Python: `trainbench.run([...])` runs a sweep and
returns its typed results, `trainbench.compare(...)` where its runs stand, `trainbench.run_suite()` the standard suite,
`trainbench.run_doctor()` its self-check, `trainbench.results()`, `.export()`, `.import_runs()`, `.write_report()`,
`.import_references()`, `.download()`
and `.choices()` what the subcommands print (trainbench.api, docs/python-api.md).

The API is loaded on first use: every process of a sweep imports this package, and only a caller needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainbench.api import (
        BadInput,
        Cell,
        Choice,
        Comparison,
        DoctorResult,
        Downloaded,
        Exported,
        Imported,
        Machine,
        ReferenceRun,
        References,
        Report,
        ResultRow,
        Results,
        StoreError,
        SuitePlan,
        SweepError,
        SweepResult,
        choices,
        compare,
        download,
        export,
        import_references,
        import_runs,
        results,
        run,
        run_doctor,
        run_suite,
        suite_plan,
        write_report,
    )

__all__ = [
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
    "choices",
    "compare",
    "download",
    "export",
    "import_runs",
    "import_references",
    "results",
    "run",
    "run_doctor",
    "run_suite",
    "suite_plan",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from trainbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainbench' has no attribute {name!r}")
