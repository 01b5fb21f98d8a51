"""Where the test suite's CPU goes: each test's CPU seconds, its own and its child processes' (sweeps, cells,
servers), as a pytest plugin, and the sums per file. On a 2-core machine the suite is CPU-bound, so CPU seconds,
not wall seconds, say what a change to a test saves.

    PYTHONPATH=benchmarks pytest -p suite_cpu            # appends one line per test to suite-cpu.tsv
    python benchmarks/suite_cpu.py suite-cpu.tsv [N]     # the N files (default 30) and tests that cost most

A child is counted once it has been waited for (RUSAGE_CHILDREN): a sweep's cell processes are in the sweep's,
and a module fixture's processes in the first test that uses it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

OUT = os.environ.get("TRAINBENCH_SUITE_CPU", "suite-cpu.tsv")


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    own, children = _cpu()
    started = time.monotonic()
    yield
    own_after, children_after = _cpu()
    with open(OUT, "a") as out:
        out.write(
            f"{item.nodeid}\t{own_after - own:.2f}\t{children_after - children:.2f}\t{time.monotonic() - started:.2f}\n"
        )


def main(argv: list[str]) -> int:
    path, shown = argv[0], int(argv[1]) if len(argv) > 1 else 30
    with open(path) as lines:
        rows = [line.rstrip("\n").split("\t") for line in lines]
    tests = {nodeid: float(own) + float(children) for nodeid, own, children, _ in rows}
    files: dict[str, float] = {}
    for nodeid, cpu in tests.items():
        name = nodeid.split("::")[0]
        files[name] = files.get(name, 0.0) + cpu
    print(f"{len(tests)} tests, {sum(tests.values()):,.0f} CPU s")
    for name, cpu in sorted(files.items(), key=lambda item: -item[1])[:shown]:
        print(f"{cpu:8.1f}  {name}")
    print()
    for nodeid, cpu in sorted(tests.items(), key=lambda item: -item[1])[:shown]:
        print(f"{cpu:8.1f}  {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
