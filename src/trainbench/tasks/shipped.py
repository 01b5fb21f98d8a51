"""The task modules trainbench ships. Importing this module registers each one's config schema
(`schema/task/<name>`); a new task adds its module here and its YAML in conf/task/."""

from trainbench.tasks import benchmark, inference, matmul, train

MODULES = (benchmark, inference, matmul, train)
