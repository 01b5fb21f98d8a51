# device call 32: the train task of call 27 again (optimize=fast ResNet-50, 4 epochs of 5,000 at bs256) after the
# change that compiles the partial last batch without CUDA graphs (call 27: epoch 2 took 1.07 s against 0.88 s for
# epochs 3-4, the partial batch's graph being recorded in it). Then compare.py's distilbert_tf32 row with 600 steps.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db PYTHONUNBUFFERED=1
TORCH_LOGS=recompiles timeout 300 python3 src/run.py task=train model=resnet50 data=synthetic_imagenet data.num_samples=5000 batch_size=256 task.epochs=4 optimize=fast device=gpu > $OUT/train.log 2>&1; el train $?
grep -h "Recompiling\|guard failure\|mismatch" $OUT/train.log | cut -c1-200 | head -6; grep -h "^epoch\|samples/s" $OUT/train.log | cut -c1-200 | head -8
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    t = dict(db.execute("select key, value from tags where run_uuid=?", (run,)).fetchall())
    if t.get("trainbench.kind") != "cell":
        continue
    m = dict(db.execute("select key, round(value, 4) from latest_metrics where run_uuid=?", (run,)).fetchall())
    print(t.get("trainbench.outcome"), t.get("trainbench.reason"), t.get("torch.compile_mode"), {k: m.get(k) for k in ("samples_per_s", "compile_time_s", "first_epoch_time_s")})
    print("  epoch_time_s:", db.execute("select step, round(value, 4) from metrics where run_uuid=? and key='epoch_time_s' order by step", (run,)).fetchall())
PY
timeout $(( 585 - ($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/dt --scratch /tmp/c32d --workloads distilbert_tf32 --repeats 3 --cell-timeout 120 --system-metrics-workload '' > $OUT/dt.out 2>&1; el distilbert_tf32 $?
grep -h "distilbert_tf32 |\|^- distilbert_tf32: b" $OUT/dt/*.md; grep -h "ms/step" $OUT/dt/*.log; tail -2 $OUT/dt.out | cut -c1-200
