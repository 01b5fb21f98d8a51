# device call 30: compare.py's distilbert_bf16 row with a timed block 6x longer (600 steps, ~10 s, both sides): in
# call 28 its 100-step block (1.6 s) varied 11-15% step to step and 49% process to process.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 570 python3 benchmarks/compare.py --out $OUT/db --scratch /tmp/c30d --workloads distilbert_bf16 --repeats 4 --cell-timeout 120 --system-metrics-workload '' > $OUT/db.out 2>&1; el distilbert_bf16 $?
grep -h "distilbert_bf16 |\|^- distilbert_bf16: b" $OUT/db/*.md; grep -h "ms/step" $OUT/db/*.log; tail -2 $OUT/db.out | cut -c1-200
