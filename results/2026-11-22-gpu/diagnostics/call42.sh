# device call 42: the harness under optimize.compile_mode=max-autotune on a transformer (never run on a GPU before):
# DistilBERT bs64 with optimize=fast, compare.py's distilbert_fast settings. Compile time goes to compile_time_s.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db
timeout 540 python3 src/run.py task=benchmark model=distilbert data=synthetic_text optim=adamw optim.lr=0.0001 batch_size=64 optimize=fast optimize.compile_mode=max-autotune task.warmup_steps=10 task.steps=100 device=gpu > $OUT/autotune.log 2>&1; el autotune $?
grep -v "^\s*$\|AUTOTUNE\|triton_\|SingleProcess\|^  " $OUT/autotune.log | cut -c1-220 | tail -8
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    t = dict(db.execute("select key, value from tags where run_uuid=?", (run,)).fetchall())
    if t.get("trainbench.kind") != "cell":
        continue
    m = dict(db.execute("select key, round(value, 4) from latest_metrics where run_uuid=?", (run,)).fetchall())
    print(t.get("trainbench.outcome"), t.get("trainbench.reason"), t.get("torch.compile_mode"), {k: m.get(k) for k in ("samples_per_s", "compile_time_s", "warmup_time_s", "step_time_p50_ms", "step_time_p99_ms")})
PY
