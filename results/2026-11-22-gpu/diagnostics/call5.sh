S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
timeout 230 python3 results/2026-11-22-gpu/diagnostics/distilbert_gap.py task=benchmark model=distilbert data=synthetic_text optim=adamw optim.lr=0.0001 batch_size=64 optimize=fast device=gpu > $OUT/diag-fast.out 2>&1; el diag-fast $?
timeout $(( 565-($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/cmp --scratch /tmp/c5 --workloads bert_large_fast --repeats 1 --system-metrics-workload '' > $OUT/cmp.out 2>&1; el compare $?
grep -v "USDT\|Warning\|warn" $OUT/diag-fast.out | tail -12; tail -12 $OUT/cmp.out
