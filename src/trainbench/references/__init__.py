"""Published figures as MLflow runs of the same shape as trainbench's own cells.

    python src/references.py [CSV] [--experiment NAME] [--dry-run]

Each row of the CSV (references/published-results.csv, or a user's own file with the same columns) is one
figure, with the line of its source it came from (`source_line`). The rows of one reference cell (same
source, series, system, accelerator, framework and version, model, dataset, batch size, precision) become
one run tagged `trainbench.kind=reference`, with the params, tags and metric names of docs/mlflow-schema.md
and the comparison tags of trainbench.store.runs, so the MLflow UI and the report compare it with local cells
that measured the same quantity, and with nothing else.

  reading     the CSV: header, rows, line numbers
  validating  one row at a time: allowed values, units, metric names (every bad row named by its line)
  mapping     a reference cell's rows -> the run a local cell would have recorded (names translated once)
  writing     into MLflow: idempotent (reference.key + reference.content_hash), a changed cell replaced
  cli         the entry point (src/references.py)
"""
