# device call 48: the split, part 6: ResNet-50 `fast` (CUDA graphs), two harness runs between three bare ones: each
# process compiles for about a minute, and three repeats would not fit a 10-minute call on this host.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 585 python3 benchmarks/compare.py --out $OUT/part6 --scratch /tmp/c48 --workloads resnet50_fast --repeats 2 --system-metrics-workload '' > $OUT/part6.out 2>&1; el part6 $?
grep -h "^| \|^- [a-z0-9_]*: b" $OUT/part6/*.md | cut -c1-300; grep -h "compile_time\|ms/step" $OUT/part6/*.log | cut -c1-160 | head; tail -3 $OUT/part6.out
