"""Diagnostic: torch.compile(reduce-overhead) DistilBERT bf16 steps, interleaved in one process: the bare loop
(compiled module, autocast outside, eager loss); the harness Trainer (current code); a compiled forward+loss
function with autocast INSIDE (the harness's earlier code); and the same with autocast OUTSIDE."""
import json, os, sys, time
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

N = int(os.environ.get("DIAG_STEPS", "100"))
tiny = bool(os.environ.get("DIAG_TINY"))
overrides = ["task=benchmark", "model=distilbert", "data=synthetic_text", "optim=adamw", "optim.lr=0.0001",
             "batch_size=64", "optimize=fast", *sys.argv[1:]]
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cell = validate(compose(config_name="config", overrides=overrides))
fw = frameworks.load(cell)
backend = fw.select_device(cell.device)
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
cuda = dev.type == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
mode = "reduce-overhead" if cuda else "default"
B = 64
tokens = torch.randint(1000, 30522, (B, cell.model.seq_len), device=dev)
labels = torch.randint(0, 2, (B,), device=dev)
steps = {}
model, data, _ = model_and_data(fw, cell, NullLog())
steps["harness_trainer"] = fw.trainer(model, data, cell).resident_step()

def optimizer(m):
    return torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0, **({"fused": True} if cuda else {}))

def mark():
    if cuda:
        torch.compiler.cudagraph_mark_step_begin()

def bare_step():
    m = bare.transformer_classifier("distilbert", tiny).to(dev); opt = optimizer(m)
    net = torch.compile(m, mode=mode)
    def step():
        opt.zero_grad(set_to_none=True); mark()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = net(input_ids=tokens).logits
        F.cross_entropy(logits.float(), labels).backward(); opt.step()
    return step

def fn_step(inside: bool):
    m = bare.transformer_classifier("distilbert", tiny).to(dev); opt = optimizer(m)
    def forward_loss(x, y):
        if inside:
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = m(input_ids=x).logits
                return F.cross_entropy(logits.float(), y)
        logits = m(input_ids=x).logits
        return F.cross_entropy(logits.float(), y)
    compiled = torch.compile(forward_loss, mode=mode)
    def step():
        opt.zero_grad(set_to_none=True); mark()
        if inside:
            loss = compiled(tokens, labels)
        else:
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = compiled(tokens, labels)
        loss.backward(); opt.step()
    return step

steps["bare"] = bare_step()
steps["fn_autocast_inside"] = fn_step(True)
steps["fn_autocast_outside"] = fn_step(False)
for name, step in steps.items():
    t0 = time.perf_counter()
    for _ in range(10):
        step()
    sync(); print("warm", name, round(time.perf_counter() - t0, 1), "s", flush=True)
results = {name: [] for name in steps}
for rnd in range(3):
    for name, step in (list(steps.items()) if rnd % 2 == 0 else list(reversed(steps.items()))):
        sync(); t = time.perf_counter()
        for _ in range(N):
            step()
        sync(); results[name].append(B * N / (time.perf_counter() - t))
for name, rates in results.items():
    print(f"{name:24s} " + " ".join(f"{r:8.1f}" for r in rates), flush=True)
for name, step in steps.items():
    p = bare.profile(step, 5, sync)
    print(name, json.dumps(p if "error" in p else {k: p[k] for k in ("wall_ms_per_step", "device_busy_ms_per_step", "kernels_per_step", "kernel_ms_per_step_by_kind")}), flush=True)
    if "top_kernels" in p:
        print("   top gemm:", [(k["name"][:60], k["ms_per_step"]) for k in p["top_kernels"] if k["kind"] == "gemm"][:6], flush=True)
