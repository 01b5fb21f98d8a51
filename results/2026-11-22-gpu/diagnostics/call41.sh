# device call 41: calls 36 and 40 had the harness's BERT-Large bf16 (eager, 200 steps) below the mean of the bare
# runs on either side in all 7 pairs (0.87-0.98). Is it the harness's process context (its imports, the
# parent-watch thread) or its cell (launcher parent, step code)? Three interleaved rounds of: the bare loop; the
# same bare loop after the harness's imports with the watch thread running (bare_in_harness_context.py); the harness.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:////tmp/c41/m.db DIAG_WATCH=1
mkdir -p /tmp/c41
ARGS="bert_large --variant bf16 --batch-size 32 --warmup 5 --steps 200 --device cuda"
rate() { python3 -c 'import json,sys; print(round(json.loads(sys.stdin.readline())["samples_per_s"], 1))'; }
for round in 1 2 3; do
  echo -n "round $round: bare "; python3 benchmarks/bare_loops.py $ARGS | rate
  echo -n "  bare in harness context "; python3 results/2026-11-22-gpu/diagnostics/bare_in_harness_context.py $ARGS | rate
  echo -n "  harness "; python3 src/run.py task=benchmark model=bert_large data=synthetic_text optim=adamw optim.lr=0.0001 batch_size=32 precision=mixed_bf16 task.warmup_steps=5 task.steps=200 device=gpu 2>&1 | grep -o "[0-9.]* samples/s"
  el round$round 0
done 2>&1 | tee $OUT/context.txt
