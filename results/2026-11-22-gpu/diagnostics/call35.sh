# device call 35: call 34 had the harness's BERT-Large bf16 (eager) at 0.738 of the bare loop (428 vs 571/589
# seq/s, step times varying 31% in the harness). Again with more runs, and the MLflow system-metrics A/B on this
# workload (the harness with sampling off against the default 10 s interval), to see whether the gap holds.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 560 python3 benchmarks/compare.py --out $OUT/bl --scratch /tmp/c35 --workloads bert_large_bf16 --repeats 3 --cell-timeout 120 --system-metrics-workload bert_large_bf16 --system-metrics-intervals 10 > $OUT/bl.out 2>&1; el bert_large $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/bl/*.md | cut -c1-260; grep -h "ms/step\|vary" $OUT/bl/*.log | cut -c1-160; tail -2 $OUT/bl.out | cut -c1-200
