"""What PyTorch's Apple MPS backend lacks for its figures to mean what they say: a peak memory counter, and a
record of the ops that ran on the CPU instead.

Peak memory. torch.mps has no peak counter (2.14: current_allocated_memory, driver_allocated_memory,
recommended_max_memory); driver_allocated_memory is what Metal holds for the process, the allocator's cache
included, so it is neither a peak nor CUDA's max_memory_allocated. `probe` runs the cell's last step once more,
after the measurements, reading current_allocated_memory (the tensors' memory, cache excluded) after every op:
a step's largest allocation, activations included, as max_memory_allocated sees it, at no cost to any timed
step. Reading it between steps instead (at synchronizations) would miss the activations, which a step frees
before it returns. The same probe on CUDA (torch.cuda.memory_allocated after every op; H100, torch 2.11, Adam)
read 94-100% of max_memory_allocated for the MLP, ResNet-18/50 and ViT-B/16, training and inference
(what it misses: workspace an op frees before it returns, as cuDNN's); reads between steps gave 8-99%
(ResNet-50 training: 469 of 5650 MiB), and the allocator's reserved pool up to 1.6x the peak.

CPU fallbacks. With PYTORCH_ENABLE_MPS_FALLBACK=1 (framework.mps_fallback, the default) an op MPS lacks runs on
the CPU, and a few ops always do (aten/src/ATen/mps/MPSFallback.mm), while the run is labelled mps. PyTorch says
so in one warning, "The operator 'aten::...' is not currently supported on the MPS backend and will fall back
to run on the CPU. This may have performance implications.", issued by TORCH_WARN_ONCE from the one fallback
function: once per process, for the first such op only. `FallbackOps` keeps the op of every such warning (the
first one while the cell runs; the probe step, run with torch.set_warn_always, names them all).
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# PyTorch's warning for an op that falls back to the CPU (aten/src/ATen/mps/MPSFallback.mm, mps_fallback).
FALLBACK_WARNING = re.compile(
    r"The operator '(?P<op>[^']+)' is not currently supported on the MPS backend and will fall back to run on the CPU"
)


class FallbackOps:
    """The ops PyTorch said it ran on the CPU instead of MPS, from its warnings, shown as before."""

    def __init__(self) -> None:
        self.ops: set[str] = set()

    def install(self) -> FallbackOps:
        """Watch every warning from now on (before the model is built: the first fallback warns only once).
        The warning is shown even where warnings are ignored (python -W ignore, PYTHONWARNINGS): it qualifies
        the cell's figures."""
        warnings.filterwarnings("always", message=FALLBACK_WARNING.pattern, category=UserWarning)
        shown = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            self.note(str(message))
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return self

    def note(self, message: str) -> None:
        match = FALLBACK_WARNING.search(message)
        if match:
            self.ops.add(match["op"])

    def tags(self) -> dict[str, str]:
        """trainbench.mps_fallback_ops (`none`, or the ops, sorted, comma-separated); one warning line printed when
        some ran on the CPU."""
        if not self.ops:
            return {"trainbench.mps_fallback_ops": "none"}
        ops = sorted(self.ops)
        count = f"{len(ops)} op{'s' if len(ops) > 1 else ''}"
        print(
            f"trainbench: warning: {count} ran on the CPU, not MPS ({', '.join(ops)}): the figures include CPU "
            "fallbacks",
            file=sys.stderr,
            flush=True,
        )
        return {"trainbench.mps_fallback_ops": ",".join(ops)}


@dataclass
class Probe:
    """What one more run of a step showed: the largest current_allocated_memory after any of its ops, in bytes,
    how that was read (the memory.source tag), and the ops that fell back to the CPU in it."""

    largest_bytes: int
    source: str
    fallback_ops: set[str] = field(default_factory=set)


PROBED = "torch.mps.current_allocated_memory: the largest after any op of one more step, run after the measurements"
AT_THE_END = "torch.mps.current_allocated_memory at the end of the cell"
PROBED_UNTIL = "torch.mps.current_allocated_memory: the largest after any op of one more step, until it failed"


def probe(torch: Any, step: Callable[[], None] | None, synchronize: Callable[[], None]) -> Probe:
    """Run `step` once more, reading torch.mps.current_allocated_memory after every op (a host counter: no
    synchronization), with every fallback warning issued (torch.set_warn_always) and collected rather than shown
    again. Without a step the figure is the memory held at the end; when the step fails, the largest seen until
    then; the source says which."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainbench import progress

    mps = torch.mps
    if step is not None:
        progress.phase("the MPS memory probe: one more step, reading the allocated memory after every op (not timed)")
    largest = int(mps.current_allocated_memory())
    if step is None:
        return Probe(largest, f"{AT_THE_END} (no step to probe)")

    class LargestAllocation(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            nonlocal largest
            result = func(*args, **(kwargs or {}))
            largest = max(largest, int(mps.current_allocated_memory()))
            return result

    warned_always = torch.is_warn_always_enabled()
    failure = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.set_warn_always(True)
        try:
            with LargestAllocation():
                step()
            synchronize()
        except RuntimeError as error:  # out of memory, say: the measurements are taken, keep them
            failure = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        finally:
            torch.set_warn_always(warned_always)
    fallbacks = FallbackOps()
    for warning in caught:
        fallbacks.note(str(warning.message))
    if failure is not None:
        return Probe(largest, f"{PROBED_UNTIL} (the probe step failed: {failure})", fallbacks.ops)
    return Probe(largest, PROBED, fallbacks.ops)
