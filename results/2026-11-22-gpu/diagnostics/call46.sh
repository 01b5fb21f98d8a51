# device call 46: the split, part 4: the bf16 matmul (call 44 ran out of its time budget before it), in the 5
# minutes the machine had left before its 30-minute hold ends.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 290 python3 benchmarks/compare.py --out $OUT/part4 --scratch /tmp/c46 --workloads matmul_bf16 --system-metrics-workload '' > $OUT/part4.out 2>&1; el part4 $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/part4/*.md | cut -c1-300; tail -3 $OUT/part4.out
