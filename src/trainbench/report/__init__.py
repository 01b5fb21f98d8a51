"""The comparison report: local cells and published reference runs side by side, like with like.

  python src/report.py [--out DIR] [--experiment trainbench] [--sweep RUN_ID] [--model NAME ...]
                       [--filter "tags.`hw.label` = 'X'"] [--baseline LABEL] [--no-references] [--no-log]

selection   which runs: finished cells (never those with epochs=0) and reference runs, as Entries
comparison  the tables: one per task, model and metric; a row per comparison key (trainbench.store.runs), so
            runs that measured different quantities are never merged; speed-ups only within a row
plots       small multiples, one panel per comparable setting, one shared legend
render      report.md, report.html (self-contained), report.json
cli         the entry point (src/report.py) and the report's own MLflow run
"""
