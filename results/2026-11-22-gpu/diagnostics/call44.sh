# device call 44: the split, part 2: ResNet-50 bf16 + channels_last, the bf16 matmul, then the seed MLP's epoch if
# time allows (call 43's host took 21-69 s per process: twice the docstring's estimate).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 575 python3 benchmarks/compare.py --out $OUT/part2 --scratch /tmp/c44 --workloads resnet50_bf16_cl,matmul_bf16,mlp_epoch --system-metrics-workload '' --time-budget-s 330 > $OUT/part2.out 2>&1; el part2 $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/part2/*.md | cut -c1-300; tail -3 $OUT/part2.out
