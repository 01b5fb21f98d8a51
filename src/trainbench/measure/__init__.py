"""What trainbench measures and the machine it measures on: `timing` (timed blocks of steps, warm-up, per-step
times), `energy` (a timed region's energy from a hardware counter), `peaks` and `flops` (for MFU), `hardware` (the
hw.* tags and hw.label), `topology` (how a cell's GPUs are connected), `device_probe` (whether an asked-for device can
exist here) and `timeline` (where a process's start time goes). None imports a deep-learning framework: the
adapters hand them the framework's own calls (synchronize, the step clock).
"""
