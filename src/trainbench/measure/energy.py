"""Energy of a timed region, read from a real hardware counter or not at all.

    with EnergyMeter(backend, gpu_index=0, synchronize=device.synchronize) as meter:
        ...                       # the timed steps
    log.metrics(meter.metrics(samples))   # {} when there was no counter
    log.tags(meter.tags())                # energy.source (and energy.reason when "none")

What each source measures (the scope differs, so compare energy across sources with care):
  nvml   NVIDIA GPU board energy (nvmlDeviceGetTotalEnergyConsumption; Volta and newer), through zeus's
         device layer when zeus is installed, else read directly. The CPU and host memory are not included.
  amdsmi AMD GPU (ROCm) energy (amdsmi_get_energy_count), through zeus's AMD device layer only: it needs ROCm's
         `amdsmi` Python library (ROCm 6.2+), and zeus switches off a counter that disagrees with the GPU's
         own power reading (ROCm/amdsmi issue 38). PyTorch reports backend "cuda" on ROCm: hw.gpu_vendor decides.
  apple  Apple silicon, through zeus (needs `zeus-apple-silicon`): the on-chip GPU for mps/metal cells,
         all CPU clusters for cpu cells. Unified DRAM is not included.
  rapl   Linux CPU package energy from /sys/class/powercap/intel-rapl:N/energy_uj, all packages summed
         (DRAM and the platform "psys" zone left out). Read directly, not through zeus: zeus tracks RAPL
         wrap-around with a spawned Python process that would compete with the CPU cell being measured;
         here a thread reads the counters every few seconds so that no wrap is missed.
  none   no counter: no RAPL permission (root-only on kernels patched for CVE-2020-8694), a VM, a GPU
         older than Volta, no NVIDIA driver, no amdsmi. Nothing is estimated: energy.reason says what was missing.

zeus is imported only when a counter can exist, inside the cell's process; any failure falls back quietly.
"""

from __future__ import annotations

import platform
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

POWERCAP_ROOT = "/sys/class/powercap"
# Counters tick coarsely (NVML's every few tens of ms): a region much shorter than this reads far below the true
# power (results/2026-11-28-measure-notes). Shorter regions get no figure rather than a wrong one.
MIN_REGION_S = 1.0
RAPL_POLL_S = 5.0  # far shorter than the minutes a busy package takes to wrap its counter: no wrap is missed
GPU_BACKENDS = ("cuda", "rocm", "hip", "gpu")  # as in trainbench.measure.hardware: PyTorch on ROCm says "cuda"


class EnergyMeter:
    """Joules used by the device that runs `backend` ("cuda", "mps", "metal", "cpu") inside a `with` block.

    After the block: `joules` (None without a real counter), `seconds`, `source` ("nvml", "amdsmi", "apple",
    "rapl", "none") and `reason` (why "none"). Never raises: a counter that fails is reported as none.
    `synchronize` (the framework's) is called at both ends so queued device work falls inside the region.
    `gpu_vendor` ("nvidia", "amd") says whose GPU a "cuda" backend is; by default this machine's hw.gpu_vendor.
    """

    def __init__(
        self,
        backend: str,
        gpu_index: int | Sequence[int] = 0,
        synchronize: Callable[[], None] | None = None,
        *,
        powercap_root: str | Path = POWERCAP_ROOT,
        use_zeus: bool = True,
        rapl_poll_s: float | None = RAPL_POLL_S,
        min_region_s: float = MIN_REGION_S,
        gpu_vendor: str | None = None,
    ) -> None:
        self.backend = backend
        self.gpu_vendor = gpu_vendor
        # Every GPU the cell uses: a data-parallel cell's energy is the sum over its devices.
        self.gpu_indices = [gpu_index] if isinstance(gpu_index, int) else list(gpu_index)
        self.synchronize = synchronize
        self.powercap_root = Path(powercap_root)
        self.use_zeus = use_zeus
        self.rapl_poll_s = rapl_poll_s
        self.min_region_s = min_region_s
        self.joules: float | None = None
        self.seconds: float | None = None
        self.source = "none"
        self.reason: str | None = None
        self._counter: _Counter | None = None

    def __enter__(self) -> EnergyMeter:
        self._counter, self.reason = self._open()
        self.source = self._counter.source if self._counter else "none"
        if self.synchronize:
            self.synchronize()
        self._start = time.perf_counter()
        if self._counter and not _attempt(self._counter.start)[0]:
            _attempt(self._counter.close)
            self._counter = None
            self._fail("the energy counter could not be read at the start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.synchronize:
            self.synchronize()
        self.seconds = time.perf_counter() - self._start
        if self._counter is None:
            return
        read, joules = _attempt(self._counter.stop)
        _attempt(self._counter.close)
        if not read or joules is None:
            self._fail("the energy counter could not be read at the end")
        elif self.seconds < self.min_region_s or joules <= 0:
            self._fail(
                f"the timed region ({self.seconds:.3f} s) is too short for the {self.source} energy counter "
                f"(needs {self.min_region_s:g} s): time more steps"
            )
        else:
            self.joules = float(joules)

    def metrics(self, samples: float) -> dict[str, float]:
        """energy_j, avg_power_w, samples_per_j for `samples` processed in the region; {} without a reading."""
        if self.joules is None or not self.seconds:
            return {}
        return {
            "energy_j": self.joules,
            "avg_power_w": self.joules / self.seconds,
            "samples_per_j": samples / self.joules,
        }

    def tags(self) -> dict[str, str]:
        tags = {"energy.source": self.source}
        if self.source == "none" and self.reason:
            tags["energy.reason"] = self.reason
        return tags

    def _fail(self, reason: str) -> None:
        self.source, self.reason, self.joules = "none", reason, None

    def _open(self) -> tuple[_Counter | None, str | None]:
        """The counter for this backend, or (None, why not). Cheap checks first, so that zeus is imported
        only where a counter can exist."""
        is_mac = platform.system() == "Darwin"
        if self.backend in GPU_BACKENDS:
            open_one = _open_amd if (self.gpu_vendor or _host_gpu_vendor()) == "amd" else _open_nvml
            counters: list[_Counter] = []
            for index in self.gpu_indices:
                counter, reason = open_one(index, self.use_zeus)
                if counter is None:
                    for opened in counters:
                        _attempt(opened.close)
                    return None, reason
                counters.append(counter)
            return (counters[0] if len(counters) == 1 else SumCounter(counters)), None
        if self.backend in ("mps", "metal") or (self.backend == "cpu" and is_mac):
            if not is_mac or platform.machine() != "arm64":
                return None, f"no energy counter for backend {self.backend} on this machine"
            return _open_apple("gpu" if self.backend != "cpu" else "cpu", self.use_zeus)
        if self.backend == "cpu":
            counter = RaplCounter.open(self.powercap_root, self.rapl_poll_s)
            if counter is None:
                return None, (
                    f"no readable RAPL package counter under {self.powercap_root} (absent in most VMs; "
                    "root-only on most kernels)"
                )
            return counter, None
        return None, f"no energy counter known for backend {self.backend}"


class _Counter:
    source = "none"

    def start(self) -> None: ...

    def stop(self) -> float | None: ...

    def close(self) -> None: ...


class SumCounter(_Counter):
    """Several devices' counters read as one: the energy of every GPU a data-parallel cell uses."""

    def __init__(self, counters: list[_Counter]) -> None:
        self.counters = counters
        self.source = counters[0].source

    def start(self) -> None:
        for counter in self.counters:
            counter.start()

    def stop(self) -> float | None:
        readings = [counter.stop() for counter in self.counters]
        return None if any(r is None for r in readings) else float(sum(r for r in readings if r is not None))

    def close(self) -> None:
        for counter in self.counters:
            _attempt(counter.close)


# ------------------------------------------------------------------------------------------------- NVIDIA


def _open_nvml(gpu_index: int, use_zeus: bool) -> tuple[_Counter | None, str | None]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    from trainbench.measure.hardware import nvml_visible_handles

    try:
        pynvml.nvmlInit()
    except Exception as error:
        return None, f"NVML is not available ({type(error).__name__})"
    try:
        handles = nvml_visible_handles(pynvml)
        if gpu_index >= len(handles):
            _attempt(pynvml.nvmlShutdown)
            return None, f"no visible NVIDIA GPU {gpu_index}"
        handle = handles[gpu_index]
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # raises NotSupported before Volta
    except Exception as error:
        _attempt(pynvml.nvmlShutdown)
        return None, f"GPU {gpu_index} has no NVML energy counter (needs Volta or newer): {type(error).__name__}"
    if use_zeus:
        counter = _ZeusCounter.open("nvml", gpu_index)
        if counter is not None:
            _attempt(pynvml.nvmlShutdown)
            return counter, None
    return NvmlCounter(pynvml, handle), None


class NvmlCounter(_Counter):
    """nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver loaded (64-bit: no wrap)."""

    source = "nvml"

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self.pynvml, self.handle = pynvml, handle

    def start(self) -> None:
        self._start_mj = self.pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)

    def stop(self) -> float:
        return (self.pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self._start_mj) / 1000.0

    def close(self) -> None:
        self.pynvml.nvmlShutdown()


def _host_gpu_vendor() -> str | None:
    from trainbench.measure.hardware import host_tags

    return host_tags().get("hw.gpu_vendor")


# ------------------------------------------------------------------------------------------------- AMD


def _open_amd(gpu_index: int, use_zeus: bool) -> tuple[_Counter | None, str | None]:
    if not use_zeus:
        return None, "AMD GPU energy is read through zeus (its amdsmi device layer), which is switched off"
    return _ZeusCounter.open_amd(gpu_index)


# ------------------------------------------------------------------------------------------------- zeus


def _open_apple(part: str, use_zeus: bool) -> tuple[_Counter | None, str | None]:
    if not use_zeus:
        return None, "Apple silicon energy is read through zeus, which is switched off"
    counter = _ZeusCounter.open("apple", part=part)
    if counter is None:
        return None, "Apple silicon energy needs zeus with zeus-apple-silicon (pip install 'zeus[apple]')"
    return counter, None


class _ZeusCounter(_Counter):
    """A counter read through zeus's device layer (zeus.device: NVML for NVIDIA, amdsmi for AMD, zeus-apple-silicon
    for Apple).

    Not through ZeusMonitor: importing zeus.monitor pulls in pandas, scikit-learn and scipy, seconds and
    hundreds of MB that would show up in the cell's peak_host_memory_mb; zeus.device is a fraction of that
    (results/2026-11-28-measure-notes). Synchronization is ours (the framework's), so nothing here imports torch."""

    def __init__(self, device: Any, source: str, gpu_index: int, part: str) -> None:
        self.device, self.source, self.gpu_index, self.part = device, source, gpu_index, part

    @classmethod
    def open(cls, source: str, gpu_index: int = 0, part: str = "gpu") -> _ZeusCounter | None:
        try:
            if source == "nvml":
                from zeus.device.gpu import get_gpus

                gpus = get_gpus()  # respects CUDA_VISIBLE_DEVICES like CUDA does
                if gpu_index >= len(gpus) or not gpus.supports_get_total_energy_consumption(gpu_index):
                    return None
                return cls(gpus, source, gpu_index, part)
            from zeus.device.soc import get_soc

            return cls(get_soc(), source, gpu_index, part)
        except Exception:  # ImportError, ZeusGPUInitError, ZeusSoCInitError, a refusal of any kind: fall back
            return None

    @classmethod
    def open_amd(cls, gpu_index: int = 0) -> tuple[_ZeusCounter | None, str | None]:
        """The AMD GPU counter through zeus's AMDGPUs (HIP indices, HIP/CUDA_VISIBLE_DEVICES honoured, like
        PyTorch), or (None, why not). Opening it is not instant: zeus checks the counter against the power
        reading before trusting it."""
        try:
            from zeus.device.gpu.amd import AMDGPUs, amdsmi_is_available
        except Exception as error:
            return None, f"AMD GPU energy is read through zeus, which did not import ({type(error).__name__})"
        if not amdsmi_is_available():
            return None, (
                "AMD GPU energy needs ROCm's amdsmi (ROCm 6.2 or newer): it did not load libamd_smi.so or found "
                "no GPU (the amdsmi pip package must match the installed ROCm version)"
            )
        try:
            gpus = AMDGPUs()
            if gpu_index >= len(gpus):
                return None, f"no visible AMD GPU {gpu_index}"
            if not gpus.supports_get_total_energy_consumption(gpu_index):
                return None, (
                    f"zeus switched off AMD GPU {gpu_index}'s energy counter: it reported no power, or its "
                    "energy disagreed with its power reading (ROCm/amdsmi issue 38)"
                )
            gpus.get_total_energy_consumption(gpu_index)
        except Exception as error:
            return None, f"AMD GPU {gpu_index}'s energy counter could not be read ({type(error).__name__}: {error})"
        return cls(gpus, "amdsmi", gpu_index, "gpu"), None

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> float | None:
        end = self._read()
        if self.source in ("nvml", "amdsmi"):
            return (end - self._start) / 1000.0
        millijoules = getattr(end - self._start, "gpu_mj" if self.part == "gpu" else "cpu_total_mj", None)
        return None if millijoules is None else millijoules / 1000.0

    def _read(self) -> Any:
        if self.source in ("nvml", "amdsmi"):
            return self.device.get_total_energy_consumption(self.gpu_index)  # mJ
        return self.device.get_total_energy_consumption()  # AppleSiliconMeasurement, mJ per subsystem


# ------------------------------------------------------------------------------------------------- RAPL


def rapl_delta_uj(start_uj: int, end_uj: int, max_range_uj: int) -> int:
    """Energy between two readings of a RAPL counter that wraps to 0 after max_energy_range_uj (at most
    one wrap between the readings: RaplCounter polls often enough for that)."""
    return end_uj - start_uj if end_uj >= start_uj else max_range_uj - start_uj + end_uj


class RaplCounter(_Counter):
    """Sum of the RAPL package zones (intel-rapl:N named package-*) under a powercap root. AMD CPUs expose
    their package counters under the same names."""

    source = "rapl"

    def __init__(self, zones: list[Path], poll_s: float | None) -> None:
        self.zones = zones
        self.max_uj = [int(_read(zone / "max_energy_range_uj")) for zone in zones]
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None

    @classmethod
    def open(cls, root: Path, poll_s: float | None = RAPL_POLL_S) -> RaplCounter | None:
        """None unless every package zone's energy_uj and max_energy_range_uj read as numbers."""
        zones = [
            zone
            for zone in sorted(root.glob("intel-rapl:*"))
            if re.fullmatch(r"intel-rapl:\d+", zone.name) and _read(zone / "name").startswith("package")
        ]
        readable = all(_read(zone / name).isdigit() for zone in zones for name in ("energy_uj", "max_energy_range_uj"))
        return cls(zones, poll_s) if zones and readable else None

    def start(self) -> None:
        self.total_uj = 0
        self._last = self._read_all()
        if self.poll_s:
            self._poller = threading.Thread(target=self._poll, name="trainbench-rapl", daemon=True)
            self._poller.start()

    def stop(self) -> float:
        self.close()
        self._advance()
        return self.total_uj / 1e6

    def close(self) -> None:
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None

    def _poll(self) -> None:
        while not self._stop_polling.wait(self.poll_s):
            self._advance()

    def _advance(self) -> None:
        with self._lock:
            now = self._read_all()
            self.total_uj += sum(rapl_delta_uj(a, b, m) for a, b, m in zip(self._last, now, self.max_uj, strict=True))
            self._last = now

    def _read_all(self) -> list[int]:
        return [int(_read(zone / "energy_uj")) for zone in self.zones]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _attempt(call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, call()) or (False, None) when it raised: a failing counter never fails the cell."""
    try:
        return True, call()
    except Exception:
        return False, None
