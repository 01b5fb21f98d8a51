"""What a sweep's process hands back to the Python API that started it (trainbench.api.run).

The API runs the sweep as a child process (the command line's own code, unchanged) and names a file in
$TRAINBENCH_RESULT_FILE; the sweep writes one JSON object there as it ends: either its cells (as the summary
table has them) and where they are recorded, or the one line that refused its input. Without that variable
nothing is written: the command line alone never leaves such a file.

Light on purpose: the sweep's process imports it (no MLflow, no Hydra, no deep-learning framework).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "TRAINBENCH_RESULT_FILE"


def wanted() -> bool:
    return bool(os.environ.get(ENV))


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
    target = os.environ.get(ENV)
    if not target:
        return
    # Written whole or not at all: a sweep killed while writing leaves the caller no half a result.
    partial = Path(f"{target}.partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    partial.replace(target)
