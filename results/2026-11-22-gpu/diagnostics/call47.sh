# device call 47: the split, part 5: DistilBERT tf32 and bf16 (eager, 600 steps), on a fresh machine.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 580 python3 benchmarks/compare.py --out $OUT/part5 --scratch /tmp/c47 --workloads distilbert_tf32,distilbert_bf16 --system-metrics-workload '' --time-budget-s 330 > $OUT/part5.out 2>&1; el part5 $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/part5/*.md | cut -c1-300; tail -3 $OUT/part5.out
