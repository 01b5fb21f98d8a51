"""The MLflow store and what is read from and written to it: `tracking` (opening a store, riding out its outages,
writing into runs, redaction, provenance), `store_template` (a new SQLite store), `runs` and `run_naming` (listing
and naming runs), `setting` (which runs measured the same quantity), `sources` (stores and export files read alike), `sharing`
(`trainbench export` / `import`) with `import_guard`, `shared_runs` (other machines' runs) and `mlflow_project` (the
run `mlflow run` creates). Light: MLflow is imported inside functions, so the parent's start stays quick.
"""
