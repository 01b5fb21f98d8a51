"""Device call 71: where Keras-on-JAX BERT-Large's step goes (556 seq/s against PyTorch's 1,083). Builds the
harness's trainer for the cell `framework=jax model=bert_large batch_size=32 optimize=fast` (as interleaved.py
builds PyTorch's), warms its resident step up, traces 5 steps with jax.profiler, and prints the GPU kernels by
total time per step, grouped by name, with the busy time and the span per step.

    python call71_jax_profile.py [overrides ...]   # e.g. model=distilbert batch_size=64
"""

import collections
import glob
import gzip
import json
import sys
import tempfile
import time

from hydra import compose, initialize_config_dir

from trainbench import data as datasets
from trainbench import frameworks
from trainbench.config import CONF_DIR, validate

STEPS = 5
overrides = [
    "framework=jax",
    "task=benchmark",
    "model=bert_large",
    "data=synthetic_text",
    "optim=adamw",
    "optim.lr=0.0001",
    "batch_size=32",
    "optimize=fast",
    "device=gpu",
    *sys.argv[1:],
]
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cell = validate(compose("config", overrides=overrides))
cell = cell.task.prepared(cell)
framework = frameworks.load(cell)
framework.select_device(cell.device)
data = datasets.load(cell.data, cell.seed)
trainer = framework.trainer(framework.build_model(cell.model, data), data, cell)
step = trainer.resident_step()
for _ in range(5):
    step()
framework.synchronize()
start = time.perf_counter()
for _ in range(20):
    step()
framework.synchronize()
print(f"unprofiled: {20 * int(cell.batch_size) / (time.perf_counter() - start):,.1f} samples/s")

import jax  # noqa: E402 - the framework chose the device first

folder = tempfile.mkdtemp()
with jax.profiler.trace(folder, create_perfetto_trace=True):
    for _ in range(STEPS):
        step()
    framework.synchronize()
(path,) = glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)
with gzip.open(path) as trace_file:
    trace = json.load(trace_file)
names = {
    e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"
}
print("processes:", sorted(set(names.values())))
gpu = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "GPU" in names.get(e["pid"], "")]
threads = collections.Counter((e["pid"], e["tid"]) for e in gpu)
print("busiest GPU lines (pid, tid, events):", threads.most_common(4))
line = threads.most_common(1)[0][0]  # the compute stream: the one with the most kernels
kernels = [e for e in gpu if (e["pid"], e["tid"]) == line]
busy = sum(e["dur"] for e in kernels)
span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
print(
    f"{len(kernels) / STEPS:.0f} kernels a step; busy {busy / STEPS / 1000:.2f} ms, span {span / STEPS / 1000:.2f} ms a step"
)
by_name = collections.defaultdict(list)
for e in kernels:
    by_name[e["name"][:100]].append(e["dur"])
for name, durations in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:40]:
    print(f"  {sum(durations) / STEPS / 1000:7.3f} ms/step  {len(durations) / STEPS:6.1f}/step  {name}")
