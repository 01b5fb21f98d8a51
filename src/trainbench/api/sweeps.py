"""trainbench.run: a sweep (or one cell) with the command line's overrides, its cells typed as MLflow recorded them.

The sweep runs in the caller's process up to its cells' own processes, through the same function as the command
line (run_command_line: the checks, Hydra, trainbench's sweeper): a dry run or bad input starts no process at all.
What a command line's run changes in its process (signal handlers, environment, sys.argv and the standard
streams, Hydra's current job) is put back as it was when the call returns; a framework the caller imported stays
out of the cells, each a fresh Python. Signal handlers can be set in the main thread alone, so a call from another
thread runs the same command line as a child process (`python -m trainbench.cli run OVERRIDES...`). The sweep
hands its cells over as it ends (trainbench.sweep.handoff); figures, intervals and setting ids are then read
from the MLflow store, as every screen reads them.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from trainbench.api.errors import BadInput, SweepError
from trainbench.locations import module_command

EXIT_CTRL_C = 130
Output = Literal["show", "quiet"] | IO[Any]


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep as its summary row and its MLflow run record it."""

    index: int  # 1-based, in the sweep's order
    name: str  # the run's name: {framework}-{model}-{backend}-bs{batch_size}
    outcome: str  # finished, failed, oom, unavailable, timeout, killed, skipped, not started, ...
    reason: str | None  # why it did not finish (or why it was skipped)
    samples_per_s: float | None  # the headline throughput (None for a matmul cell or one that did not finish)
    ci95: float | None  # its 95% half-width, where the run recorded one (samples_per_s_ci95)
    repeats: int | None  # the timed repeats (steady epochs, blocks) that made samples_per_s
    noisy: bool  # the run was tagged trainbench.noisy
    peak_tflops: float | None  # a matmul cell's figure
    run_id: str | None  # this cell's MLflow run in this sweep (a skipped cell's is a record of the skip)
    result_run_id: str | None  # the run whose figures these are: run_id, or the earlier run a skip points to
    setting_id: str | None  # the comparison setting (what `sweep.dry_run=true` lists; equal ids, same quantity)

    @property
    def figure(self) -> str:
        """samples/s as every screen quotes it: `1,403 ± 41.2 (95%, 2 repeats)` ("" where there is none)."""
        from trainbench.figures import number, quoted

        if self.peak_tflops is not None:  # as the sweep's summary table quotes a matmul cell
            return f"{number(self.peak_tflops)} TFLOPS peak"
        if self.samples_per_s is None:
            return ""
        return quoted(self.samples_per_s, self.ci95, self.repeats, self.noisy)

    @property
    def finished(self) -> bool:
        return self.outcome in ("finished", "skipped")


@dataclass(frozen=True)
class SweepResult:
    """What one `trainbench.run` did."""

    exit_status: int  # the command line's: 0 every cell finished, 1 some did not, 128 + signal when stopped
    outcome: str  # finished, failed (some cell did not finish), killed (stopped), planned (sweep.dry_run)
    cells: tuple[Cell, ...]
    tracking_uri: str | None  # the store it recorded in (None for a dry run)
    experiment_id: str | None
    sweep_id: str | None  # trainbench.sweep_id on every cell's run
    sweep_run_id: str | None  # the sweep's parent run (two or more cells; None for one cell or a dry run)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def cell(self) -> Cell:
        """The one cell of a one-cell sweep."""
        if len(self.cells) != 1:
            raise ValueError(f"this sweep has {len(self.cells)} cells: read .cells")
        return self.cells[0]

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The runs holding the cells' figures (a skipped cell's earlier run), as compare() takes them."""
        return tuple(c.result_run_id for c in self.cells if c.result_run_id and c.outcome in ("finished", "skipped"))


def run(
    overrides: Sequence[str] = (),
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    output: Output = "show",
    cwd: str | os.PathLike[str] | None = None,
) -> SweepResult:
    """Run the cells `overrides` make (the command line's key=value overrides, sweep syntax included), each in its
    own process, recorded in MLflow; return when the sweep has ended.

    tracking_uri: the store, for this call (as $MLFLOW_TRACKING_URI; else that variable, else the project's store;
    a tracking.uri=... override comes first). experiment: tracking.experiment.
    output: "show" prints the sweep's lines as the command line does; "quiet" prints nothing; an open file takes
    them all (its stdout and stderr, in order).
    cwd: where the sweep runs (outputs/compare/ and Hydra's multirun/ are written there); the caller's by default.
    Raises BadInput for bad overrides (nothing recorded), SweepError when the sweep ended without handing back its
    cells. A stop (Ctrl-C, SIGTERM, SIGHUP) stops the sweep as on the command line, then reaches the caller as
    that signal would have (Ctrl-C: KeyboardInterrupt)."""
    argv = _command_line(overrides, experiment)
    if threading.current_thread() is threading.main_thread():
        status, payload = _run_here(argv, output, cwd, tracking_uri)
    else:  # signal handlers can be set in the main thread alone: the sweep takes a process of its own
        status, payload = _run_in_a_process(argv, output, cwd, tracking_uri)
    if payload is not None and "refused" in payload:
        raise BadInput(payload["refused"])
    if status == EXIT_CTRL_C:  # the sweep recorded its cells as stopped and printed its summary
        raise KeyboardInterrupt
    if payload is None:
        if status == 2:
            raise BadInput("the command line was refused (exit 2); its output says why")
        raise SweepError(f"the sweep ended with exit status {status} before handing back its cells")
    return _sweep_result(status, payload)


def run_command_line(argv: Sequence[str], hydra_main: Callable[[], Any] | None = None) -> int:
    """The command line's run in this process (`trainbench OVERRIDES...`, `python src/run.py`, trainbench.run): check
    the flags and overrides (bad input: one line, exit 2), then hand them to Hydra, whose trainbench sweeper owns
    the sweep and starts each cell's process. Returns the exit status; leaves the process's state as a command
    line does (its signal handlers, environment, sys.argv): trainbench.run() restores the caller's around it."""
    from trainbench.config import ConfigError
    from trainbench.config.command_line import (
        absolute_config_path,
        check_command_line,
        check_shell_completion,
        flags_first,
        hydra_mode_known,
        parse_args,
        refuse_unknown_flags,
    )
    from trainbench.entry import fail, hydra_entry
    from trainbench.locations import folder_off_every_import_path
    from trainbench.measure.timeline import mark
    from trainbench.store.tracking import quiet_logs

    # `model=mlp -m x=1`: argparse takes overrides only in one run, after the flags
    argv = absolute_config_path(flags_first(list(argv)))
    sys.argv = [sys.argv[0], *argv]  # Hydra's main reads them there
    if any(a.startswith("hydra.verbose=") and a.split("=", 1)[1].lower() not in ("false", "0", "") for a in argv):
        os.environ["TRAINBENCH_VERBOSE"] = "1"  # every cell's process inherits it
    quiet_logs()
    folder_off_every_import_path()  # trainbench.run() reaches here without the console (the caller's env is restored)
    _export_sources()
    mode = None  # as composed from the command line, where that is what Hydra would compose
    try:
        refuse_unknown_flags(argv)
        args = parse_args(argv)
        if args.shell_completion:  # `-sc install=bash`, `-sc query=bash`: Hydra's words, not settings
            check_shell_completion(args)
        else:
            mode = check_command_line(args)
    except ConfigError as error:
        return fail(str(error))
    except SystemExit as error:  # argparse ends --version this way, after printing it
        return int(error.code or 0)
    except KeyboardInterrupt:
        return EXIT_CTRL_C
    mark("parent: command line checked")
    try:
        with hydra_mode_known(mode):
            (hydra_main or hydra_entry())()
    except SystemExit as finished:  # the sweeper ends every sweep this way, with its status
        return int(finished.code or 0)
    except KeyboardInterrupt:
        return EXIT_CTRL_C
    return 0  # --help, --cfg ...: Hydra printed and returned


def _export_sources() -> None:
    """From a checkout, put src/ on PYTHONPATH: launchers that start fresh Python processes for the cells'
    jobs (submitit, Ray) must import trainbench and its Hydra plugin there too."""
    from trainbench.config import PROJECT_ROOT

    sources = PROJECT_ROOT / "src"
    if (sources / "trainbench").is_dir():
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(sources) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(sources), *paths])


def _command_line(overrides: Sequence[str], experiment: str | None) -> list[str]:
    if isinstance(overrides, str):
        raise TypeError('overrides is a list of key=value strings, e.g. ["model=mlp", "batch_size=32,64"]')
    argv = [str(o) for o in overrides]
    flags = [a for a in argv if a.startswith("-") and a not in ("-m", "--multirun")]
    if flags:
        raise BadInput(
            f"trainbench.run() takes key=value overrides, not {flags[0]}: the command line's flags "
            "(--help, --cfg, -sc ...) are for `trainbench` itself"
        )
    if experiment is not None:
        argv.append(f"tracking.experiment={_hydra_string(experiment)}")
    return argv


def _hydra_string(value: str) -> str:
    """Quoted, so that `:`, `=` or `,` in a name stays one value (a comma would otherwise make a sweep)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _run_here(argv: list[str], output: Output, cwd: Any, tracking_uri: str | None) -> tuple[int, dict[str, Any] | None]:
    """The sweep in this process, up to the cells' own processes; the caller's state as it was afterwards."""
    from trainbench.sweep import handoff

    with _callers_state_kept(), _output_to(output):
        if cwd is not None:
            os.chdir(cwd)
        # The run `mlflow run` made is for the command line it started; a sweep started from Python has its own.
        os.environ.pop("MLFLOW_RUN_ID", None)
        if tracking_uri is not None:  # as $MLFLOW_TRACKING_URI: the store is no override, and no record lists it
            os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
        with handoff.collected() as handed:
            status = run_command_line(argv)
    stop = status - 128
    if stop in (signal.SIGTERM, signal.SIGHUP):  # the caller's own handler (by default: it ends) hears it now
        signal.raise_signal(stop)
    return status, handed[0] if handed else None


@contextmanager
def _callers_state_kept() -> Iterator[None]:
    """What a command line's run changes in its process, as it was: the environment, the folder, sys.argv,
    sys.stdout/sys.stderr (wrapped to redact passwords), the stop signals' handlers, logging's record factory
    and Hydra's current job."""
    import logging

    from hydra.core.hydra_config import HydraConfig

    from trainbench.stops import STOP_SIGNALS
    from trainbench.store.tracking import redaction

    environment, folder, argv, words = dict(os.environ), os.getcwd(), sys.argv, list(sys.argv)
    streams = sys.stdout, sys.stderr
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    records, redacted = logging.getLogRecordFactory(), redaction._records_redacted  # noqa: SLF001
    job = HydraConfig.instance().cfg
    try:
        yield
    finally:
        for key in set(os.environ) - set(environment):  # changed alone: the caller's other threads read it too
            del os.environ[key]
        for key, value in environment.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        os.chdir(folder)
        sys.argv = argv  # the caller's own list, as it was
        sys.argv[:] = words
        sys.stdout, sys.stderr = streams
        for sig, handler in handlers.items():
            if handler is not None:  # (None: set outside Python, and left so)
                signal.signal(sig, handler)
        logging.setLogRecordFactory(records)
        redaction._records_redacted = redacted  # noqa: SLF001
        HydraConfig.instance().cfg = job


@contextmanager
def _output_to(output: Output) -> Iterator[None]:
    """The sweep's lines and its cells' (which write to file descriptors 1 and 2) where `output` says."""
    if output == "show" and [_fd_of(sys.stdout), _fd_of(sys.stderr)] == [1, 2]:
        yield  # a terminal or a file: the sweep writes there, as the command line does
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    pumps: list[threading.Thread] = []
    if output == "quiet":
        targets = [os.open(os.devnull, os.O_WRONLY)] * 2
    elif not isinstance(output, str):  # a log file of the caller's: stdout and stderr in order
        output.flush()
        targets = [os.dup(output.fileno())] * 2
    else:  # sys.stdout is no file (a notebook's, pytest's): the lines are passed on to it as they come
        pipes = [os.pipe(), os.pipe()]
        streams = (sys.stdout, sys.stderr)
        pumps = [_pump(os.fdopen(r, errors="replace"), to) for (r, _), to in zip(pipes, streams, strict=True)]
        targets = [w for _, w in pipes]
    try:
        for fd, target in zip((1, 2), targets, strict=True):
            os.dup2(target, fd)
        for target in set(targets):
            os.close(target)  # descriptors 1 and 2 hold them now
        with (
            open(1, "w", buffering=1, closefd=False, errors="replace") as out,
            open(2, "w", buffering=1, closefd=False, errors="replace") as err,
        ):
            sys.stdout, sys.stderr = out, err
            yield
    finally:
        for fd, previous in zip((1, 2), saved, strict=True):
            os.dup2(previous, fd)  # closes the pipes' last writing ends: the pumps end
            os.close(previous)
        for pump in pumps:
            pump.join()


def _run_in_a_process(
    argv: list[str], output: Output, cwd: Any, tracking_uri: str | None
) -> tuple[int, dict[str, Any] | None]:
    """`python -m trainbench.cli run ARGV...` (run_command_line in a process of its own) with this interpreter and
    this trainbench; its exit status and what it handed back."""
    from trainbench.sweep import handoff

    sources = str(Path(__file__).resolve().parents[1])  # holds trainbench and its Hydra plugin (hydra_plugins)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != sources]
    with tempfile.TemporaryDirectory(prefix="trainbench-run-") as folder:
        handed = Path(folder) / "result.json"
        env = {**os.environ, handoff.ENV: str(handed), "PYTHONPATH": os.pathsep.join([sources, *paths])}
        env.pop("MLFLOW_RUN_ID", None)  # as in _run_here
        if tracking_uri is not None:
            env["MLFLOW_TRACKING_URI"] = tracking_uri
        command = module_command("trainbench.cli", "run", *argv)
        start = functools.partial(subprocess.Popen, command, cwd=cwd, env=env, stdin=subprocess.DEVNULL)
        if output == "quiet":
            status = _wait(start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        elif not isinstance(output, str):  # a log file of the caller's
            output.flush()
            status = _wait(start(stdout=output, stderr=subprocess.STDOUT))
        else:
            piped = start(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
            assert piped.stdout is not None and piped.stderr is not None
            status = _wait(piped, [_pump(piped.stdout, sys.stdout), _pump(piped.stderr, sys.stderr)])
        return status, handoff.read(handed)


def _fd_of(stream: IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _pump(source: IO[str], target: IO[str]) -> threading.Thread:
    def forward() -> None:
        for line in source:
            target.write(line)
            target.flush()
        source.close()

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    return thread


def _wait(process: subprocess.Popen[Any], pumps: Sequence[threading.Thread] = ()) -> int:
    """The sweep's exit status. A stop here is passed on to the sweep (it records its cells as stopped, prints
    its summary) and the exit status says it, so that nothing it started outlives the call."""
    while True:
        try:
            status = process.wait()
            break
        except KeyboardInterrupt:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # (a terminal's Ctrl-C reached it already: a second is the same)
    for pump in pumps:
        pump.join()
    return status


def _sweep_result(status: int, payload: Mapping[str, Any]) -> SweepResult:
    uri = payload.get("tracking_uri")
    runs = _runs(uri, [c.get("run_id") for c in payload["cells"]]) if uri else {}
    cells = tuple(_cell(c, runs) for c in payload["cells"])
    if payload.get("dry_run"):
        outcome = "planned"
    else:
        outcome = "finished" if status == 0 else "killed" if status >= 128 else "failed"
    return SweepResult(
        status, outcome, cells, uri, payload.get("experiment_id"), payload.get("sweep_id"), payload.get("sweep_run_id")
    )


def _runs(uri: str, run_ids: Iterable[str | None]) -> dict[str, Any]:
    """The cells' runs, and for a skipped cell the earlier run that holds its result, as MLflow has them."""
    from trainbench.store import tracking

    client = tracking.client(uri)
    found: dict[str, Any] = {}
    for run_id in run_ids:
        if not run_id:
            continue
        found[run_id] = client.get_run(run_id)
        earlier = found[run_id].data.tags.get("trainbench.result_run_id")
        if earlier and earlier not in found:
            found[earlier] = client.get_run(earlier)
    return found


def _cell(handed: Mapping[str, Any], runs: Mapping[str, Any]) -> Cell:
    from trainbench import figures
    from trainbench.store.setting import setting, setting_id

    run_id = handed.get("run_id")
    record = runs.get(run_id) if run_id else None
    held = record.data.tags.get("trainbench.result_run_id") if record is not None else None
    result = runs.get(held) if held else record
    ci95 = repeats = None
    noisy = False
    setting_id_ = handed.get("setting_id")
    speed = handed.get("samples_per_s")
    if result is not None:
        metrics, params, tags = result.data.metrics, result.data.params, result.data.tags
        speed = metrics.get("samples_per_s", speed)
        if speed is not None:
            ci95, repeats = figures.ci95(metrics, "samples_per_s"), figures.repeats(params, "samples_per_s")
        noisy = figures.noisy(tags)
        if params:  # what ran (batch_size=max's batch, device.count=all's devices), not what was asked
            setting_id_ = setting_id(setting(params, tags))
    return Cell(
        index=int(handed["index"]),
        name=str(handed["name"]),
        outcome=str(handed["outcome"]),
        reason=handed.get("reason"),
        samples_per_s=speed,
        ci95=ci95,
        repeats=repeats,
        noisy=noisy,
        peak_tflops=handed.get("peak_tflops"),
        run_id=run_id,
        result_run_id=held or run_id,
        setting_id=setting_id_,
    )
