"""Device call 65: where the `fast` MLP epoch's 1.9% goes. Builds interleaved.py's two sides of mlp_fast (the
bare loop's whole-step graph, the harness's captured epoch), runs one epoch of each under torch.profiler, and
prints, per side and per step: the GPU kernels by name (count, mean us), the kernel-busy time, and the span from
the first kernel's start to the last one's end."""

import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType

sys.path.insert(0, str(Path.cwd() / "benchmarks"))
sys.argv = ["interleaved.py", "--workloads", "mlp_fast", "--rounds", "1"]
import interleaved  # noqa: E402

args = interleaved.parse_args()
device = torch.device("cuda")
(workload,) = interleaved.select(args.workloads, device)
bare = interleaved.bare_side(workload, args, device)
harness, _ = interleaved.harness_side(workload, args, device, bare.steps)
for side in (bare, harness, bare, harness):
    side.block()
for name, side in (("bare", bare), ("harness", harness)):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        rate = side.block()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    steps = side.steps
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in kernels:
        by_name[e.name[:90]].append(e.time_range.elapsed_us())
    busy = sum(e.time_range.elapsed_us() for e in kernels)
    span = max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)
    print(
        f"== {name}: {rate:,.1f} samples/s under the profiler; {len(kernels) / steps:.2f} kernels a step; "
        f"busy {busy / steps:.2f} us, span {span / steps:.2f} us a step"
    )
    for kernel, times in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {len(times) / steps:6.3f}/step  mean {sum(times) / len(times):7.2f} us  {kernel}")
