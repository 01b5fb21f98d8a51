# device call 49: the split, part 7: the fast-mode targets (DistilBERT, BERT-Large, the seed MLP), two harness runs
# between three bare ones, at the code this session ends with.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 585 python3 benchmarks/compare.py --out $OUT/part7 --scratch /tmp/c49 --workloads targets --repeats 2 --system-metrics-workload '' --time-budget-s 420 > $OUT/part7.out 2>&1; el part7 $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/part7/*.md | cut -c1-300; tail -3 $OUT/part7.out
