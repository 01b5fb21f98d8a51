"""The command line: `python src/run.py ...` and the installed `trainbench` command take the same arguments.

    trainbench [OVERRIDES...]            run cells (the same as python src/run.py; sweeps are multiruns)
    trainbench --version                 trainbench's version, then each framework's, MLflow's and Hydra's
    trainbench --help                    the subcommands, the groups and their options, the presets, examples
    trainbench list models|presets|...   what can be chosen
    trainbench results [tracking.uri=U]  the runs table of a store, in the terminal
    trainbench report / references       python src/report.py / python src/references.py
    trainbench export -o runs.json       a store's cells and sweeps as one file (another machine imports it)
    trainbench import runs.json...       add exported runs to a store (again: nothing changes)
    trainbench suite [device=gpu]        the standard suite: fixed workloads other machines ran (docs/comparing.md)
    trainbench doctor                    tiny cells of every installed framework: do timing, memory, energy read right?
    trainbench download data=cifar10     fetch a dataset's files now (needs network)

Every subcommand also takes the main command's key=value settings that concern it (tracking.uri=...,
tracking.experiment=...), turned into its own flags here (SUBCOMMAND_SETTINGS).

Before Hydra sees the command line it is checked here, so that bad input gets one line and exit 2, never
Hydra's multi-line error or a traceback. Then Hydra runs trainbench's sweeper, which owns the cells and
ends the process with the sweep's exit status (trainbench.sweep.owner).

The command line is built on the Python API (trainbench.api): a run is trainbench.api.run_command_line, which
trainbench.run() calls too; `suite` runs trainbench.api.suite_plan()'s command line the same way; and each other
subcommand but doctor (results, report, export, import, references, download, list) parses its arguments, calls the
API's function and prints what it returns.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from trainbench.entry import fail, hydra_entry

EXIT_CTRL_C = 130
HELP_FLAGS = ("-h", "--help")


def main(hydra_main: Callable[[], Any], argv: Sequence[str] | None = None) -> int:
    """Run a subcommand, or check the command line and hand it to Hydra; return the exit status."""
    from trainbench.measure.timeline import mark

    mark("parent: trainbench imported")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:])
    if argv and argv[0] == "run":
        argv = argv[1:]
    if "--version" in argv[: argv.index("--") if "--" in argv else len(argv)]:
        from trainbench.version import version_lines

        print("\n".join(version_lines()))
        return 0
    if any(a in HELP_FLAGS for a in argv):
        from trainbench.usage import help_page

        print(help_page())
        return 0
    from trainbench import api

    return api.run_command_line(argv, hydra_main)


def console(hydra_main: Callable[[], Any] | None = None) -> None:
    """The `trainbench` command (pip install .), and `python src/run.py` with its own Hydra main."""
    from trainbench import closed_output
    from trainbench.locations import folder_off_every_import_path
    from trainbench.store.tracking.redaction import redact_output

    redact_output()  # before any line: an override's value in Hydra's parse error, a shared file's run name
    folder_off_every_import_path()  # before any process is started

    try:
        _console(sys.argv[1:], hydra_main)
    except BrokenPipeError:  # `trainbench list models | head`: the reader is done, so are we (quietly, exit 141)
        closed_output.reader_gone(sys.stdout)
        sys.exit(closed_output.READER_GONE)


def _console(argv: list[str], hydra_main: Callable[[], Any] | None) -> None:
    from trainbench.closed_output import exit_status

    if argv and argv[0] in SUBCOMMANDS:  # before Hydra is imported: `trainbench list models` answers at once
        status = run_subcommand(argv[0], argv[1:])
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's exit
        sys.exit(exit_status(status))
    code = main(hydra_main or hydra_entry(), argv)
    from trainbench.process_end import end_now

    sys.stdout.flush()
    end_now(exit_status(code))  # the summary is out: the user need not wait for the interpreter's teardown


def list_choices(argv: list[str]) -> int:
    """`trainbench list [WHAT]`: trainbench.api.choices(), each choice and its first sentence (every list, each
    under a heading naming its group, where no WHAT is given)."""
    from trainbench import api
    from trainbench.usage import LISTS, terminal_width, wrapped

    if len(argv) > 1:
        return fail(f"`trainbench list {' '.join(argv)}`: list one of {', '.join(LISTS)}")
    try:
        found = api.choices(argv[0] if argv else None)
    except api.BadInput as error:
        return fail(str(error))
    width, indent = terminal_width(), "  " if not argv else ""
    out: list[str] = []
    for what, listed in found.items():
        if not argv:
            chosen = "+experiment=NAME" if LISTS[what] == "experiment" else f"{LISTS[what]}=NAME"
            out += [*([""] if out else []), f"{what} ({chosen}):"]
        for choice in listed:
            out += [indent + line for line in wrapped(choice.name, choice.description, 25, width - len(indent))]
    print("\n".join(out))
    return 0


def results(argv: list[str]) -> int:
    from trainbench import results_command

    return results_command.main(argv)


def export(argv: list[str]) -> int:
    from trainbench.store.sharing import commands

    return commands.export_main(argv)


def import_runs(argv: list[str]) -> int:
    from trainbench.store.sharing import commands

    return commands.import_main(argv)


def suite(argv: list[str]) -> int:
    """`trainbench suite [OVERRIDES...]`: trainbench.api.suite_plan(), run as `trainbench OVERRIDES...` runs a
    command line (trainbench.run_suite() runs the same plan through trainbench.run())."""
    from trainbench import api

    try:
        plan = api.suite_plan(argv)
    except api.BadInput as error:
        return fail(str(error))
    print(plan.line, file=sys.stderr, flush=True)
    with api.as_the_suite():
        return main(hydra_entry(), list(plan.command_line))


def doctor(argv: list[str]) -> int:
    from trainbench.doctor import command

    return command.main(argv)


def report(argv: list[str]) -> int:
    from trainbench.report import cli

    return cli.main(argv)


def references(argv: list[str]) -> int:
    from trainbench.references import cli

    return cli.main(argv)


def download(argv: list[str]) -> int:
    """`trainbench download data=cifar10`: trainbench.api.download(), the dataset's files fetched now into data.root."""
    from trainbench import api
    from trainbench.store.tracking import private

    try:
        done = api.download(argv)
    except api.BadInput as error:
        return fail(str(error))
    if done.done == "present":
        print(f"{done.dataset}: nothing to download (already on disk and readable, or generated)")
    else:
        print(f"{done.dataset}: {done.done} into {private(str(done.folder))}")
    return 0


# The main command's settings that each subcommand takes too, as key=value, and the flag each one stands for
# (None: the subcommand has no flag for it; tracking.uri then reaches it as $MLFLOW_TRACKING_URI).
_STORE: dict[str, str | None] = {"tracking.uri": "--uri", "tracking.experiment": "--experiment"}
SUBCOMMAND_SETTINGS: dict[str, dict[str, str | None]] = {
    "results": _STORE,
    "export": _STORE,
    "import": _STORE,
    "report": _STORE,
    "references": {"tracking.uri": None, "tracking.experiment": "--experiment"},
    "doctor": {"framework": "--frameworks"},
}
_SETTING = re.compile(r"[A-Za-z_][\w.]*=")


def run_subcommand(name: str, argv: list[str]) -> int:
    """A subcommand with the main command's key=value settings turned into its own flags; its --help ends with
    which settings it takes."""
    if name in OWN_HELP and any(a in HELP_FLAGS for a in argv[: argv.index("--") if "--" in argv else len(argv)]):
        print(own_help(name))
        return 0
    try:
        argv = settings_as_flags(name, argv)
    except ValueError as error:
        return fail(str(error))
    try:
        status = SUBCOMMANDS[name](argv)
    except SystemExit as ended:  # argparse ends --help (0) and its usage errors (2) this way
        status = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
    if status == 0 and name in SUBCOMMAND_SETTINGS and any(a in HELP_FLAGS for a in argv):
        print(settings_help(name))
    return status


def settings_help(name: str) -> str:
    """What `trainbench SUBCOMMAND --help` adds: the key=value settings it takes, as the main command does."""
    settings = SUBCOMMAND_SETTINGS.get(name, {})
    if not settings:
        return ""
    lines = ["", "settings (key=value, as the main command takes them; the flags are aliases):"]
    for setting, flag in settings.items():
        alias = f"the same as {flag} VALUE" if flag else "the same as $MLFLOW_TRACKING_URI"
        lines.append(f"  {setting + '=VALUE':<26}  {alias}")
    return "\n".join(lines)


def settings_as_flags(name: str, argv: list[str]) -> list[str]:
    """`trainbench import runs.json tracking.uri=sqlite:///other.db` -> `... --uri sqlite:///other.db`. A word
    that names an existing file stays a file. Raises ValueError for a setting this subcommand does not take."""
    settings = SUBCOMMAND_SETTINGS.get(name)
    if settings is None:
        return argv
    out: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":
            return out + argv[i:]
        if not _SETTING.match(word) or os.path.exists(word):
            out.append(word)
            continue
        key, value = word.split("=", 1)
        if key not in settings:
            takes = ", ".join(f"{k}=..." for k in settings)
            raise ValueError(f"`trainbench {name}` does not take {word}: its settings are {takes} (--help)")
        flag = settings[key]
        if flag is None:
            os.environ["MLFLOW_TRACKING_URI"] = value
        else:
            out += [flag, value]
    return out


# The subcommands that parse no flags of their own (they take the main command's key=value overrides, or a word):
# their usage line and what follows the summary `trainbench --help` gives them.
OWN_HELP: dict[str, tuple[str, str]] = {
    "list": (
        "list [WHAT]",
        "WHAT: one list; with none, every list under its heading. From Python: trainbench.choices().",
    ),
    "download": (
        "download data=NAME [OVERRIDES...]",
        "The files go into data.root. Takes the main command's key=value overrides that compose the data (data=NAME, "
        "data.root=PATH, ...); a dataset sweeps need is fetched by the sweep itself.",
    ),
    "suite": (
        "suite [OVERRIDES...]",
        "One sweep of this machine's class (device=gpu: the GPU class); see docs/comparing.md. Takes the main "
        "command's key=value overrides (tracking.uri=..., tracking.experiment=..., sweep.dry_run=true, "
        "+suite_cell=A,B for some of the class's workloads), but not experiment= or precision=: the suite fixes them.",
    ),
}


def own_help(name: str) -> str:
    """`trainbench list|download|suite --help`: the usage line, the summary of `trainbench --help`, the rest."""
    import textwrap

    from trainbench.usage import SUBCOMMANDS as SUMMARIES

    usage, rest = OWN_HELP[name]
    summary = next(what for line, what in SUMMARIES if line.split()[0] == name)
    return "\n\n".join(
        [
            f"usage: trainbench {usage}",
            textwrap.fill(summary[0].upper() + summary[1:] + ".", 100),
            textwrap.fill(rest, 100),
        ]
    )


# The first word of a command line that is not a cell's override: each takes the rest of the line.
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "list": list_choices,
    "results": results,
    "report": report,
    "references": references,
    "download": download,
    "export": export,
    "import": import_runs,
    "doctor": doctor,
    "suite": suite,
}


if __name__ == "__main__":  # `python -m trainbench.cli`: what trainbench doctor runs where there is no src/run.py
    console()
