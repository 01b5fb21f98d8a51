"""Tasks: what a cell does once its device is bound. One module per task (train, benchmark, matmul, ...),
each with one dataclass that is both the task's config and its behaviour; see tasks/base.py."""
