# device call 26: the paths the change to reduce-overhead for ResNet-50 opens on a GPU, which no benchmark row runs:
# the inference task (batch-1 latency and bs64 throughput, two shapes through one compiled forward) and the train
# task over an epoch whose last batch is partial (2,000 samples at bs256), both with optimize=fast
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db PYTHONUNBUFFERED=1
timeout 240 python3 src/run.py task=inference model=resnet50 data=synthetic_imagenet batch_size=64 optimize=fast device=gpu > $OUT/inference.log 2>&1; el inference $?
timeout 300 python3 src/run.py task=train model=resnet50 data=synthetic_imagenet data.num_samples=2000 batch_size=256 task.epochs=2 optimize=fast device=gpu > $OUT/train.log 2>&1; el train $?
grep -hv "^\[" $OUT/inference.log $OUT/train.log | grep -v "^\s*$" | tail -16 | cut -c1-250
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    m = dict(db.execute("select key, round(value, 3) from latest_metrics where run_uuid=?", (run,)).fetchall())
    t = dict(db.execute("select key, value from tags where run_uuid=? and key in ('torch.compile_mode','trainbench.outcome','trainbench.reason','trainbench.task')", (run,)).fetchall())
    print(t, {k: v for k, v in m.items() if k in ('samples_per_s','latency_ms_p50','latency_ms_p99','compile_time_s','val_accuracy','epoch_time_s','train_loss')})
PY
