"""`trainbench doctor`: does trainbench measure this machine right? A self-check in a minute or so.

It runs tiny benchmark cells of every installed framework through the real entry point (`python src/run.py -m`,
one process per cell), on the GPU where the machine has one (Apple: MPS, Metal, MLX's GPU; NVIDIA: CUDA) and
PyTorch on the CPU as well, into a store of its own (outputs/doctor/<time>/mlflow.db: the user's runs stay
as they were). Then it reads back what the cells recorded and prints one line per check:

  run       the cell finished (a framework not installed or a device missing is a line, not a failure)
  timing    the device's synchronize waits for the work, not only for its queueing (task.check_sync): per
            step and in the fastest of interleaved rounds, a block of 2N steps and N steps synchronized one by
            one take what a block of N does, within TIMING_FACTOR; and no block of N is faster than the
            device's own events say (PyTorch on CUDA and MPS) or than PEAK_FACTOR x the device's peak
  memory    peak host (and device) memory recorded, at least the model's weights, at most the machine's memory
  energy    a real counter read a plausible power, or no counter with the reason (a CPU on Linux: a note)
  hardware  hw.label names the machine with nothing unknown, and the GPU's vendor is the backend's
  fallback  (PyTorch on MPS) the ops that fell back to the CPU, when the cell recorded them

and writes the runs as a `trainbench export` file to share (results/contributed/README.md). Exit status: 0
when nothing FAILs, 1 otherwise, 2 for bad arguments. The checks are pure functions of a run's metrics and
tags, so tests feed them the figures of hardware that is not here.

Light on purpose: this process imports no deep-learning framework (the cells do), and MLflow only to read the
cells back and export them.

The modules: `declared` (the frameworks it checks), `plan` (the sweeps), `checks` (one line per check), `command`.
"""
