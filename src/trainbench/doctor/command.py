"""`trainbench doctor`'s command: run the planned sweeps into a store of its own, read the cells back, print one line
per check and the verdict, and write the runs as a `trainbench export` file.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from trainbench.doctor.checks import PEAK_FACTOR, POWER_LIMIT_W, TIMING_FACTOR, Cell, Finding, check_cell
from trainbench.doctor.declared import default_frameworks, facts, frameworks, installed_frameworks, title
from trainbench.doctor.plan import Sweep, plan

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CTRL_C = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        print(f"trainbench doctor: {message} (see trainbench doctor --help)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_INPUT)


def main(argv: Sequence[str]) -> int:
    """`trainbench doctor [--frameworks pytorch,tensorflow,mlx] [--out FOLDER]`."""
    parser = _Parser(
        prog="trainbench doctor",
        description="Run tiny cells of every installed framework and check that timing, memory, energy and "
        "the machine's name read sensibly; write the runs to a file to share.",
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(default_frameworks()),
        help=f"comma-separated, from {', '.join(frameworks())} (default: {','.join(default_frameworks())})",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="a new folder for the store, logs and export file (default: outputs/doctor/<date-time>)",
    )
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        selected, out = prepare(args.frameworks, args.out)
    except ValueError as error:
        return _bad(str(error))
    try:
        found = examine(selected, out)
    except KeyboardInterrupt:
        print("trainbench doctor: stopped", file=sys.stderr, flush=True)
        return EXIT_CTRL_C
    print_verdict(found)
    return EXIT_FAILED if found.failed else EXIT_OK


@dataclass(frozen=True)
class Examined:
    """What the doctor found: one finding per line of its verdict, the export file and its run count (None where
    no cell was recorded), the folder that holds its store and logs, and the seconds it took."""

    findings: tuple[Finding, ...]
    exported: tuple[Path, int] | None
    folder: Path
    seconds: float

    @property
    def failed(self) -> bool:
        return any(f.status == "FAIL" for f in self.findings)


def prepare(frameworks_text: str, out_text: str | None) -> tuple[list[str], Path]:
    """The frameworks to check (comma-separated names) and the new folder for the results, created; ValueError
    with the line that says what is wrong with either."""
    selected = [name.strip() for name in frameworks_text.split(",") if name.strip()]
    unknown = [name for name in selected if name not in frameworks()]
    if unknown or not selected:
        raise ValueError(
            f"--frameworks {frameworks_text!r}: choose from {', '.join(frameworks())}, e.g. --frameworks pytorch,mlx"
        )
    out = Path(out_text) if out_text else Path("outputs") / "doctor" / datetime.now().strftime("%Y-%m-%d-%H%M%S")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out_text}: already holds files; name a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"--out {out}: cannot create it ({error.strerror or error})") from None
    return list(dict.fromkeys(selected)), out.resolve()


def examine(selected: list[str], out: Path) -> Examined:
    """Run the cells of `selected` into a store in `out`, check what they recorded, export the runs."""
    from trainbench.measure import hardware

    began = time.perf_counter()
    host = hardware.host_tags()
    sweeps, notes = plan(selected, installed_frameworks(selected), host)
    uri = f"sqlite:///{out / 'mlflow.db'}"
    print(f"trainbench doctor: checking {_machine(host)}; results in {_shown(out)}/", flush=True)
    logs: dict[str, str] = {}
    for sweep in sweeps:
        log = out / f"{sweep.device}-cells.log"
        logs[sweep.device] = _shown(log)
        names = ", ".join(title(name) for name in sweep.frameworks)
        print(f"  running {sweep.device.upper()} cells: {names} ...", end="", flush=True)
        started = time.perf_counter()
        status = _run_sweep(sweep, out, uri, log)
        print(f" {time.perf_counter() - started:.0f} s", flush=True)
        if status == EXIT_CTRL_C:
            raise KeyboardInterrupt
    cells = _recorded_cells(uri) if sweeps else []
    findings = list(notes)
    for cell in sorted(cells, key=_order):
        findings += check_cell(cell, logs.get(cell.device, ""), host.get("hw.gpu_vendor"))
    ran = {(c.framework, c.device) for c in cells}
    for sweep in sweeps:  # a sweep that stopped before recording a cell: the last line of its log says why
        why = _last_line(out / f"{sweep.device}-cells.log")
        for name in sweep.frameworks:
            if (name, sweep.device) not in ran:
                subject = f"{title(name)} {sweep.device.upper()}"
                findings.append(Finding("FAIL", subject, "run", f"no run recorded ({why}); see {logs[sweep.device]}"))
    if not sweeps:
        first = facts(next(iter(frameworks().values())))  # the first the doctor lists, by the frameworks' own rank
        findings.append(Finding("FAIL", "trainbench", "run", f"no framework installed to check: {first.install}"))
    exported = _export(uri, out, host) if cells else None
    return Examined(tuple(findings), exported, out, time.perf_counter() - began)


def _run_sweep(sweep: Sweep, out: Path, uri: str, log: Path) -> int:
    """The cells through the Python API (the command line's own code, in this process), its output into `log`; its
    exit status.
    Its comparison page and Hydra's multirun/ land beside its store."""
    from trainbench.api.errors import BadInput, SweepError
    from trainbench.api.sweeps import run

    with log.open("w") as output:
        try:
            return run(sweep.overrides(), tracking_uri=uri, output=output, cwd=out).exit_status
        except BadInput:  # its line is in the log, whose last line the verdict quotes
            return EXIT_BAD_INPUT
        except SweepError:
            return EXIT_FAILED
        except KeyboardInterrupt:  # the sweep got the Ctrl-C too, stopped its cells and closed their runs
            return EXIT_CTRL_C


def _recorded_cells(uri: str) -> list[Cell]:
    from trainbench.store import tracking
    from trainbench.store.runs import search_all

    client = tracking.open_store(uri)
    experiment = client.get_experiment_by_name("trainbench")
    if experiment is None:
        return []
    runs = search_all(client, [experiment.experiment_id], "tags.`trainbench.kind` = 'cell'")
    return [Cell.of(run) for run in runs]


def _export(uri: str, out: Path, host: Mapping[str, str]) -> tuple[Path, int] | None:
    """The store's runs as a `trainbench export` file (trainbench.api.export), read back to check it: (path, runs)."""
    from trainbench.api.stores import export
    from trainbench.store.sharing import file_format

    path = out / f"{datetime.now():%Y-%m-%d}-doctor-{_slug(_primary_label(host))}.json"
    export(path, tracking_uri=uri)
    return path, len(file_format.load(path).runs)


def print_verdict(found: Examined) -> None:
    findings, exported, seconds = found.findings, found.exported, found.seconds
    width = max((len(f.subject) for f in findings), default=10)
    print()
    for finding in findings:
        print(f"{finding.status:5} {finding.subject:{width}}  {finding.check:8}  {finding.text}")
    print()
    print(
        f"Tolerances: per-step timing figures agree within x{TIMING_FACTOR:g}; none faster than "
        f"{PEAK_FACTOR:g} x the device's peak; power within 0-{POWER_LIMIT_W['apple']:g} W per Apple chip, "
        f"0-{POWER_LIMIT_W['nvml']:g} W per GPU or CPU package."
    )
    if exported:
        path, runs = exported
        print(
            f"Share: {_shown(path)} ({runs} runs; no user, host or absolute path in it). To contribute it, copy "
            "it into results/contributed/ and open a pull request with a line for it in results/contributed/README.md."
        )
    fails, warns = (sum(f.status == s for f in findings) for s in ("FAIL", "warn"))
    verdict = "FAIL" if fails else "ok"
    print(f"Verdict: {verdict} ({fails} FAIL, {warns} warn) in {seconds:.0f} s")


def _order(cell: Cell) -> tuple[int, int]:
    order = list(frameworks())
    framework = order.index(cell.framework) if cell.framework in order else len(order)
    return framework, 0 if cell.device == "gpu" else 1


def _machine(host: Mapping[str, str]) -> str:
    from trainbench.measure import hardware

    cpu = hardware.label("cpu", dict(host))
    return cpu if not host.get("hw.gpu_vendor") else f"{_primary_label(host)} and {cpu}"


def _primary_label(host: Mapping[str, str]) -> str:
    """The GPU's hw.label where there is one, else the CPU's."""
    from trainbench.measure import hardware

    vendor = host.get("hw.gpu_vendor")
    return hardware.label("cpu" if not vendor else "mps" if vendor == "apple" else "cuda", dict(host))


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "it printed nothing"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


def _shown(path: Path) -> str:
    """A path as the user finds it: relative to the working folder when inside it."""
    from trainbench.store.tracking import private

    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return private(str(path))


def _bad(message: str) -> int:
    print(f"trainbench doctor: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT
