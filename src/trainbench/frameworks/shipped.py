"""The framework packages trainbench ships. Importing this module registers each one's config schema
(`schema/framework/<name>`); a new framework adds its package here and its YAML in conf/framework/."""

from trainbench.frameworks import jax, keras, mlx, pytorch, tensorflow

PACKAGES = (jax, keras, mlx, pytorch, tensorflow)
