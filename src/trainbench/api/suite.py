"""trainbench.run_suite: the standard suite (trainbench.suite: fixed, versioned workloads other machines ran), as one
sweep of this machine's class, run as trainbench.run runs any sweep.

`trainbench suite ARGS` checks its arguments and makes its command line with suite_command_line, then runs it as
`trainbench OVERRIDES...` runs a command line (run_command_line); trainbench.run_suite() runs the same through
trainbench.run(). Both mark the sweep's processes as the suite's (trainbench.suite.ENV), so that every cell's
run carries trainbench.suite and trainbench.suite_version.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from trainbench.api.errors import BadInput
from trainbench.api.sweeps import Output, SweepResult, run


@dataclass(frozen=True)
class SuitePlan:
    """What `trainbench suite ARGS` runs: the suite's version, the device class and the sweep's command line."""

    name: str  # trainbench.suite: "standard"
    version: int  # trainbench.suite_version: rows of two versions never share a chart
    device_class: str  # cpu, gpu or multi_gpu: which preset runs
    workloads: tuple[str, ...]  # the workloads (conf/suite_cell/ names) the class's preset runs
    command_line: tuple[str, ...]  # the preset first, then the overrides as given

    @property
    def line(self) -> str:
        """The line the command prints first (on stderr)."""
        return f"trainbench suite: {self.name} v{self.version}, {self.command_line[0].split('=', 1)[1]}"


def suite_plan(overrides: Sequence[str] = ()) -> SuitePlan:
    """The suite's sweep for `overrides` (device=gpu, device.count=2, tracking.uri=..., sweep.dry_run=true,
    suite_cell=A,B for some of the class's workloads). Raises BadInput for what would change its workloads
    (experiment=, precision=, a workload not of the class)."""
    import trainbench.suite as suite

    if isinstance(overrides, str):
        raise TypeError('overrides is a list of key=value strings, e.g. ["data=cifar10", "data.root=data"]')
    argv = [f"+{a}" if a.startswith("suite_cell=") else a for a in overrides]
    gpus = suite.nvidia_gpus()
    chosen = suite.device_class(argv, gpus)
    problem = suite.refusal(argv, chosen, gpus)
    if problem:
        raise BadInput(problem)
    named = [a.split("=", 1)[1].split(",") for a in argv if a.startswith("+suite_cell=")]
    workloads = tuple(named[-1]) if named else tuple(suite.workloads(chosen))
    line = suite.command_line(argv, gpus)
    return SuitePlan(suite.SUITE_NAME, suite.SUITE_VERSION, chosen, workloads, tuple(line))


@contextmanager
def as_the_suite() -> Iterator[None]:
    """The processes started meanwhile run as part of the suite (their runs carry its tags)."""
    import trainbench.suite as suite

    before = os.environ.get(suite.ENV)
    os.environ[suite.ENV] = suite.tag_value()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(suite.ENV, None)
        else:
            os.environ[suite.ENV] = before


def run_suite(
    overrides: Sequence[str] = (),
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    output: Output = "show",
    cwd: str | os.PathLike[str] | None = None,
) -> SweepResult:
    """Run the standard suite for this machine's class (`trainbench suite OVERRIDES...`): the arguments are
    trainbench.run's and suite_plan's. Returns the sweep's SweepResult; compare(result) then gives each workload
    against every machine that ran it."""
    plan = suite_plan(overrides)
    if output == "show":
        print(plan.line, file=sys.stderr, flush=True)
    elif not isinstance(output, str):
        output.write(plan.line + "\n")
    with as_the_suite():
        return run(plan.command_line, tracking_uri=tracking_uri, experiment=experiment, output=output, cwd=cwd)
