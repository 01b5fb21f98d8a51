# device call 15: DistilBERT bs64 bf16 (eager) harness vs bare with more repeats; BERT-Large fast after the autocast fix
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
timeout 290 python3 benchmarks/compare.py --out $OUT/d --scratch /tmp/c15d --workloads distilbert_bf16 --repeats 4 --system-metrics-workload '' > $OUT/d.out 2>&1; el distilbert_bf16 $?
timeout $(( 585-($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/b --scratch /tmp/c15b --workloads bert_large_fast --repeats 1 --system-metrics-workload '' > $OUT/b.out 2>&1; el bert_large_fast $?
tail -n 25 $OUT/d.out | grep -v "^$"; tail -n 20 $OUT/b.out | grep -v "^$"
