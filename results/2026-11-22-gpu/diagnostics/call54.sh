# device call 54: the first half of the mlx-cuda-13 0.32.4 wheel (89.8 MB, over a call's 64 MiB), carried as
# .mlxa/part1 and left in /tmp on the warm machine for call 55, which carries the rest.
mkdir -p /tmp/mlxparts && cp .mlxa/part1 /tmp/mlxparts/ && ls -l /tmp/mlxparts && nvidia-smi -L
