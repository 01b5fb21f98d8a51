# device call 37: the seed-MLP epoch row (call 36's time budget ran out before it), three harness runs; then the
# MLflow system-metrics A/B on BERT-Large bf16 at 200 steps (~16 s blocks, call 35's were 3 s), order rotated.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 575 python3 benchmarks/compare.py --out $OUT/ab --scratch /tmp/c37 --workloads mlp_epoch --repeats 3 --cell-timeout 120 --system-metrics-workload bert_large_bf16 --system-metrics-intervals 10 --time-budget-s 470 > $OUT/ab.out 2>&1; el ab $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/ab/*.md | cut -c1-260; grep -h "interval\|ms/step" $OUT/ab.out $OUT/ab/*.log | cut -c1-160; tail -2 $OUT/ab.out | cut -c1-200
