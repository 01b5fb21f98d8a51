"""Hardware identity: probes on this machine, parsers on outputs captured from machines we do not have."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainbench.measure import hardware

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def sample_or_nothing(name: str) -> str:
    """A command's captured output; "" for a command that printed nothing there (ioreg's AGXAccelerator on an
    Intel Mac) or was not captured (pmset on a desktop)."""
    return sample(name) if (SAMPLES / name).exists() else ""


def mac_tags(machine: str) -> dict[str, Any]:
    """What mac_tags() would give on `machine`, from its captured command outputs."""
    return hardware.mac_tags_from_outputs(
        sysctl=sample(f"{machine}_sysctl.txt"),
        ioreg=sample_or_nothing(f"{machine}_ioreg_agx.txt"),
        system_profiler=sample_or_nothing(f"{machine}_system_profiler_displays.json"),
        pmset_batt=sample_or_nothing(f"{machine}_pmset_batt.txt"),
        pmset_settings=sample_or_nothing(f"{machine}_pmset_g.txt"),
    )


def run_tags(machine: str, backend: str) -> dict[str, str]:
    """The tags a cell of `backend` on `machine` records (as the worker does: strings), with hw.label."""
    tags = {k: str(v) for k, v in mac_tags(machine).items()}
    return {**tags, "trainbench.backend": backend, "hw.label": hardware.label(backend, tags)}


# ------------------------------------------------------------------------------------------- this machine


def test_this_machine_is_identified():
    tags = hardware.host_tags()
    for key in ("hw.os", "hw.machine", "hw.cpu", "hw.cpu_cores", "hw.memory_gb"):
        assert tags.get(key), key
    assert int(tags["hw.cpu_cores"]) >= 1
    assert float(tags["hw.memory_gb"]) > 0
    assert all(isinstance(v, str) and v for v in tags.values())  # MLflow tags: strings, never empty
    assert re.fullmatch(r".+ CPU \(\d+ (cores|vCPUs)\)", hardware.label("cpu", tags))  # what changes speed: counted


def test_host_tags_are_a_copy():
    hardware.host_tags()["hw.os"] = "changed"
    assert hardware.host_tags()["hw.os"] != "changed"


def test_probing_imports_no_deep_learning_framework():
    code = (
        "import sys; from trainbench.measure import hardware, energy, peaks; hardware.host_tags();"
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras', 'jax', 'zeus') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(__file__).parents[1] / "src")},
    ).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------------------- Apple silicon


def test_m1_macbook_air():
    tags = mac_tags("m1")
    assert tags["hw.chip"] == "Apple M1"
    assert tags["hw.mac_model"] == "MacBookAir10,1"  # fanless: the same chip slows down under sustained load
    assert (tags["hw.cpu_performance_cores"], tags["hw.cpu_efficiency_cores"]) == (4, 4)
    assert tags["hw.cpu_cores"] == tags["hw.cpu_logical"] == 8
    assert tags["hw.memory_gb"] == 16.0
    assert tags["hw.gpu_cores"] == 7
    assert tags["hw.power_source"] == "battery"
    assert tags["hw.low_power_mode"] == "true"
    assert tags["hw.virtualized"] == "none"
    assert "hw.rosetta" not in tags


def test_m1_max_macbook_pro():
    tags = mac_tags("m1max")
    assert tags["hw.chip"] == "Apple M1 Max"
    assert (tags["hw.cpu_performance_cores"], tags["hw.cpu_efficiency_cores"]) == (8, 2)
    assert tags["hw.cpu_cores"] == 10
    assert tags["hw.memory_gb"] == 64.0
    assert tags["hw.gpu_cores"] == 32
    assert tags["hw.power_source"] == "ac"
    assert tags["hw.low_power_mode"] == "false"


# Apple silicon captures: chip, GPU cores, (performance, efficiency) CPU cores, hw.model.
APPLE_MACHINES = {
    "m1": ("Apple M1", 7, (4, 4), "MacBookAir10,1"),
    "m1_8gpu": ("Apple M1", 8, (4, 4), "Macmini9,1"),
    "m1pro": ("Apple M1 Pro", 14, (6, 2), "MacBookPro18,3"),
    "m1max24": ("Apple M1 Max", 24, (8, 2), "MacBookPro18,4"),
    "m1max": ("Apple M1 Max", 32, (8, 2), "MacBookPro18,2"),
    "m2": ("Apple M2", 10, (4, 4), "Mac14,2"),
}


@pytest.mark.parametrize("machine", APPLE_MACHINES)
def test_apple_silicon_chip_gpu_and_cpu_cores(machine):
    chip, gpu_cores, (performance, efficiency), model = APPLE_MACHINES[machine]
    tags = mac_tags(machine)
    assert (tags["hw.chip"], tags["hw.gpu"], tags["hw.gpu_vendor"]) == (chip, chip, "apple")
    assert tags["hw.gpu_cores"] == gpu_cores
    assert (tags["hw.cpu_performance_cores"], tags["hw.cpu_efficiency_cores"]) == (performance, efficiency)
    assert tags["hw.cpu_cores"] == performance + efficiency
    assert tags["hw.mac_model"] == model
    assert "hw.gpu_memory_gb" not in tags  # unified memory: hw.memory_gb says it
    for backend in ("mps", "metal"):
        assert hardware.label(backend, {k: str(v) for k, v in tags.items()}) == f"{chip} GPU ({gpu_cores} cores)"
    assert hardware.label("cpu", tags) == f"{chip} CPU ({performance + efficiency} cores)"


@pytest.mark.parametrize("machine", APPLE_MACHINES)
def test_gpu_from_ioreg_and_system_profiler_agree(machine):
    chip, cores = APPLE_MACHINES[machine][:2]
    expected = {"model": chip, "vendor": "apple", "cores": cores}
    assert hardware.parse_ioreg_gpu(sample(f"{machine}_ioreg_agx.txt")) == expected
    assert hardware.parse_system_profiler_displays(sample(f"{machine}_system_profiler_displays.json")) == expected
    without_ioreg = hardware.mac_tags_from_outputs(  # ioreg gave nothing: system_profiler says the same
        sample(f"{machine}_sysctl.txt"), ioreg="", system_profiler=sample(f"{machine}_system_profiler_displays.json")
    )
    assert without_ioreg["hw.gpu_cores"] == cores


def test_chips_that_differ_only_in_gpu_cores_are_different_machines():
    """A 24- and a 32-core M1 Max (a 7- and an 8-core M1) have the same CPU, not the same GPU: their GPU runs
    are two columns, their CPU runs one."""
    gpu_labels = {machine: run_tags(machine, "mps")["hw.label"] for machine in APPLE_MACHINES}
    assert len(set(gpu_labels.values())) == len(APPLE_MACHINES)
    assert (gpu_labels["m1"], gpu_labels["m1_8gpu"]) == ("Apple M1 GPU (7 cores)", "Apple M1 GPU (8 cores)")
    assert (gpu_labels["m1max24"], gpu_labels["m1max"]) == (
        "Apple M1 Max GPU (24 cores)",
        "Apple M1 Max GPU (32 cores)",
    )
    for one, other in (("m1", "m1_8gpu"), ("m1max24", "m1max")):
        assert hardware.run_label(run_tags(one, "cpu")) == hardware.run_label(run_tags(other, "cpu"))
        assert hardware.run_label(run_tags(one, "metal")) != hardware.run_label(run_tags(other, "metal"))


def test_runs_recorded_without_a_gpu_core_count_are_not_merged_with_either_variant():
    old_run = {
        "trainbench.backend": "mps",
        "hw.chip": "Apple M1 Max",
        "hw.gpu": "Apple M1 Max",
        "hw.gpu_vendor": "apple",
    }
    assert hardware.run_label(old_run) == "Apple M1 Max GPU (cores unknown)"
    assert hardware.run_label(old_run) not in {run_tags(m, "mps")["hw.label"] for m in ("m1max24", "m1max")}
    # An Intel Mac's run from before AMD GPUs were told apart (tagged "apple", no memory): a machine of its own.
    old_intel_mac = {"trainbench.backend": "mps", "hw.gpu": "AMD Radeon Pro 5500M", "hw.gpu_vendor": "apple"}
    assert hardware.run_label(old_intel_mac) == "AMD Radeon Pro 5500M (cores unknown)"
    assert hardware.run_label(old_intel_mac) != run_tags("mbp16_2019", "mps")["hw.label"]


# ------------------------------------------------------------------------------------------- Intel Macs


@pytest.mark.parametrize(
    ("machine", "gpu", "cpu_label", "mac_model"),
    [
        ("mbp16_2019", "AMD Radeon Pro 5500M", "Intel Core i9-9880H CPU (8 cores)", "MacBookPro16,1"),
        ("hackintosh_rx570", "AMD Radeon RX 570", "Intel Core i7-8700K CPU (6 cores)", "iMac19,1"),
    ],
)
def test_an_intel_mac_computes_on_its_amd_gpu_and_is_labelled_by_it(machine, gpu, cpu_label, mac_model):
    """system_profiler lists the integrated Intel GPU first; Metal (PyTorch's MPS, tensorflow-metal) computes on
    the AMD one, which is what the label names, with its memory, as on Linux."""
    tags = mac_tags(machine)
    assert (tags["hw.gpu"], tags["hw.gpu_vendor"], tags["hw.gpu_memory_gb"]) == (gpu, "amd", 8.0)
    assert "hw.chip" not in tags and "hw.gpu_cores" not in tags
    assert tags["hw.mac_model"] == mac_model and tags["hw.virtualized"] == "none"
    host = {k: str(v) for k, v in tags.items()}
    for backend in ("mps", "metal"):
        assert hardware.label(backend, host) == f"{gpu} (8 GB)"
    assert hardware.labels_for("gpu", host) == {f"{gpu} (8 GB)"}  # what sweep.resume looks for before a cell runs
    host["hw.cpu"] = hardware.parse_sysctl(sample(f"{machine}_sysctl.txt"))["machdep.cpu.brand_string"]
    assert hardware.label("cpu", host) == cpu_label
    # macOS's sysctl stops at the first name it does not know (Intel Macs have no hw.perflevel*): -i skips them,
    # so the names after those (brand string, VM flag) are printed, as in these captures.
    assert "-i" in hardware.MAC_SYSCTL


def test_an_intel_mac_with_only_its_integrated_gpu():
    displays = {
        "SPDisplaysDataType": [
            {
                "spdisplays_vendor": "Intel",
                "spdisplays_vram_shared": "1536 MB",
                "sppci_bus": "spdisplays_builtin",
                "sppci_model": "Intel Iris Plus Graphics",
            }
        ]
    }
    gpu = hardware.parse_system_profiler_displays(json.dumps(displays))
    assert gpu == {"model": "Intel Iris Plus Graphics", "vendor": "intel"}  # shared memory is not its own
    tags = {k: str(v) for k, v in hardware.mac_gpu_tags(gpu).items()}
    assert hardware.label("metal", tags) == "Intel Iris Plus Graphics (shared memory)"
    assert hardware.labels_for("gpu", tags) == {"Intel Iris Plus Graphics (shared memory)"}


@pytest.mark.parametrize(
    ("vendor", "model", "expected"),
    [
        ("sppci_vendor_Apple", "Apple M1", "apple"),
        ("sppci_vendor_amd", "Radeon RX 570", "amd"),
        ("sppci_vendor_AMD", "AMD Radeon Pro 5500M", "amd"),
        ("AMD (0x1002)", "AMD Radeon Pro 5500M", "amd"),
        ("ATI (0x1002)", "AMD Radeon R9 M370X", "amd"),
        ("Intel", "Intel UHD Graphics 630", "intel"),
        ("sppci_vendor_intel", "Intel Iris Plus Graphics 655", "intel"),
        ("", "NVIDIA GeForce GT 750M", "nvidia"),  # no vendor field: the model names it
    ],
)
def test_mac_gpu_vendor_spellings(vendor, model, expected):
    assert hardware.mac_gpu_vendor(vendor, model) == expected


def test_mac_parsers_give_nothing_for_nothing():
    assert hardware.parse_system_profiler_displays("") == {}
    assert hardware.parse_system_profiler_displays('{"SPDisplaysDataType": []}') == {}
    assert hardware.parse_ioreg_gpu_cores("") is None
    assert hardware.parse_pmset_batt("") is None
    assert hardware.parse_pmset_low_power_mode("System-wide power settings:\n sleep 1\n") is None
    assert hardware.mac_tags_from_sysctl({}) == {}


def test_intel_mac_has_no_apple_chip_and_rosetta_is_flagged():
    intel = hardware.mac_tags_from_sysctl({"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz"})
    assert "hw.chip" not in intel
    translated = hardware.mac_tags_from_sysctl({"sysctl.proc_translated": "1", "kern.hv_vmm_present": "1"})
    assert translated == {"hw.rosetta": "true", "hw.virtualized": "vm"}


# ------------------------------------------------------------------------------------------- Linux, NVIDIA


def test_xeon_cpuinfo():
    text = sample("xeon_8480_proc_cpuinfo.txt")
    assert hardware.parse_proc_cpuinfo(text) == "Intel(R) Xeon(R) Platinum 8480+"
    assert hardware.parse_proc_cpuinfo_cores(text) == 4  # 2 sockets x 2 cores in the excerpt


def test_grace_cpuinfo_names_the_arm_core():
    assert hardware.parse_proc_cpuinfo(sample("grace_proc_cpuinfo.txt")) == "ARM Neoverse-V2"
    assert hardware.parse_proc_cpuinfo_cores(sample("grace_proc_cpuinfo.txt")) is None


def test_dgx_h100_nvidia_smi():
    gpus = hardware.parse_nvidia_smi_query(sample("dgx_h100_nvidia_smi.csv"))
    assert len(gpus) == 8
    assert gpus[0] == {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559.0,
        "driver": "550.54.15",
        "power_limit_w": 700.0,
    }
    assert hardware.nvidia_tags_from_smi(gpus) == {
        "hw.gpu": "NVIDIA H100 80GB HBM3",
        "hw.gpu_vendor": "nvidia",
        "hw.gpu_count": 8,
        "hw.gpu_driver": "550.54.15",
        "hw.gpu_memory_gb": 79.6,
        "hw.gpu_power_limit_w": 700,
    }


def test_nvidia_smi_fields_it_cannot_read_are_left_out():
    gpus = hardware.parse_nvidia_smi_query("NVIDIA GeForce RTX 3090, 24576, 535.104.05, [N/A]\n")
    assert hardware.nvidia_tags_from_smi(gpus)["hw.gpu_memory_gb"] == 24.0
    assert "hw.gpu_power_limit_w" not in hardware.nvidia_tags_from_smi(gpus)
    assert hardware.nvidia_tags_from_smi(hardware.parse_nvidia_smi_query("")) == {}


def test_cuda_driver_version_text():
    assert hardware.cuda_version_text(12040) == "12.4"
    assert hardware.cuda_version_text(13000) == "13.0"


class FakeNvml:
    """Four GPUs as NVML numbers them; CUDA_VISIBLE_DEVICES decides which CUDA sees, in which order."""

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return f"uuid:{uuid}"


@pytest.mark.parametrize(
    ("visible", "handles"),
    [
        (None, ["gpu0", "gpu1", "gpu2", "gpu3"]),
        ("2,0", ["gpu2", "gpu0"]),
        ("GPU-8f3a", ["uuid:GPU-8f3a"]),
        ("-1", []),
        ("", []),
        ("1,9,3", ["gpu1"]),  # CUDA stops at the first id it cannot use
    ],
)
def test_nvml_handles_follow_cuda_visible_devices(monkeypatch, visible, handles):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert hardware.nvml_visible_handles(FakeNvml()) == handles


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_linux_power_source(tmp_path):
    assert hardware.linux_power_source(tmp_path / "missing") is None
    assert hardware.linux_power_source(tmp_path) is None  # a server: no supplies listed
    write(tmp_path / "AC" / "type", "Mains\n")
    write(tmp_path / "AC" / "online", "0\n")
    write(tmp_path / "BAT0" / "type", "Battery\n")
    write(tmp_path / "BAT0" / "status", "Discharging\n")
    assert hardware.linux_power_source(tmp_path) == "battery"
    write(tmp_path / "AC" / "online", "1\n")
    write(tmp_path / "BAT0" / "status", "Charging\n")
    assert hardware.linux_power_source(tmp_path) == "ac"


def test_virtualization(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    assert hardware.virtualization(bare, detect_virt="none") == "none"
    assert hardware.virtualization(bare, detect_virt="") is None  # nothing can tell

    ec2 = tmp_path / "ec2"
    write(ec2 / ".dockerenv", "")
    write(ec2 / "proc/1/cgroup", "12:pids:/docker/3f2a9c\n0::/\n")
    write(ec2 / "sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
    write(ec2 / "sys/class/dmi/id/product_name", "p5.48xlarge\n")
    assert hardware.virtualization(ec2, detect_virt="docker") == "docker,amazon"

    kube = tmp_path / "kube"
    write(kube / "proc/1/cgroup", "11:memory:/kubepods/burstable/pod1234/abcd\n")
    write(kube / "sys/class/dmi/id/product_name", "KVM\n")
    assert hardware.virtualization(kube, detect_virt="") == "kubernetes,kvm"


# ------------------------------------------------------------------------------------------- AMD


def test_mi300x_node_from_recent_amd_smi():
    gpus = hardware.parse_amd_smi_static(sample("mi300x_amd_smi_static.json"))  # {"gpu_data": [...]}
    assert len(gpus) == 8
    assert gpus[0] == {
        "name": "AMD Instinct MI300X",
        "driver": "6.12.12",
        "memory_mib": 196592.0,
        "power_limit_w": 750.0,
    }
    assert hardware.amd_tags_from_gpus(gpus, rocm="7.0.2") == {
        "hw.gpu": "AMD Instinct MI300X",
        "hw.gpu_vendor": "amd",
        "hw.gpu_count": 8,
        "hw.gpu_driver": "6.12.12",
        "hw.gpu_memory_gb": 192.0,
        "hw.gpu_power_limit_w": 750,
        "sw.rocm": "7.0.2",
    }


def test_mi210_server_from_rocm_6_2_amd_smi():
    gpus = hardware.parse_amd_smi_static(sample("mi210_amd_smi_static_rocm62.json"))  # a bare list
    tags = hardware.amd_tags_from_gpus(gpus)
    assert (tags["hw.gpu"], tags["hw.gpu_count"], tags["hw.gpu_memory_gb"]) == ("AMD Instinct MI210", 4, 64.0)
    assert (tags["hw.gpu_driver"], tags["hw.gpu_power_limit_w"]) == ("6.8.5", 300)


def test_mi250_from_rocm_smi():
    """rocm-smi names the board as its firmware does; each of the MI250's two dies is a GPU of its own."""
    gpus = hardware.parse_rocm_smi(sample("mi250_rocm_smi.json"))
    tags = hardware.amd_tags_from_gpus(gpus)
    assert (tags["hw.gpu"], tags["hw.gpu_count"], tags["hw.gpu_memory_gb"]) == ("AMD Instinct MI250", 2, 64.0)
    assert tags["hw.gpu_driver"] == "6.2.4"
    assert "hw.gpu_power_limit_w" not in tags


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("AMD Instinct MI300X", "AMD Instinct MI300X"),
        ("MI300A", "AMD Instinct MI300A"),  # amd-smi's MARKET_NAME in its own README
        ("Aqua Vanjaram [Instinct MI300A]", "AMD Instinct MI300A"),  # pci.ids style (board product name)
        ("AMD INSTINCT MI250 (MCM) OAM AC MBA", "AMD Instinct MI250"),
        ("AMD Instinct\u2122 MI355X", "AMD Instinct MI355X"),
        ("AMD Instinct MI300X VF", "AMD Instinct MI300X"),  # a cloud VM's virtual function: hw.virtualized says so
        ("Radeon RX 7900 XTX", "AMD Radeon RX 7900 XTX"),
        ("AMD Radeon PRO W7900", "AMD Radeon PRO W7900"),
        ("N/A", ""),
    ],
)
def test_amd_gpu_names_are_spelled_one_way(raw, name):
    assert hardware.amd_gpu_name(raw) == name


def test_amd_parsers_give_nothing_for_nothing(tmp_path):
    for text in ("", "[]", '{"gpu_data": []}', "ERROR:root:Unable to detect any GPU devices"):
        assert hardware.parse_amd_smi_static(text) == []
        assert hardware.parse_rocm_smi(text) == []
    assert hardware.amd_tags_from_gpus([]) == {}
    assert hardware.amd_tags(kfd=tmp_path / "kfd") == {}  # no ROCm compute driver: no tool is even run
    assert hardware.rocm_version(tmp_path) == ""


def test_rocm_version_from_its_install(tmp_path):
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text(sample("rocm624_info_version.txt"))
    assert hardware.rocm_version(tmp_path) == "6.2.4"


@pytest.mark.parametrize(
    ("env", "count"),
    [
        ({}, 8),
        ({"HIP_VISIBLE_DEVICES": "2,3"}, 2),
        ({"CUDA_VISIBLE_DEVICES": "5"}, 1),  # ROCm honours it too
        ({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0,1,2"}, 1),  # HIP's own variable wins
        ({"HIP_VISIBLE_DEVICES": "1,9,2"}, 1),  # stops at the first GPU that does not exist
    ],
)
def test_amd_gpus_follow_hip_visible_devices(env, count):
    gpus = hardware.parse_amd_smi_static(sample("mi300x_amd_smi_static.json"))
    assert hardware.amd_tags_from_gpus(hardware.amd_visible(gpus, env))["hw.gpu_count"] == count


# ------------------------------------------------------------------------------------------- labels


def test_labels():
    """Captured outputs of real machines: the label names the GPU with its memory, the Apple GPU or CPU with
    its cores, the CPU with its cores."""
    h100 = hardware.nvidia_tags_from_smi(hardware.parse_nvidia_smi_query(sample("dgx_h100_nvidia_smi.csv")))
    assert hardware.label("cuda", h100) == "NVIDIA H100 80GB HBM3"  # the name says its memory
    m1max = mac_tags("m1max")
    cores, cpu_cores = m1max["hw.gpu_cores"], m1max["hw.cpu_cores"]
    assert hardware.label("mps", m1max) == f"Apple M1 Max GPU ({cores} cores)"
    assert hardware.label("metal", m1max) == f"Apple M1 Max GPU ({cores} cores)"
    assert hardware.label("cpu", m1max) == f"Apple M1 Max CPU ({cpu_cores} cores)"
    cpuinfo = sample("xeon_8480_proc_cpuinfo.txt")
    xeon = {
        "hw.cpu": hardware.parse_proc_cpuinfo(cpuinfo),
        "hw.cpu_cores": str(hardware.parse_proc_cpuinfo_cores(cpuinfo)),
    }
    assert hardware.label("cpu", xeon) == f"Intel Xeon Platinum 8480+ CPU ({xeon['hw.cpu_cores']} cores)"


def test_a_rocm_host_is_labelled_by_its_amd_gpu_whatever_the_backend_is_called():
    """PyTorch on ROCm reports backend "cuda" (HIP stands in for CUDA); JAX says "gpu". The tags decide."""
    rocm = {
        **hardware.amd_tags_from_gpus(hardware.parse_amd_smi_static(sample("mi300x_amd_smi_static.json"))),
        "hw.cpu": "AMD EPYC 9654 96-Core Processor",
    }
    for backend in ("cuda", "rocm", "gpu"):
        assert hardware.label(backend, rocm) == "AMD Instinct MI300X (192 GB)"
    assert hardware.label("cpu", rocm) == "AMD EPYC 9654 CPU (cores unknown)"
    assert hardware.label("cuda", {"hw.gpu_vendor": "amd"}) == "AMD GPU (memory unknown)"  # no tool could name it
    assert hardware.label("cuda", {}) == "NVIDIA GPU (memory unknown)"  # runs recorded before hw.gpu_vendor existed


@pytest.mark.parametrize(
    ("cpu", "short"),
    [
        ("Intel(R) Xeon(R) CPU @ 2.20GHz", "Intel Xeon CPU"),  # Colab / GCE
        ("Intel(R) Xeon(R) Processor", "Intel Xeon CPU"),  # a VM hiding the model
        ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763 CPU"),
        ("Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz", "Intel Core i9-9980HK CPU"),
        ("ARM Neoverse-V2", "ARM Neoverse-V2 CPU"),
    ],
)
def test_short_cpu_names(cpu, short):
    assert hardware.short_cpu_name(cpu) == short


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the device probe answers only on Linux")
@pytest.mark.parametrize(
    "driver_file", ["proc/driver/nvidia", "dev/nvidia0", "dev/nvidiactl", "dev/kfd", "dev/dxg", None]
)
def test_a_gpu_is_absent_only_where_no_driver_shows_one(tmp_path: Path, driver_file: str | None, monkeypatch) -> None:
    from trainbench.measure.device_probe import PROBE_ENV, absent

    monkeypatch.delenv(PROBE_ENV, raising=False)
    (tmp_path / "dev").mkdir()
    if driver_file:
        (tmp_path / driver_file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / driver_file).touch()
        assert absent("gpu", str(tmp_path)) is None
    else:
        assert "no /dev/kfd for AMD ROCm" in (absent("gpu", str(tmp_path)) or "")
        monkeypatch.setenv(PROBE_ENV, "off")
        assert absent("gpu", str(tmp_path)) is None
    assert absent("cpu", str(tmp_path)) is None and absent("auto", str(tmp_path)) is None
