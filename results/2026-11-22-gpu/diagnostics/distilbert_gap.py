"""Diagnostic (not committed): where does the harness's DistilBERT bf16 step lose to the bare one? In one process,
interleaved: the bare loop's model and step; the harness's Trainer.resident_step (with and without the FLOP count
that model_and_data runs first); the bare step on the harness's model. Each: blocks of 100 steps, one sync per end."""
import json, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
import torch
import torch.nn.functional as F
import bare_loops as bare
from hydra import compose, initialize_config_dir
from trainbench.config import CONF_DIR, validate
from trainbench import frameworks
from trainbench.tasks.base import model_and_data
from trainbench.tracking import NullLog

overrides = sys.argv[1:] or ["task=benchmark", "model=distilbert", "data=synthetic_text", "optim=adamw",
    "optim.lr=0.0001", "batch_size=64", "precision=mixed_bf16", "device=gpu"]
FAST = "optimize=fast" in overrides
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cell = validate(compose(config_name="config", overrides=overrides))
fw = frameworks.load(cell)
print("backend", fw.select_device(cell.device), flush=True)
import os
N = int(os.environ.get("DIAG_STEPS", "100"))
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
steps = {}

# harness trainer, as the benchmark task builds it (FLOP count first)
model, data, flops = model_and_data(fw, cell, NullLog())
steps["harness_trainer"] = fw.trainer(model, data, cell).resident_step()
# harness trainer without the FLOP count
if not FAST:
    model2 = fw.build_model(cell.model, data)
    steps["harness_trainer_noflops"] = fw.trainer(model2, data, cell).resident_step()
# bare step on the harness's (LogitsOnly) model
model3 = fw.build_model(cell.model, data)
tokens = torch.randint(1000, 30522, (64, 128), device=dev)
labels = torch.randint(0, 2, (64,), device=dev)
def bare_step_on(m, fwd):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0, **({"fused": True} if FAST else {}))
    m.train()
    if FAST:
        m = torch.compile(m, mode="reduce-overhead")
    def step():
        opt.zero_grad(set_to_none=True)
        if FAST and dev.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = fwd(m)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
    return step
steps["bare_step_harness_model"] = bare_step_on(model3, lambda m: m(tokens))
m4 = bare.transformer_classifier("distilbert", bool(os.environ.get("DIAG_TINY"))).to(dev)
steps["bare"] = bare_step_on(m4, lambda m: m(input_ids=tokens).logits)

results = {name: [] for name in steps}
for name, step in steps.items():
    t0 = time.perf_counter()
    for _ in range(min(10, N)):
        step()
    sync(); print("warm", name, round(time.perf_counter() - t0, 1), "s", flush=True)
for rnd in range(3):
    for name, step in (list(steps.items()) if rnd % 2 == 0 else list(reversed(steps.items()))):
        sync(); t = time.perf_counter()
        for _ in range(N):
            step()
        sync()
        results[name].append(64 * N / (time.perf_counter() - t))
for name, rates in results.items():
    print(f"{name:28s} " + " ".join(f"{r:8.1f}" for r in rates), flush=True)
for name, step in steps.items():
    p = bare.profile(step, 5, sync)
    print(name, json.dumps(p if "error" in p else {k: p[k] for k in ("wall_ms_per_step", "device_busy_ms_per_step", "busy_fraction", "kernels_per_step", "kernel_ms_per_step_by_kind")}), flush=True)
