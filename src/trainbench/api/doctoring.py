"""`trainbench doctor` from Python: does trainbench measure this machine right? The same cells, checks and export
file as the command (trainbench.doctor), with the verdict's lines as typed findings."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainbench.api.errors import BadInput

if TYPE_CHECKING:
    from trainbench.doctor.checks import Finding


@dataclass(frozen=True)
class DoctorResult:
    passed: bool  # no check FAILed (the command's exit 0)
    findings: tuple[Finding, ...]  # one per verdict line: status (ok, warn, FAIL), subject, check, text
    folder: Path  # the doctor's own store, the cells' logs and the export file
    export_file: Path | None  # the runs as a `trainbench export` file to share; None where no cell was recorded
    exported_runs: int
    seconds: float


def run_doctor(
    frameworks: Sequence[str] | None = None,
    *,
    out: str | Path | None = None,
    output: Literal["show", "quiet"] = "show",
) -> DoctorResult:
    """Run `trainbench doctor` (`--frameworks`, by default every installed one; `--out`, by default
    outputs/doctor/<date-time>); output="show" prints its lines as the command does. Raises BadInput for an
    unknown framework or an `out` that holds files, before anything runs."""
    from trainbench.doctor.command import examine, prepare, print_verdict
    from trainbench.doctor.declared import default_frameworks

    if output not in ("show", "quiet"):
        raise BadInput(f"output={output!r}: choose show or quiet")
    names = ",".join(frameworks if frameworks is not None else default_frameworks())
    try:
        selected, folder = prepare(names, None if out is None else str(out))
    except ValueError as error:
        raise BadInput(f"doctor: {error}") from None
    shown = contextlib.nullcontext() if output == "show" else contextlib.redirect_stdout(io.StringIO())
    with shown:
        found = examine(selected, folder)
        print_verdict(found)
    path, runs = found.exported or (None, 0)
    return DoctorResult(not found.failed, found.findings, found.folder, path, runs, found.seconds)
