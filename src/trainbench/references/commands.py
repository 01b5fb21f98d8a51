"""A published row's `reproduce` command: the words that set its cell, and the line the report prints for anyone
to run. The command comes from a CSV or a store's tag, so it is someone else's text: it may set the cell and
nothing else (not_a_cell_override), and it is printed quoted as a shell splits it (reproducible).

Light on purpose: the report imports it; conf/'s choices are read from its folder, never composed.
"""

from __future__ import annotations

import re


def command_words(command: str) -> list[str]:
    """The words of a `reproduce` command as a shell splits them (quotes removed): what Hydra is given; a command a
    shell cannot split is one word that no override is."""
    import shlex

    try:
        return shlex.split(command)
    except ValueError:
        return [command]


def reproducible(command: str) -> str | None:
    """The command line that runs `command` here, quoted so that a shell passes each word as it is (no `$(...)`,
    no `;`), or None where a word is not a cell override (a store's tag can say anything)."""
    import shlex

    words = command_words(command)
    return f"python src/run.py {shlex.join(words)}" if words and all(map(cell_override, words)) else None


# What a reproduce command may set: the cell's own sections and how its process runs, and of tracking.* the two
# settings that send nothing elsewhere (tracking.uri would send the reader's runs to another server). Not sweep.*
# (what the sweep does with the store), nor hydra* (`hydra.callbacks.x._target_` calls any function).
CELL_SECTIONS = ("model", "data", "task", "device", "precision", "optim", "optimize", "framework", "cell")
TRACKING_SETTINGS = ("tracking.system_metrics_interval_s", "tracking.outage_s")
# Settings of those sections that are places on this machine, a model's attribute path, or words printed as what to
# install: never from someone else's command.
NOT_FROM_A_COMMAND = (
    "data.root", "model.weights_file", "model.head",
    "framework.install", "framework.gpu_install", "framework.title", "framework.package",
)  # fmt: skip
# A setting's value from a command: a name, a number, a list of them. Not `$` or `{` (an interpolation, escaped
# `$\{...\}` included, reads the reader's environment into their runs), `/` or a backslash (a path), quotes.
PLAIN_VALUE = re.compile(r"[\w.,:+\-\[\] ]*")


def cell_override(word: str) -> bool:
    return not_a_cell_override(word) is None


def not_a_cell_override(word: str) -> str | None:
    """Why a word of a `reproduce` command is not one that sets the cell and nothing else, or None where it is:
    `batch_size`, `seed`, a group or preset of conf/ by one of its files' names (`+experiment=../../tmp/x` would load
    any YAML, and a YAML can set hydra.callbacks), or a key of the cell's sections (CELL_SECTIONS, less
    NOT_FROM_A_COMMAND) with a plain value (PLAIN_VALUE)."""
    from trainbench.config.catalogue import choices_groups, preset_groups
    from trainbench.locations import choices

    key, equals, value = word.lstrip("+").partition("=")
    if word.startswith("-"):
        return "which is a flag, not a setting"
    if word.startswith("~") or not equals:
        return "which is not a setting's key=value"
    if key in choices_groups() + preset_groups():
        unknown = [choice for choice in value.split(",") if choice not in choices(key)]
        return f"which names no file of conf/{key}/ ({', '.join(choices(key))})" if unknown else None
    section, dot, _ = key.partition(".")
    allowed = key in ("batch_size", "seed") or key in TRACKING_SETTINGS or (dot and section in CELL_SECTIONS)
    if not allowed or "@" in key or "/" in key:
        return (
            "which is not a setting of the cell: a reproduce command sets batch_size, seed, conf/'s choices by name "
            f"and keys of {', '.join(CELL_SECTIONS)} (no hydra, tracking.uri or sweep key)"
        )
    if key.startswith(NOT_FROM_A_COMMAND):
        return (
            "which is not someone else's to choose: a place on the reader's machine, a model's attribute path or "
            "words shown as what to install"
        )
    if not PLAIN_VALUE.fullmatch(value):
        return "whose value is not a name, a number or a list of them (no $, {, /, \\ or quotes)"
    return None
