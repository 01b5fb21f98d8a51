# device call 28: compare.py's distilbert_bf16 row (bf16 autocast, eager) with more repeats in one call than any call
# before: bare, harness, bare, ... (6 bare, 5 harness), to narrow the ratio's interval.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 570 python3 benchmarks/compare.py --out $OUT/db --scratch /tmp/c28d --workloads distilbert_bf16 --repeats 5 --cell-timeout 120 --system-metrics-workload '' > $OUT/db.out 2>&1; el distilbert_bf16 $?
cat $OUT/db/*.md | cut -c1-400 | head -60; tail -4 $OUT/db.out | cut -c1-200
