"""What `trainbench --help` (and `python src/run.py --help`) prints, and the descriptions `trainbench list` shows.

Hydra's own help page lists every config group it can find, internal ones included (`schema/*`, the presets'
building blocks), and nothing about the subcommands; its template cannot filter groups. So the page is written
here, from the conf/ tree as it is: a new model or preset shows up without editing anything.

Each choice is described by the first sentence of the comment that opens its YAML file, whole and wrapped.
"""

from __future__ import annotations

import re
import shutil
import textwrap

from trainbench.locations import CONF_DIR, choices

# `trainbench list WHAT` -> the config group it lists
LISTS = {
    "models": "model",
    "data": "data",
    "tasks": "task",
    "frameworks": "framework",
    "devices": "device",
    "precisions": "precision",
    "optimizers": "optim",
    "optimizations": "optimize",
    "presets": "experiment",
}

SUBCOMMANDS = (
    ("[run] [OVERRIDES...]", "run one cell, or a sweep of cells (key=a,b,c); the default when no subcommand is given"),
    ("list [WHAT]", f"what can be chosen, with a line on each: {', '.join(LISTS)}"),
    ("results [tracking.uri=U]", "the recorded cells of a store as a table in the terminal"),
    ("report [--sweep RUN_ID]", "tables, plots and one HTML page comparing cells with published figures"),
    ("references [CSV]", "import published figures as reference runs (default: references/published-results.csv)"),
    ("download data=NAME", "fetch a dataset's files now (needs network)"),
    ("export -o runs.json", "a store's cells and sweeps as one file, for another machine to import"),
    ("import runs.json...", "add exported runs to this store (importing again changes nothing)"),
    ("suite [device=gpu]", "the standard suite: fixed workloads other machines ran, and how this machine compares"),
    ("doctor", "tiny cells of every installed framework: do timing, memory and energy read right here?"),
)

# The groups a user chooses from, in the order a cell is described, with what each decides.
GROUPS = (
    ("framework", "the deep-learning framework"),
    ("device", "where the cell runs"),
    ("model", "the network"),
    ("data", "what it trains on"),
    ("task", "what is measured"),
    ("precision", "numeric precision"),
    ("optim", "the optimizer"),
    ("optimize", "models as written, or each framework's speed-ups"),
)
# Groups under conf/ that are building blocks, not choices: the typed schemas, and the cells of presets.
INTERNAL_GROUPS = ("schema", "scaling_cell", "suite_cell", "tf_metal_cell")

EXAMPLES = (
    ("trainbench model=resnet18 batch_size=32 task.epochs=1", "one cell, overridden"),
    ("trainbench -m framework=pytorch,tensorflow model=mlp,resnet18 sweep.dry_run=true", "list a sweep's 4 cells"),
    ("trainbench +experiment=pytorch_mps_study device=cpu", "a preset, narrowed to the CPU"),
)

# How the example command lines in the YAML comments begin.
COMMANDS = ("python ", "trainbench ", "mlflow ", "pip ")
# Abbreviations whose full stop does not end a sentence.
_ABBREVIATIONS = re.compile(r"(\be\.g|\bi\.e|\bet al|\bvs|\betc|\bcf|\bNo|\bFig)\.$")


def description(group: str, name: str) -> str:
    """The first sentence of the comment that opens conf/<group>/<name>.yaml, whole (it may span lines)."""
    lines: list[str] = []
    for line in (CONF_DIR / group / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:]
        if "@package" in text:
            continue
        if not text.strip() or text.startswith(" -") or text.strip().startswith(COMMANDS):  # prose ends
            break
        lines.append(text.strip())
    return first_sentence(" ".join(lines))


def first_sentence(text: str) -> str:
    for found in re.finditer(r"[.!?](?=\s+[A-Za-z\"'(`])", text):
        if not _ABBREVIATIONS.search(text[: found.end()]):
            return text[: found.end()]
    return text


def wrapped(head: str, text: str, indent: int, width: int) -> list[str]:
    """`head` padded to `indent`, then `text` wrapped to `width` with continuation lines under its start."""
    lines = textwrap.wrap(text, width=max(width - indent, 30), break_on_hyphens=False) or [""]
    first = f"{head:<{indent}}" if len(head) < indent else f"{head}\n{' ' * indent}"
    return [first + lines[0], *(" " * indent + line for line in lines[1:])]


def terminal_width() -> int:
    return min(shutil.get_terminal_size((100, 24)).columns, 120)


def help_page(width: int | None = None) -> str:
    from trainbench.config.catalogue import default_choice
    from trainbench.config.launchers import installed_launchers

    width = width or terminal_width()
    out = [
        "trainbench: how fast does training run on this machine? Each cell (framework x device x model x data x",
        "task x precision x batch size) runs in its own process and is recorded in MLflow.",
        "",
        "Usage: trainbench SUBCOMMAND ...   (from a checkout, python src/run.py takes the same arguments)",
    ]
    for usage, what in SUBCOMMANDS:
        out += wrapped(f"  trainbench {usage}", what, 40, width)
    out += [
        "Subcommands take the main command's settings too (tracking.uri=URI, tracking.experiment=NAME; their",
        "--flags are aliases: `trainbench SUBCOMMAND --help`).",
    ]
    out += ["", "Choose a cell with GROUP=OPTION (* the default; `trainbench list WHAT` describes each option):"]
    for group, what in GROUPS:
        default = default_choice(group)
        options = ", ".join(f"{c}*" if c == default else c for c in choices(group))
        out += wrapped(f"  {group}", f"{options}  ({what})", 18, width)
    launchers = ", ".join(f"{name}*" if name == "basic" else name for name in installed_launchers())
    how = "how cells run: basic one after another, joblib side by side, submitit_* through submitit, e.g. on Slurm"
    out += wrapped("  hydra/launcher", f"{launchers}  ({how})", 18, width)
    out += [
        "",
        "Settings with KEY=VALUE, e.g. batch_size=32, task.epochs=2, seed=1, tracking.experiment=NAME,",
        "sweep.dry_run=true (list a sweep's cells, run nothing), sweep.resume=true (skip cells already recorded).",
        "All of them, with their values: trainbench --cfg job [OVERRIDES...]. A sweep: key=a,b,c (one cell each).",
        "",
        "Presets, +experiment=NAME (values given on the command line narrow them; `trainbench list presets`",
        "describes each):",
    ]
    out += textwrap.wrap(", ".join(choices("experiment")), width=width, initial_indent="  ", subsequent_indent="  ")
    out += ["", "Examples:"]
    for command, what in EXAMPLES:
        out += [f"  {command}", f"      {what}"]
    out += [
        "",
        'Versions: trainbench --version. Tab completion: eval "$(trainbench -sc install=bash)" (or zsh, fish).',
        "Hydra's own flags (--cfg, --info, -cp/-cn): trainbench --hydra-help. The README says more.",
    ]
    return "\n".join(out)
