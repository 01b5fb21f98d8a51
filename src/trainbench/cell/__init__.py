"""The cell's side of the process line: what runs in a cell's own process (`python -m trainbench.cell.worker`), which
imports exactly one deep-learning framework and no MLflow, and what crosses the line.

Crossing it: `order` (what the sweep's owner decided about the cell, made once), `names` (the names in it), `events`
(JSON lines the cell sends to its run through the process that launched it), `in_cell`'s result (what the parent
reads back). Inside: `worker` (the process), `in_cell` (the cell's task run through its framework's adapter),
`ranks` (one process per device for PyTorch DDP), `cpu_ranks` (how many of them a CPU holds; the sweep's launcher bound counts the same cores), `batch_probes` and `batch_search` (batch_size=max), `orphan`
(closing the run when the launching process died).
"""
