"""The command line: `python src/run.py ...` and the installed `trainbench` command.

    trainbench [OVERRIDES...]            run cells (the same as python src/run.py; sweeps are multiruns)
    trainbench list models|presets|...   what can be chosen
    trainbench results [--experiment E]  the runs table of a store, in the terminal
    trainbench export -o runs.json       a store's cells and sweeps as one file (another machine imports it)
    trainbench import runs.json...       add exported runs to a store (again: nothing changes)
    trainbench doctor                    tiny cells of every installed framework: do timing, memory, energy read right?
    trainbench download data=cifar10     fetch a dataset's files now (needs network)

Before Hydra sees the command line it is checked here, so that bad input gets one line and exit 2, never
Hydra's multi-line error or a traceback. Then Hydra runs trainbench's sweeper, which owns the cells and
ends the process with the sweep's exit status (trainbench.runner.owner).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_CTRL_C = 130
LISTS = {
    "models": "model",
    "data": "data",
    "tasks": "task",
    "frameworks": "framework",
    "devices": "device",
    "precisions": "precision",
    "presets": "experiment",
    "optimizers": "optim",
}


def main(hydra_main: Callable[[], Any], argv: Sequence[str] | None = None) -> int:
    """Check the command line, then hand it to Hydra; return the exit status."""
    from trainbench.config import ConfigError
    from trainbench.config.compose import check_command_line, parse_args
    from trainbench.timeline import mark

    mark("parent: trainbench imported")
    argv = list(sys.argv[1:] if argv is None else argv)
    sys.argv = [sys.argv[0], *argv]
    if any(a.startswith("hydra.verbose=") and a.split("=", 1)[1].lower() not in ("false", "0", "") for a in argv):
        os.environ["TRAINBENCH_VERBOSE"] = "1"  # every cell's process inherits it
    from trainbench.tracking import quiet_logs

    quiet_logs()
    _export_sources()
    try:
        args = parse_args(argv)
        check_command_line(args)
    except ConfigError as error:
        return fail(str(error))
    except SystemExit as error:  # argparse: a flag Hydra does not know (it printed its usage line)
        return int(error.code or 0)
    except KeyboardInterrupt:
        return EXIT_CTRL_C
    mark("parent: command line checked")
    try:
        hydra_main()
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


def fail(message: str) -> int:
    from trainbench.tracking import private

    print(f"trainbench: {private(message)}", file=sys.stderr, flush=True)
    _discard_adopted_run()
    return EXIT_BAD_INPUT


def _discard_adopted_run() -> None:
    """Under `mlflow run`, the run it created before our command started holds nothing when the input is
    bad. `mlflow run` ends that run itself after we exit (and crashes if it is gone by then), so a small
    detached process waits for that and then deletes it: bad input leaves no empty FAILED run behind."""
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        return
    import subprocess

    from trainbench.tracking import resolve_tracking_uri

    subprocess.Popen(
        [sys.executable, "-m", "trainbench.runner.discard", resolve_tracking_uri(None), run_id],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"},
    )


def console() -> None:
    """The `trainbench` command (pip install .)."""
    try:
        _console(sys.argv[1:])
    except BrokenPipeError:  # `trainbench list models | head`: the reader is done, so are we
        sys.stderr.close()
        sys.exit(0)


def _console(argv: list[str]) -> None:
    if argv and argv[0] == "list":
        sys.exit(list_choices(argv[1:]))
    if argv and argv[0] == "results":
        sys.exit(results(argv[1:]))
    if argv and argv[0] == "download":
        sys.exit(download(argv[1:]))
    if argv and argv[0] == "export":
        sys.exit(export(argv[1:]))
    if argv and argv[0] == "import":
        sys.exit(import_runs(argv[1:]))
    if argv and argv[0] == "doctor":
        sys.exit(doctor(argv[1:]))
    if argv and argv[0] == "run":
        argv = argv[1:]
    sys.exit(main(hydra_entry(), argv))


def hydra_entry() -> Callable[[], Any]:
    from trainbench.stops import exit_quietly_on_stop

    with exit_quietly_on_stop():  # Ctrl-C while Hydra loads: exit 130, no traceback
        import hydra

        from trainbench.config import CONF_DIR
        from trainbench.runner.job import run_job

    return hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(run_job)


def list_choices(argv: list[str]) -> int:
    from trainbench.config import choices

    what = argv[0] if argv else ""
    if what not in LISTS:
        return fail(f"`trainbench list {what}`: choose one of {', '.join(LISTS)}")
    group = LISTS[what]
    for name in choices(group):
        print(f"{name:24} {_first_comment(group, name)}")
    return 0


def _first_comment(group: str, name: str) -> str:
    from trainbench.config import CONF_DIR

    for line in (CONF_DIR / group / f"{name}.yaml").read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
    return ""


def results(argv: list[str]) -> int:
    from trainbench import results_table

    return results_table.main(argv)


def export(argv: list[str]) -> int:
    from trainbench import sharing

    return sharing.export_main(argv)


def import_runs(argv: list[str]) -> int:
    from trainbench import sharing

    return sharing.import_main(argv)


def doctor(argv: list[str]) -> int:
    from trainbench import doctor

    return doctor.main(argv)


def download(argv: list[str]) -> int:
    """`trainbench download data=cifar10`: the dataset's files, fetched now into data.root."""
    from hydra import compose, initialize_config_dir

    from trainbench import data
    from trainbench.config import CONF_DIR, ConfigError
    from trainbench.config.compose import compose_or_explain
    from trainbench.tracking import private

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            composed = compose_or_explain(lambda job: compose(config_name="config", overrides=job), argv)
        cfg = composed.data
        from omegaconf import OmegaConf

        data_cfg = OmegaConf.to_object(cfg)
        missing = data.missing_files(data_cfg)
        if missing is None:
            data.check_files(data_cfg)
            print(f"{cfg.name}: nothing to download (already on disk and readable, or generated)")
            return 0
        archive = data.archive_on_disk(data_cfg)
        if archive is not None:
            print(f"{cfg.name}: extracting {private(str(archive))}", flush=True)
        data.download(data_cfg)
        data.check_files(data_cfg)
    except ConfigError as error:
        return fail(str(error))
    except data.DatasetError as error:
        return fail(str(error))
    print(f"{cfg.name}: {'extracted' if archive else 'downloaded'} into {private(str(missing[1]))}")
    return 0


if __name__ == "__main__":  # `python -m trainbench.cli`: what trainbench doctor runs where there is no src/run.py
    console()
