"""`trainbench export` and `trainbench import`: runs carried between stores as one JSON file, no server needed.

A colleague's laptop, a cloud box that is about to be deleted, a cluster without a route to the team server:
each exports its cells and sweeps to a file, and any store (a local `mlflow.db` or a server) imports it.
mlflow-export-import would do the copying, but against a local store it fails, and what it imports carries
the importer's user name and the import time; this keeps each run as it was recorded (start and end times,
whole metric histories with their steps and timestamps, params, tags, small artifacts, sweep -> cell links).

The file (format `trainbench-export`, version 1) is one JSON document:

    {"format": "trainbench-export", "version": 1, "exported_at": "<UTC ISO time>", "experiment": "<name>",
     "runs": [{"run_id", "run_name", "status", "start_time" (ms), "end_time" (ms or null), "parent_run_id",
               "params": {k: v}, "tags": {k: v}, "metrics": {key: [[step, timestamp_ms, value], ...]},
               "artifacts": {relative_path: {"encoding": "utf-8" | "base64", "data": "..."}}}]}

JSON has no NaN or infinity: such metric values are the strings "NaN", "Infinity", "-Infinity".

What leaves the machine (docs/privacy.md): no user name, host name or absolute path. The tags that name them
(`mlflow.user`, `mlflow.source.*`, `trainbench.process`, ...) are dropped, and every param value, tag value,
run name and text artifact goes through `scrub`: tracking.private (project -> `./`, home -> `~`, credentials
masked), then any absolute path left becomes `<path>`, and this machine's host name `<host>` and login name
`<user>` (see `scrub` for the exact rules).

Importing is idempotent: each imported run carries `trainbench.import.run_id`, the id it had where it was
first recorded (kept through a chain of machines), and a run whose id is already in the store, or already
imported into the experiment, is skipped. Every file is checked whole before anything is written.

The modules: `file_format` (the file and its checks), `scrubbing`, `exporting`, `importing` (and `read_export`),
`commands` (`trainbench export` / `import`). Light on purpose (the parent process imports them): MLflow is imported
inside functions only.
"""
