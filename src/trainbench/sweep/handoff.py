"""What a sweep hands back to the Python API that started it (trainbench.api.run).

As it ends, the sweep hands over one JSON object: either its cells (as the summary table has them) and where they
are recorded, or the one line that refused its input. The API runs the sweep in its own process and collects it in
memory (`collected`); where it runs the sweep as a child process instead (a call from a thread other than the
main one), it names a file in $TRAINBENCH_RESULT_FILE and the sweep writes it there. With neither, nothing is
kept: the command line alone never leaves such a file.

Light on purpose: the sweep's process imports it (no MLflow, no Hydra, no deep-learning framework).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENV = "TRAINBENCH_RESULT_FILE"
_collecting: list[dict[str, Any]] | None = None  # what a sweep in this process handed over, while collected


def wanted() -> bool:
    return _collecting is not None or bool(os.environ.get(ENV))


@contextmanager
def collected() -> Iterator[list[dict[str, Any]]]:
    """What a sweep run in this process hands over meanwhile (a list that holds it once the sweep has ended)."""
    global _collecting
    previous, _collecting = _collecting, []
    try:
        yield _collecting
    finally:
        _collecting = previous


def write_refusal(message: str) -> None:
    """The one line the command line printed for bad input (exit 2, nothing recorded)."""
    _write({"refused": message})


def write_sweep(
    *,
    tracking_uri: str | None,
    experiment_id: str | None,
    sweep_id: str | None,
    sweep_run_id: str | None,
    dry_run: bool,
    cells: list[dict[str, Any]],
) -> None:
    """The sweep's cells, each {index, name, outcome, samples_per_s, reason, run_id, peak_tflops, setting_id}."""
    _write(
        {
            "tracking_uri": tracking_uri,
            "experiment_id": experiment_id,
            "sweep_id": sweep_id,
            "sweep_run_id": sweep_run_id,
            "dry_run": dry_run,
            "cells": cells,
        }
    )


def read(path: Path) -> dict[str, Any] | None:
    """What the sweep wrote, or None when it wrote nothing (it was killed, or never got that far)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


def _write(payload: dict[str, Any]) -> None:
    if _collecting is not None:
        _collecting[:] = [json.loads(json.dumps(payload))]  # as a file would carry it: plain JSON values
        return
    target = os.environ.get(ENV)
    if not target:
        return
    # Written whole or not at all: a sweep killed while writing leaves the caller no half a result.
    partial = Path(f"{target}.partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    partial.replace(target)
