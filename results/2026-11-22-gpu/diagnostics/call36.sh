# device call 36: compare.py's BERT-Large bf16 row at 200 timed steps (calls 34-35 at 40 steps: 0.738, then 1.022)
# and the seed-MLP epoch row, three harness runs each (call 34: 0.978 from one run). Then the harness under
# optimize.compile_mode=max-autotune, never run on a GPU: the seed MLP with capture off, so torch.compile (with CUDA
# graphs) runs the full batches and max-autotune-no-cudagraphs the partial last one (50,000 % 32 = 16).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 450 python3 benchmarks/compare.py --out $OUT/core --scratch /tmp/c36 --workloads bert_large_bf16,mlp_epoch --repeats 3 --cell-timeout 120 --system-metrics-workload '' --time-budget-s 320 > $OUT/core.out 2>&1; el core $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/core/*.md | cut -c1-260; grep -h "ms/step\|vary" $OUT/core/*.log | cut -c1-160; tail -2 $OUT/core.out | cut -c1-200
export MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db
TORCH_LOGS=recompiles timeout $(( 585 - ($(date +%s)-S) )) python3 src/run.py task=train model=mlp data=synthetic data.num_samples=50000 data.num_val_samples=1000 batch_size=32 task.epochs=4 optim=sgd optim.lr=0.01 optim.momentum=0.9 optimize=fast optimize.capture=false optimize.compile_mode=max-autotune device=gpu > $OUT/autotune.log 2>&1; el autotune $?
grep -h "Recompiling\|guard failure\|mismatch\|Error" $OUT/autotune.log | cut -c1-200 | head -6; grep -h "^epoch\|samples/s" $OUT/autotune.log | cut -c1-200 | head -8
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    t = dict(db.execute("select key, value from tags where run_uuid=?", (run,)).fetchall())
    if t.get("trainbench.kind") != "cell":
        continue
    m = dict(db.execute("select key, round(value, 4) from latest_metrics where run_uuid=?", (run,)).fetchall())
    print(t.get("trainbench.outcome"), t.get("trainbench.reason"), t.get("torch.compile_mode"), {k: m.get(k) for k in ("samples_per_s", "compile_time_s", "first_epoch_time_s", "accuracy")})
    print("  epoch_time_s:", db.execute("select step, round(value, 4) from metrics where run_uuid=? and key='epoch_time_s' order by step", (run,)).fetchall())
PY
