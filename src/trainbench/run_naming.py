"""The one naming rule of a cell's MLflow run, apart from trainbench.runs so that a task can name its run
without loading what reads runs back (runs reads the tasks' declarations)."""

from __future__ import annotations

from typing import Any


def run_name(
    *,
    framework: str,
    backend: str,
    task: str,
    model: str | None = None,
    batch_size: Any = None,
    matmul_shape: str | None = None,
    matmul_operands: str | None = None,
    precision: str | None = None,
) -> str:
    """`{framework}-{model}-{backend}-bs{batch_size}`; a matmul run has no model or batch:
    `{framework}-matmul_{shape}-{backend}-{precision}`, `matmul_{shape}_per_product` when its operands are
    drawn inside the timed block. `backend` is the device asked for until the cell knows what ran."""
    if task == "matmul":
        operands = "" if matmul_operands in (None, "resident") else f"_{matmul_operands}"
        return f"{framework}-matmul_{matmul_shape}{operands}-{backend}-{precision}"
    return f"{framework}-{model}-{backend}-bs{batch_size}"
