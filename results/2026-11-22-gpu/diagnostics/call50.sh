# device call 50: the seed MLP's epoch again, five harness runs between six bare ones (call 44: paired 0.906,
# 95% interval 0.638-1.287 from three), in what was left of this session's device time.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 330 python3 benchmarks/compare.py --out $OUT/part8 --scratch /tmp/c50 --workloads mlp_epoch --repeats 5 --system-metrics-workload '' > $OUT/part8.out 2>&1; el part8 $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/part8/*.md | cut -c1-300; tail -3 $OUT/part8.out
