"""Energy meter (real counters or nothing) and the peak-FLOPS table behind MFU."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from trainbench.measure import hardware, peaks
from trainbench.measure.energy import EnergyMeter, RaplCounter, rapl_delta_uj

# ------------------------------------------------------------------------------------------------- energy

MAX_UJ = 262143328850  # a real package's max_energy_range_uj


def rapl_zone(root: Path, name: str, zone: str, energy_uj: int) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(f"{zone}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_UJ}\n")
    return path


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.mark.skipif(
    not Path("/sys/class/powercap").is_dir() and platform.system() == "Linux",
    reason="runs where /sys/class/powercap exists",
)
def test_a_counter_that_exists_is_used_or_explained():
    with EnergyMeter("cpu", min_region_s=0) as meter:
        sum(range(10**6))
    assert meter.source in ("rapl", "apple", "none")
    assert (meter.joules is None) == (meter.source == "none")


def test_this_machine_has_no_counter_and_reports_none():
    """A VM without GPU or readable RAPL (the CI box): nothing is measured and nothing is estimated."""
    if Path("/sys/class/powercap/intel-rapl:0/energy_uj").exists() or platform.system() == "Darwin":
        pytest.skip("this machine may have a real energy counter")
    no_gpu = not hardware.nvidia_tags()
    for backend in ("cpu", "mps", *(["cuda"] if no_gpu else [])):
        with EnergyMeter(backend, min_region_s=0) as meter:
            sum(range(1000))
        assert meter.source == "none"
        assert meter.joules is None
        assert meter.metrics(samples=64) == {}
        assert meter.tags()["energy.source"] == "none"
        assert meter.tags()["energy.reason"]  # says what was missing
        assert meter.seconds is not None


def test_an_amd_gpu_without_amdsmi_reports_none_and_why():
    """On ROCm, PyTorch's backend is "cuda" but the GPU is AMD's: energy comes through zeus and amdsmi, not NVML.
    Here the amdsmi package (a dependency of zeus) is installed but ROCm's library and a GPU are not, so the cell
    says what is missing instead of guessing a figure."""
    if Path("/dev/kfd").exists():
        pytest.skip("this machine has ROCm's compute driver and may have a real AMD counter")
    with EnergyMeter("cuda", gpu_vendor="amd", min_region_s=0) as meter:
        sum(range(1000))
    assert meter.metrics(samples=64) == {}
    assert meter.tags()["energy.source"] == "none"
    assert "amdsmi" in meter.tags()["energy.reason"] and "NVML" not in meter.tags()["energy.reason"]
    with EnergyMeter("cuda", gpu_vendor="amd", use_zeus=False) as meter:
        pass
    assert meter.tags() == {
        "energy.source": "none",
        "energy.reason": "AMD GPU energy is read through zeus (its amdsmi device layer), which is switched off",
    }


def test_rapl_counter_across_a_wrap(tmp_path):
    package0 = rapl_zone(tmp_path, "intel-rapl:0", "package-0", MAX_UJ - 4_000_000)  # 4 J before the wrap
    package1 = rapl_zone(tmp_path, "intel-rapl:1", "package-1", 10_000_000)
    core0 = rapl_zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside package 0: not counted twice
    psys = rapl_zone(tmp_path, "intel-rapl:2", "psys", 7)  # the whole platform: overlaps the packages
    synced = []
    meter = EnergyMeter(
        "cpu", synchronize=lambda: synced.append(1), powercap_root=tmp_path, rapl_poll_s=None, min_region_s=0
    )
    with meter:
        set_energy(package0, 6_000_000)  # wrapped: 4 J + 6 J
        set_energy(package1, 13_000_000)  # 3 J
        set_energy(core0, 999_999_999)
        set_energy(psys, 999_999_999)
    assert meter.source == "rapl"
    assert meter.joules == pytest.approx(13.0)
    assert len(synced) == 2  # the device is synchronized at both ends of the region
    metrics = meter.metrics(samples=26)
    assert metrics["energy_j"] == pytest.approx(13.0)
    assert metrics["samples_per_j"] == pytest.approx(2.0)
    assert metrics["avg_power_w"] == pytest.approx(13.0 / meter.seconds)
    assert meter.tags() == {"energy.source": "rapl"}


def test_rapl_polling_sees_several_wraps(tmp_path):
    package0 = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 100)
    counter = RaplCounter.open(tmp_path, poll_s=None)
    assert counter is not None
    counter.start()
    for reading in (MAX_UJ - 1_000_000, 500_000, MAX_UJ - 1_000_000, 2_000_000):  # two wraps
        set_energy(package0, reading)
        counter._advance()  # what the polling thread does every few seconds
    joules = counter.stop()
    assert joules == pytest.approx((2 * MAX_UJ + 2_000_000 - 100) / 1e6)


def test_rapl_delta():
    assert rapl_delta_uj(100, 250, MAX_UJ) == 150
    assert rapl_delta_uj(MAX_UJ - 10, 5, MAX_UJ) == 15


def test_unreadable_rapl_is_no_counter(tmp_path):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    (zone / "energy_uj").unlink()  # what a non-root user meets: the file is there but cannot be read
    with EnergyMeter("cpu", powercap_root=tmp_path, min_region_s=0) as meter:
        pass
    assert meter.source == "none" and meter.joules is None
    assert "RAPL" in meter.tags()["energy.reason"]


def test_a_region_too_short_for_the_counter_gets_no_figure(tmp_path):
    package0 = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    with EnergyMeter("cpu", powercap_root=tmp_path, rapl_poll_s=None, min_region_s=60) as meter:
        set_energy(package0, 1_000_000)
    assert meter.joules is None and meter.metrics(10) == {}
    assert meter.source == "none" and "too short" in meter.tags()["energy.reason"]


def test_a_counter_failing_midway_never_fails_the_cell(tmp_path):
    package0 = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    with EnergyMeter("cpu", powercap_root=tmp_path, rapl_poll_s=None, min_region_s=0) as meter:
        (package0 / "energy_uj").unlink()
    assert meter.source == "none" and meter.joules is None


# ------------------------------------------------------------------------------------------------- peaks


@pytest.mark.parametrize(
    ("label", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "fp32", 67.0),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "mixed_fp16", 989.4),  # the precision config's name works too
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156.0),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
        ("NVIDIA A100-PCIE-40GB", "bf16", 312.0),
        ("NVIDIA GeForce RTX 3090", "fp32", 35.6),
        ("NVIDIA GeForce RTX 3090", "fp16", 71.0),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla V100-PCIE-32GB", "fp16", 112.0),
        ("Tesla V100-SXM2-16GB", "tf32", 15.7),  # no TF32 units: FP32 is what runs
        ("Tesla T4", "fp16", 65.0),
        ("Tesla P100-PCIE-16GB", "fp32", 9.3),
        ("Tesla K80", "fp32", 4.37),
        ("Apple M1 Max GPU", "fp32", 10.4),
        ("Apple M1 Max GPU", "fp16", 10.4),
        ("Apple M1 GPU", "fp32", 2.6),
        ("Apple M1 Ultra GPU", "fp32", 20.8),
        ("Apple M2 GPU", "fp32", 3.58),
        ("Apple M2 Max GPU", "fp32", 13.6),
    ],
)
def test_peak_lookup(label, dtype, tflops):
    assert peaks.peak_tflops(label, dtype) == pytest.approx(tflops, rel=0.005)
    assert peaks.why_no_peak(label, dtype) is None


def test_apple_peak_scales_with_the_gpu_cores_present():
    assert peaks.peak_tflops("Apple M1 GPU", "fp32", gpu_cores=7) == pytest.approx(2.275)
    assert peaks.peak_tflops("Apple M1 Max GPU", "fp32", gpu_cores=24) == pytest.approx(7.8)


@pytest.mark.parametrize(
    ("label", "dtype", "why"),
    [
        ("Intel Xeon Platinum 8480+ CPU", "fp32", "CPU"),
        ("Apple M1 Max CPU", "fp32", "CPU"),
        ("Apple M3 Max GPU", "fp32", "Apple publishes no"),
        ("NVIDIA B200", "bf16", "no peak-FLOPS entry"),
        ("NVIDIA A10G", "fp32", "no peak-FLOPS entry"),  # not the A10
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "fp32", "no peak-FLOPS entry"),  # not the desktop card
        ("NVIDIA GeForce RTX 3090 Ti", "fp32", "no peak-FLOPS entry"),
        ("Tesla V100-SXM2-16GB", "bf16", "no bf16"),
        ("Tesla K80", "fp16", "no fp16"),
        ("NVIDIA H100 80GB HBM3", "fp8", "unknown dtype"),
    ],
)
def test_no_peak_comes_with_a_reason(label, dtype, why):
    assert peaks.peak_tflops(label, dtype) is None
    assert peaks.mfu(100.0, label, dtype) is None
    assert why in peaks.why_no_peak(label, dtype)


def test_mfu():
    assert peaks.mfu(494.7, "NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(0.5)
    assert peaks.mfu(78.0, "NVIDIA A100-SXM4-40GB", "bf16") == pytest.approx(0.25)
    assert peaks.mfu(1.3, "Apple M1 GPU", "fp32", gpu_cores=8) == pytest.approx(0.5)
