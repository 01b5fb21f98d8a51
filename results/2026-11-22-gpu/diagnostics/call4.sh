S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
MLFLOW_TRACKING_URI=sqlite:///$OUT/train.db timeout 150 python3 src/run.py task=train model=distilbert data=synthetic_text data.num_samples=4096 data.num_val_samples=256 optim=adamw optim.lr=0.0001 batch_size=64 optimize=fast task.epochs=2 device=gpu > $OUT/train-distilbert-fast.log 2>&1; el train-distilbert-fast $?
timeout $(( 560-($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/cmp --scratch /tmp/c4 --workloads distilbert_fast --repeats 2 --system-metrics-workload '' > $OUT/cmp.out 2>&1; el compare $?
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "train.db"))
for row in db.execute("select r.name, r.status, m.key, m.value from runs r join latest_metrics m on m.run_uuid=r.run_uuid where m.key in ('samples_per_s','train_loss','val_loss','val_accuracy','compile_time_s') order by r.start_time"):
    print(row)
for row in db.execute("select t.key, t.value from tags t where t.key in ('torch.compile_mode','trainbench.compile','trainbench.outcome')"):
    print(row)
PY
tail -3 $OUT/train-distilbert-fast.log; tail -15 $OUT/cmp.out
