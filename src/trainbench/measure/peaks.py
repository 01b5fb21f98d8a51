"""Dense peak TFLOPS per device and dtype, for MFU (model FLOPs utilisation = achieved / peak).

Figures are the vendor's dense (no 2:4 sparsity) numbers at boost clock, for the math a training step
runs: "fp32" plain FP32 on CUDA cores / ALUs; "tf32" TF32 tensor cores (on a GPU without them PyTorch's TF32
switch does nothing and FP32 runs, so the FP32 figure is given); "bf16" and "fp16" tensor-core math with
FP32 accumulation (what cuBLAS uses under autocast). Datasheets print sparse figures with an asterisk: those
are halved here. A device or dtype not listed gets None and `why_no_peak` says why: never a guess.

Devices are matched from hw.label / hw.gpu strings as NVML and Apple print them ("NVIDIA H100 80GB HBM3",
"NVIDIA A100-SXM4-80GB", "Tesla K80", "Apple M1 Max GPU").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DTYPES = ("fp32", "tf32", "bf16", "fp16")
# The precision config names map onto the dtype of their matrix math.
DTYPE_ALIASES = {"mixed_bf16": "bf16", "mixed_fp16": "fp16", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Peak:
    name: str
    fp32: float
    tf32: float  # = fp32 where there are no TF32 tensor cores
    bf16: float | None  # None: no bf16 arithmetic in hardware
    fp16: float | None


# Order matters: the first pattern that matches wins, so variants come before the family name.
NVIDIA: list[tuple[str, Peak]] = [
    # H200 NVL datasheet (nvidia.com/en-us/data-center/h200/): FP32 60, TF32 835*, BF16/FP16 1,671* (*sparse).
    (r"\bh200 nvl\b", Peak("H200 NVL", 60.0, 417.5, 835.5, 835.5)),
    # H200 SXM datasheet: FP32 67, TF32 989*, BF16/FP16 1,979*: the same silicon and clocks as H100 SXM.
    (r"\bh200\b", Peak("H200 SXM", 67.0, 494.7, 989.4, 989.4)),
    # GH200 Grace Hopper datasheet: FP32 67, TF32 494, BF16/FP16 990 dense (its Hopper GPU = H100 SXM).
    (r"\bgh200\b", Peak("GH200", 67.0, 494.7, 989.4, 989.4)),
    # H100 NVL datasheet (nvidia.com/en-us/data-center/h100/): FP32 60, TF32 835*, BF16/FP16 1,671*.
    (r"\bh100 nvl\b", Peak("H100 NVL", 60.0, 417.5, 835.5, 835.5)),
    # H100 PCIe datasheet: FP32 51, TF32 756*, BF16/FP16 1,513*. NVML: "NVIDIA H100 PCIe".
    (r"\bh100\b.*\b(pcie|hbm2e)\b", Peak("H100 PCIe", 51.0, 378.0, 756.5, 756.5)),
    # H100 SXM5: NVIDIA H100 Tensor Core GPU Architecture whitepaper, Table 3: FP32 66.9 (datasheet: 67),
    # TF32 494.7, BF16/FP16 989.4 dense. NVML: "NVIDIA H100 80GB HBM3".
    (r"\bh100\b", Peak("H100 SXM", 67.0, 494.7, 989.4, 989.4)),
    # A100 datasheet (40GB and 80GB, SXM4 and PCIe alike): FP32 19.5, TF32 156, BF16/FP16 312 dense.
    (r"\ba100\b", Peak("A100", 19.5, 156.0, 312.0, 312.0)),
    # A10 datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125 dense. (AWS's A10G is a different part: not listed.)
    (r"\ba10\b", Peak("A10", 31.2, 62.5, 125.0, 125.0)),
    # L40S datasheet: FP32 91.6, TF32 183, BF16/FP16 362.05 dense.
    (r"\bl40s\b", Peak("L40S", 91.6, 183.0, 362.05, 362.05)),
    # L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242* (sparse).
    (r"\bl4\b", Peak("L4", 30.3, 60.0, 121.0, 121.0)),
    # NVIDIA Ada Lovelace GPU Architecture whitepaper, Appendix A (GeForce RTX 4090): FP32 82.6, TF32 82.6,
    # BF16 and FP16 tensor with FP32 accumulate 165.2 dense (GeForce runs FP32-accumulate at half rate).
    (r"\brtx 4090\b(?! d\b)", Peak("GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2)),
    # NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (GeForce RTX 3090): FP32 35.6, TF32 35.6,
    # BF16 and FP16 tensor with FP32 accumulate 71 dense (142 only with FP16 accumulate).
    (r"\brtx 3090\b(?! ti\b)", Peak("GeForce RTX 3090", 35.6, 35.6, 71.0, 71.0)),
    # Tesla V100 datasheet: V100S PCIe FP32 16.4 / tensor 130; V100 PCIe 14 / 112; SXM2 15.7 / 125.
    # Volta has FP16 tensor cores only: no TF32, no bf16.
    (r"\bv100s\b", Peak("V100S PCIe", 16.4, 16.4, None, 130.0)),
    (r"\bv100\b.*\bpcie\b", Peak("V100 PCIe", 14.0, 14.0, None, 112.0)),
    (r"\bv100\b", Peak("V100 SXM2", 15.7, 15.7, None, 125.0)),
    # Tesla T4 datasheet: FP32 8.1, mixed precision (FP16/FP32) 65. Turing: no TF32, no bf16.
    (r"\bt4\b", Peak("T4", 8.1, 8.1, None, 65.0)),
    # Tesla P100 datasheet: PCIe FP32 9.3 / FP16 18.7; SXM2 10.6 / 21.2 (packed half2, no tensor cores).
    (r"\bp100\b.*\bpcie\b", Peak("P100 PCIe", 9.3, 9.3, None, 18.7)),
    (r"\bp100\b", Peak("P100 SXM2", 10.6, 10.6, None, 21.2)),
    # Tesla K80 datasheet: 8.73 TFLOPS FP32 with GPU Boost per board of two GK210 dies; CUDA (and Colab)
    # show each die as its own "Tesla K80": 4.37 per die. Kepler has no FP16 arithmetic.
    (r"\bk80\b", Peak("K80 (one GK210 die)", 4.37, 4.37, None, None)),
]
NOT_THE_DESKTOP_PART = re.compile(r"\b(laptop|mobile|max-q)\b")  # an RTX 4090 Laptop GPU is another chip

# Apple GPUs: every GPU core has 128 FP32 ALUs doing one FMA (2 FLOPs) per clock, so peak = cores x 256 x clock,
# and the figure scales with the core count actually present (an M1 ships with 7 or 8, an M1 Max with 24 or 32).
# Per-core FP32 TFLOPS:
#   M1 family: Apple's own figures, M1 (8-core) 2.6 TFLOPS (M1 press release, Nov 2020), M1 Pro (16-core) 5.2 and
#     M1 Max (32-core) 10.4 (M1 Pro/Max press release, Oct 2021): 0.325 per core; M1 Ultra = 2 x M1 Max = 20.8.
#   M2 family: Apple states no TFLOPS; 1,398 MHz GPU clock (philipturner/metal-benchmarks, README table) x 256
#     = 0.358 per core: M2 10-core 3.6, M2 Pro 19-core 6.8, M2 Max 38-core 13.6, M2 Ultra 76-core 27.2.
#   M3 and M4 families: Apple publishes neither TFLOPS nor GPU clock: no figure (why_no_peak says so).
# FP16 runs at the FP32 rate on these GPUs (metal-benchmarks measures F16 = F32 GFLOPS from M1 on). There are no
# TF32 units (FP32 runs) and no bf16 rate advantage (M1 has no bf16 arithmetic; M2 adds bf16 support, not speed):
# every dtype gets the FP32 figure, so MFU reads as a share of the GPU's FP32 ALU throughput.
APPLE_PER_CORE_TFLOPS = {"M1": 2.6 / 8, "M2": 0.256 * 1.398}
APPLE_FULL_CORES = {  # the largest configuration of each chip, used when the core count is unknown
    "M1": 8,
    "M1 Pro": 16,
    "M1 Max": 32,
    "M1 Ultra": 64,
    "M2": 10,
    "M2 Pro": 19,
    "M2 Max": 38,
    "M2 Ultra": 76,
}
APPLE = re.compile(r"\bapple (m\d+)(?: (pro|max|ultra))?\b")


def peak_tflops(label: str, dtype: str, gpu_cores: int | None = None) -> float | None:
    """Dense peak TFLOPS of the device named by `label` for `dtype` (fp32, tf32, bf16, fp16, or a precision
    name like mixed_bf16); None when unknown (see why_no_peak). `gpu_cores` (hw.gpu_cores) scales Apple
    GPUs; without it the chip's largest configuration is assumed."""
    kind = _dtype(dtype)
    if kind is None or _is_cpu(label):
        return None
    dtype = kind
    chip = _apple_chip(label)
    if chip is not None:
        per_core = APPLE_PER_CORE_TFLOPS.get(chip.split()[0])
        if per_core is None:
            return None
        return per_core * (gpu_cores or APPLE_FULL_CORES[chip])
    found = _nvidia(label)
    return getattr(found, dtype) if found else None


def why_no_peak(label: str, dtype: str = "fp32") -> str | None:
    """One line for the `mfu.reason` tag when peak_tflops() is None; None when there is a peak."""
    if _dtype(dtype) is None:
        return f"unknown dtype `{dtype}` for a peak: one of {', '.join(DTYPES)}"
    if _is_cpu(label):
        return "no CPU peak: it depends on cores x clock x SIMD width (AVX2, AVX-512, AMX, NEON) and is not tabulated"
    chip = _apple_chip(label)
    if chip is not None:
        if chip.split()[0] not in APPLE_PER_CORE_TFLOPS:
            return f"Apple publishes no peak TFLOPS or GPU clock for the {chip}: none is guessed"
        return None
    found = _nvidia(label)
    if found is None:
        return f"no peak-FLOPS entry for {label!r} in trainbench.measure.peaks"
    if getattr(found, _dtype(dtype) or "fp32") is None:
        return f"the {found.name} has no {_dtype(dtype)} arithmetic in hardware: no peak for it"
    return None


def mfu(achieved_tflops: float, label: str, dtype: str, gpu_cores: int | None = None) -> float | None:
    """Achieved over peak TFLOPS (0.42 = 42 %); None without a peak."""
    peak = peak_tflops(label, dtype, gpu_cores)
    return achieved_tflops / peak if peak else None


def _dtype(dtype: str) -> str | None:
    dtype = DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    return dtype if dtype in DTYPES else None


def _is_cpu(label: str) -> bool:
    """ "Intel Xeon CPU", "Apple M1 CPU (8 cores)": a CPU, whatever count its label carries."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", label.strip()).lower().endswith(" cpu")


def _apple_chip(label: str) -> str | None:
    """ "Apple M1 Max GPU" -> "M1 Max"; None for anything else."""
    match = APPLE.search(label.lower())
    if not match:
        return None
    family, tier = match.group(1).upper(), match.group(2)
    return f"{family} {tier.capitalize()}" if tier else family


def _nvidia(label: str) -> Peak | None:
    text = label.lower()
    if NOT_THE_DESKTOP_PART.search(text):
        return None
    for pattern, peak in NVIDIA:
        if re.search(pattern, text):
            return peak
    return None


def cpu_peak_tflops(
    host: dict[str, str],
    dtype: str,
    cpuinfo_path: str = "/proc/cpuinfo",
    max_freq_path: str = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
) -> tuple[float | None, str | None]:
    """An fp32 peak for an x86/Arm Linux CPU: physical cores x max clock x FMA FLOPs per cycle per core.

    Vendors publish no single TFLOPS figure for CPUs, so this is the textbook estimate, and the returned
    source says so (tagged mfu.peak_source). FLOPs/cycle: AVX-512 with two FMA units 64, AVX2+FMA 32,
    NEON (two 128-bit FMA pipes) 16. (None, None) when any input is unknown or dtype is not fp32.
    """
    if _dtype(dtype) != "fp32":
        return None, None
    try:
        with open(cpuinfo_path, encoding="utf-8") as cpuinfo:
            text = cpuinfo.read()
    except OSError:
        return None, None
    flags_line = re.search(r"^(flags|Features)\s*:\s*(.+)$", text, flags=re.MULTILINE)
    flags = set(flags_line.group(2).split()) if flags_line else set()
    if "avx512f" in flags:
        per_cycle = 64
    elif {"avx2", "fma"} <= flags:
        per_cycle = 32
    elif "asimd" in flags:
        per_cycle = 16
    else:
        return None, None
    ghz = _max_ghz(max_freq_path, text)
    cores = host.get("hw.cpu_cores", "")
    if ghz is None or not cores.isdigit():
        return None, None
    peak = int(cores) * ghz * per_cycle / 1000.0
    return peak, f"estimated: {cores} cores x {ghz:.2f} GHz x {per_cycle} fp32 FLOPs/cycle"


def _max_ghz(max_freq_path: str, cpuinfo_text: str) -> float | None:
    try:
        with open(max_freq_path, encoding="utf-8") as khz:
            return int(khz.read().strip()) / 1e6
    except (OSError, ValueError):
        pass
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", cpuinfo_text)  # "Intel(R) Xeon(R) ... @ 2.10GHz"
    if nominal:
        return float(nominal.group(1))
    current = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo_text, flags=re.MULTILINE)
    return float(current.group(1)) / 1000.0 if current else None
