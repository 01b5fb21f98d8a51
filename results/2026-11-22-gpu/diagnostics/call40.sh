# device call 40: compare.py's BERT-Large bf16 row at 200 steps again, four harness runs (call 36: 0.945 from
# three, the first bare run 321 seq/s against 414-436 for the others; call 37's six harness runs: 406-488).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 540 python3 benchmarks/compare.py --out $OUT/bl --scratch /tmp/c40 --workloads bert_large_bf16 --repeats 4 --cell-timeout 120 --system-metrics-workload '' > $OUT/bl.out 2>&1; el bert_large $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/bl/*.md | cut -c1-260; grep -h "ms/step\|vary" $OUT/bl/*.log | cut -c1-160
