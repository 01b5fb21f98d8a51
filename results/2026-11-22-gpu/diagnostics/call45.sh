# device call 45: the split, part 3: BERT-Large bf16 (eager, 200 steps), four harness runs between five bare ones,
# now judged by the paired ratio and its 95% interval.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 575 python3 benchmarks/compare.py --out $OUT/part3 --scratch /tmp/c45 --workloads bert_large_bf16 --repeats 4 --cell-timeout 120 --system-metrics-workload '' > $OUT/part3.out 2>&1; el part3 $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/part3/*.md | cut -c1-300; grep -h "ms/step\|vary" $OUT/part3/*.log | cut -c1-160; tail -3 $OUT/part3.out
