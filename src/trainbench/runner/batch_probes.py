"""The batch_size=max search inside a cell's process (`search` in its spec; trainbench.runner.cell starts it).

The search (trainbench.runner.batch_search) replays the probes earlier processes made and probes the next batch
in this process. It goes on probing here only while the framework says an out-of-memory error leaves it fit for
another step (Device.release). That holds for PyTorch on CUDA with eager steps: the allocator
frees every block after an OutOfMemoryError once nothing refers to the failed step's tensors (pytorch/pytorch
#18853). Elsewhere it does not hold, or is not known to hold. XLA's and TensorFlow's BFC allocators do not free
reliably after running out. torch.compile and CUDA graphs keep caches and memory pools. On a CPU, the kernel's
out-of-memory killer ends the process. There, this process stops after its one probe and returns what it found.
The parent starts the next process.

Each probe is the batch_size=max benchmark (PROBE_WARMUP_STEPS + 1 training steps on one resident batch), on a
model built once per process, with the framework's settings for probes (FrameworkConfig.for_probes: PyTorch's
cudnn.benchmark off, since it autotunes again for every new batch size); the cell then runs with its own. Its
peak and capacity come from the framework (Device.pool_mb); on a CPU, from the process's peak
resident memory against host memory, and cell.memory_limit_mb where set. After each probe the probes so far are written to `progress_path`, so a process killed mid-search loses none of them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainbench.runner.batch_search import Probe, find_max_batch

if TYPE_CHECKING:
    from trainbench.config.schema import CellConfig
    from trainbench.frameworks.base import Device, Framework

PROBE_WARMUP_STEPS = 1  # the first step allocates the optimizer's state; the second runs with it: the steady peak


class _Elsewhere(Exception):  # noqa: N818  (control flow: the next probe needs a process of its own)
    pass


def search(cell: CellConfig, spec: dict[str, Any]) -> dict[str, Any]:
    """Go on with the search from spec["known"]; return {"probes": every probe so far, "best": the result, or
    None when the next probe needs a process of its own, "estimate": the memory line's first estimate,
    "backend": where the probes ran ("" for ranks of their own)}."""
    from trainbench import progress
    from trainbench.runner.in_cell import write_atomically

    known = {p.batch_size: p for p in (Probe(**fields) for fields in spec["known"])}
    progress_path = Path(spec["progress_path"])
    prober = _RankProber(cell) if _ranks(cell) > 1 else _Prober(cell)

    def probe(batch: int) -> Probe:
        if batch in known:
            return known[batch]
        if prober.probes and not prober.reusable:
            raise _Elsewhere
        progress.phase(f"batch_size=max: trying batch {batch}")
        result = prober.probe(batch)
        known[batch] = result
        write_atomically(progress_path, json.dumps([asdict(p) for p in prober.probes]))
        progress.line(f"  batch_size=max: {describe(result)}")
        return result

    try:
        found = find_max_batch(probe, spec["limit"])
    except _Elsewhere:
        return {"probes": [asdict(p) for p in known.values()], "best": None, "estimate": None}
    return {
        "probes": [asdict(p) for p in found.probes],
        "best": found.best,
        "estimate": found.estimate,
        "backend": prober.backend,  # whose memory ran out, where nothing fits
    }


def describe(probe: Probe) -> str:
    """One line per probe: '941 fits (peak 71.3 of 79.1 GiB)' or '1039 does not fit (CUDA out of memory...)'."""
    if not probe.fits:
        return f"{probe.batch_size} does not fit ({short_memory_reason(probe.reason or '')})"
    if probe.peak_mb is None:
        return f"{probe.batch_size} fits"
    of = f" of {probe.capacity_mb / 1024:.1f}" if probe.capacity_mb else ""
    return f"{probe.batch_size} fits (peak {probe.peak_mb / 1024:.1f}{of} GiB)"


NOTHING_FITS = "batch_size=max: not even batch 1 fits: "


def short_memory_reason(reason: str) -> str:
    """The gist of an out-of-memory error for a terminal line, at most 160 characters: the first sentence that
    speaks of memory, without the exception's class, plus the size it tried to allocate where a later sentence
    says it ('CUDA out of memory: tried to allocate 3.06 GiB')."""
    import re

    if reason.startswith(NOTHING_FITS):
        return "not even batch 1 fits: " + short_memory_reason(reason[len(NOTHING_FITS) :])
    if "out-of-memory killer" in reason:
        return "killed by the kernel's out-of-memory killer"
    text = re.sub(r"^[A-Za-z_.]*(Error|Exception|Exhausted)\w*: ", "", reason.strip())
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)  # TensorFlow's op context
    sentences = [s.strip() for s in re.split(r"(?<=[a-z\d)\]])\. ", text) if s.strip()]
    about_memory = [s for s in sentences if re.search(r"memory|resource_exhausted|\boom\b", s, re.IGNORECASE)]
    first = (about_memory or sentences or [text])[0].rstrip(".")
    first = re.sub(r"(\d{7,}) bytes", lambda m: _size(int(m.group(1))), first)
    size = re.search(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B)", text)
    if size and "allocate" not in first:
        first += f": tried to allocate {size.group(1)}"
    return first if len(first) <= 160 else first[:157] + "..."


def _size(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def _ranks(cell: CellConfig) -> int:
    """The processes the cell runs as: more than one where its framework starts a rank per device (DDP)."""
    import importlib

    if cell.framework.rank_launcher is None:
        return 1
    return int(importlib.import_module(cell.framework.rank_launcher).processes(cell.device))


class _Prober:
    """Probes batches in this process, keeping the model between probes."""

    def __init__(self, cell: CellConfig) -> None:
        from trainbench.config import replace
        from trainbench.config.plugins import SCHEMAS

        self.cell = replace(cell, framework=cell.framework.for_probes())
        self.task = SCHEMAS["task"]["benchmark"](name="benchmark", warmup_steps=PROBE_WARMUP_STEPS, steps=1)
        self.network: Any = None
        self.probes: list[Probe] = []
        self.reusable = False  # whether another probe may run in this process
        self._bound: tuple[Framework, Device] | None = None

    @property
    def bound(self) -> tuple[Framework, Device]:
        """The cell's framework and its device, loaded and bound at the first probe (inside its try: a device
        that runs out of memory as the framework starts is that probe's outcome)."""
        if self._bound is None:
            from trainbench import frameworks

            framework = frameworks.load(self.cell)
            self._bound = framework, framework.bind(self.cell.device)
        return self._bound

    @property
    def backend(self) -> str:
        """The backend the device bound ('' before the first probe): says whose memory ran out."""
        return "" if self._bound is None else self._bound[1].backend

    def probe(self, batch: int) -> Probe:
        from trainbench.runner.in_cell import failure_kind, one_line

        try:
            peak_mb, capacity_mb = self._step(batch)
            result = Probe(batch, True, None, peak_mb, capacity_mb)
        except Exception as error:
            if failure_kind(error) != "oom":
                raise
            result = Probe(batch, False, one_line(error))
        # Past the `except`: the error's traceback, and the failed step's tensors its frames hold, are gone.
        self.probes.append(result)
        self.reusable = self._reset()
        return result

    def _reset(self) -> bool:
        return self._bound is not None and self._bound[1].release(self.network)

    def _cell(self, batch: int) -> CellConfig:
        from trainbench.config import replace

        return self.task.prepared(replace(self.cell, batch_size=batch, task=self.task))

    def _step(self, batch: int) -> tuple[float | None, float | None]:
        from trainbench import data as datasets

        cell = self._cell(batch)
        data = datasets.load(cell.data, cell.seed)
        framework, device = self.bound
        if self.network is None:
            self.network = framework.build(cell.model, data).network
        step = framework.trainer(self.network, data, cell).resident_step()
        for _ in range(PROBE_WARMUP_STEPS + 1):
            step()
        device.synchronize()
        if device.backend == "cpu":
            return _host_memory_mb(self.cell.cell.memory_limit_mb)
        memory = device.pool_mb()
        return memory if memory is not None else (None, None)


class _RankProber(_Prober):
    """A data-parallel cell with a process per device: each probe starts its ranks afresh (from this process,
    which touches no device), so every probe may follow. The ranks report no capacity: no memory line."""

    def _reset(self) -> bool:
        return True

    def _step(self, batch: int) -> tuple[float | None, float | None]:
        from trainbench.runner.order import CellOrder
        from trainbench.runner.ranks import launch
        from trainbench.tracking import NullLog

        probe = CellOrder(self._cell(batch), (), store=None)  # a probe records nothing
        launch(probe, NullLog(), {"order": probe.to_dict(), "run_id": None})
        return None, None


def _host_memory_mb(limit_mb: int | None) -> tuple[float, float]:
    """(this process's peak resident memory, the memory it could have: cell.memory_limit_mb, else what the host
    has available plus what this process holds), in MiB."""
    import psutil

    from trainbench.runner.in_cell import peak_host_memory_mb

    if limit_mb:
        return peak_host_memory_mb(), float(limit_mb)
    held = psutil.Process().memory_info().rss
    return peak_host_memory_mb(), (psutil.virtual_memory().available + held) / 2**20
