# device call 43: compare.py's split as its docstring writes it, part 1 of 4 (ResNet-50's four rows), at the code
# this session ends with (paired ratios with a 95% interval, new in 9ffd861).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 570 python3 benchmarks/compare.py --out $OUT/part1 --scratch /tmp/c43 --workloads resnet50 --system-metrics-workload '' --time-budget-s 480 > $OUT/part1.out 2>&1; el part1 $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/part1/*.md | cut -c1-300; tail -3 $OUT/part1.out
