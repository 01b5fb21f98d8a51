# device call 3: CUDA graphs (reduce-overhead) for the transformers, bare and harness; DistilBERT bf16 process contexts
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db
H="task=benchmark data=synthetic_text optim=adamw optim.lr=0.0001 optimize=fast optimize.compile_mode=reduce-overhead device=gpu"
timeout 120 python3 benchmarks/bare_loops.py distilbert --variant fast --compile-mode reduce-overhead --warmup 10 --steps 100 --profile-steps 5 > $OUT/ro-bare-distilbert.jsonl 2> $OUT/ro-bare-distilbert.err; el bare-distilbert-ro $?
timeout 150 python3 src/run.py $H model=distilbert batch_size=64 task.warmup_steps=10 task.steps=100 > $OUT/ro-harness-distilbert.log 2>&1; el harness-distilbert-ro $?
timeout 150 python3 benchmarks/bare_loops.py bert_large --variant fast --compile-mode reduce-overhead --warmup 10 --steps 40 --profile-steps 5 > $OUT/ro-bare-bert_large.jsonl 2> $OUT/ro-bare-bert_large.err; el bare-bertl-ro $?
timeout 170 python3 src/run.py $H model=bert_large batch_size=32 task.warmup_steps=10 task.steps=40 > $OUT/ro-harness-bert_large.log 2>&1; el harness-bertl-ro $?
B="distilbert --variant bf16 --batch-size 64 --warmup 10 --steps 100 --device cuda"
for r in 1 2; do
  [ $(( $(date +%s)-S )) -gt 470 ] && break
  timeout 60 python3 benchmarks/bare_loops.py $B >> $OUT/ctx-bare.jsonl 2>/dev/null; el ctx-bare $?
  DIAG_WATCH=1 timeout 60 python3 results/2026-11-22-gpu/diagnostics/bare_in_harness_context.py $B >> $OUT/ctx-imports.jsonl 2>/dev/null; el ctx-imports $?
  timeout 80 python3 src/run.py task=benchmark model=distilbert data=synthetic_text optim=adamw optim.lr=0.0001 batch_size=64 precision=mixed_bf16 task.warmup_steps=10 task.steps=100 device=gpu > $OUT/ctx-harness-$r.log 2>&1; el ctx-harness $?
done
python3 - <<'PY'
import json, os, sqlite3
out = os.environ["OUT"]
for f in sorted(os.listdir(out)):
    if f.endswith(".jsonl"):
        for line in open(os.path.join(out, f)):
            d = json.loads(line)
            print(f, d.get("samples_per_s") or {k: d["profile"].get(k) for k in ("wall_ms_per_step", "device_busy_ms_per_step", "busy_fraction", "kernels_per_step")} if "profile" in d else d.get("samples_per_s"))
db = sqlite3.connect(os.path.join(out, "h.db"))
for row in db.execute("select r.name, m.value from runs r join latest_metrics m on m.run_uuid=r.run_uuid where m.key in ('samples_per_s') order by r.start_time"):
    print(row)
PY
