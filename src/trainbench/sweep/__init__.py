"""The parent's side of the process line: the sweep's process and each job a Hydra launcher runs. None of these
modules imports a deep-learning framework; they compose nothing a second time (the cell order, trainbench.cell.order,
carries the judged cell) and they keep the store: the sweep's run, each cell's run, its heartbeat, its outcome.

`owner` (the sweep: its cells, orders, parent run, exit status), `summary`, `resume`, `needed_files`, `handoff` (to
trainbench.api); `job` (Hydra's task function: one job = one cell), `launchers`, `nodes`, `sweep_clock`; `cell_run`
(a cell's run, created first and always closed), `liveness`, `scaling`, `framework_log`; `cell_process` (the cell's
own process as its launcher sees it), `slots`, `oom_evidence`.
"""
