# device call 27: torch.compile(dynamic=False) (committed after call 26) on the paths it changes, with optimize=fast
# ResNet-50 (CUDA graphs): the inference task (batch 1, then bs64: two graphs) and the train task over 4 epochs of
# 5,000 at bs256 (a partial last batch of 136: a second graph); recompiles logged.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
timeout 200 python3 src/run.py task=inference model=resnet50 data=synthetic_imagenet batch_size=64 optimize=fast device=gpu > $OUT/inference.log 2>&1; el inference $?
timeout 330 python3 src/run.py task=train model=resnet50 data=synthetic_imagenet data.num_samples=5000 batch_size=256 task.epochs=4 optimize=fast device=gpu > $OUT/train.log 2>&1; el train $?
unset TORCH_LOGS
grep -h "Recompiling\|recompile\|cache_size_limit\|recompile_limit" $OUT/inference.log $OUT/train.log | cut -c1-300 | head -12
python3 - <<'PY'
import os, sqlite3, sys
sys.path.insert(0, "benchmarks")
from compare import harness_flags
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    m = dict(db.execute("select key, round(value, 4) from latest_metrics where run_uuid=?", (run,)).fetchall())
    t = dict(db.execute("select key, value from tags where run_uuid=?", (run,)).fetchall())
    if t.get("trainbench.kind") != "cell":
        continue
    print(t.get("trainbench.task"), t.get("trainbench.outcome"), t.get("trainbench.reason"), "| flags:", harness_flags(t))
    print("  ", {k: v for k, v in m.items() if k in ('samples_per_s','latency_ms_p50','latency_ms_p99','compile_time_s','warmup_time_s','val_accuracy','train_loss')})
    h = db.execute("select step, round(value, 4) from metrics where run_uuid=? and key='epoch_time_s' order by step", (run,)).fetchall()
    if h:
        print("   epoch_time_s by epoch:", h)
PY
