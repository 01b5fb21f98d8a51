"""A node's heartbeat to the recording node's key-value store, beaten from a thread of its own until the process
exits (the roll call of torch's and JAX's multi-node cells: trainbench.frameworks.pytorch.distributed,
trainbench.frameworks.jax.nodes).

Each beat calls into a framework's C++ client (torch's TCPStore, JAX's coordination service) with the GIL released.
A daemon thread still inside such a call when the interpreter finalizes is ended by pthread_exit, whose unwinding
through the C++ frames aborts the process ("terminate called without an active exception"): a rank whose work was
done would fail on its way out, and its node's torchrun would leave node 0 waiting at torch elastic's exit barrier.
So the beating stops, and its thread is joined, while the interpreter still runs its exit handlers. Stdlib only.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable


def beat_until_exit(beat: Callable[[], object], period_s: float, last_beat_s: float) -> None:
    """Call beat() every period_s in a daemon thread until it raises (the recording node gone: this node's own
    collectives then fail) or the process exits; at exit, wait up to last_beat_s for a beat under way."""
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set():
                beat()
                stop.wait(period_s)
        except Exception:
            return

    thread = threading.Thread(target=run, name="trainbench-heartbeat", daemon=True)
    thread.start()
    atexit.register(_stop, stop, thread, last_beat_s)


def _stop(stop: threading.Event, thread: threading.Thread, within_s: float) -> None:
    stop.set()
    thread.join(within_s)
