# device call 38: why the harness's seed-MLP epochs 2-3 ran ~12% slower than its epoch 1 in call 37 (all three
# runs: 2.39 -> 2.72, 2.36 -> 2.69/2.88, 2.75 -> 2.60 s), while the bare loop's epoch 1 was its slowest. Six epochs
# per process, two interleaved rounds of: bare, harness, harness with Python's GC off, bare with the GC off
# (a sitecustomize.py on PYTHONPATH calls gc.disable(); the harness's cell process inherits it).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:////tmp/c38/m.db
mkdir -p /tmp/c38 /tmp/gcoff && echo 'import gc; gc.disable()' > /tmp/gcoff/sitecustomize.py
BARE="python3 benchmarks/bare_loops.py mlp_epoch --batch-size 32 --samples 50000 --epochs 6 --variant eager --precision tf32 --device cuda"
HARN="python3 src/run.py task=train model=mlp data=synthetic data.num_samples=50000 data.num_val_samples=1000 batch_size=32 task.epochs=6 optim=sgd optim.lr=0.01 optim.momentum=0.9 precision=tf32 device=gpu"
bare() { $BARE | python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print(" ".join(f"{s:.3f}" for s in d["epoch_time_s"]))'; }
harn() { $HARN 2>&1 | grep "^epoch" | sed 's/^epoch \([0-9]\)\/6: \([0-9.]*\) s.*/\2/' | tr '\n' ' '; echo; }
for round in 1 2; do
  echo "round $round"
  echo -n "  bare:            "; bare
  echo -n "  harness:         "; harn
  echo -n "  harness, GC off: "; PYTHONPATH=/tmp/gcoff:$PYTHONPATH harn
  echo -n "  bare, GC off:    "; PYTHONPATH=/tmp/gcoff:$PYTHONPATH bare
  el round$round 0
done 2>&1 | tee $OUT/gc.txt
