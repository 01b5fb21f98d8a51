"""Tasks: what a cell does once its device is bound. One module per task (train, benchmark, matmul, ...),
each with one dataclass that is both the task's config and its behaviour; see tasks/base.py."""

# The task modules register their schemas while trainbench.config loads (registry.load_all, its last line),
# and each imports tasks.base, which imports the config's schema: loading the config first, whichever of
# these modules a process imports first, lets that run in that order instead of meeting a half-loaded base.
import trainbench.config  # noqa: F401
