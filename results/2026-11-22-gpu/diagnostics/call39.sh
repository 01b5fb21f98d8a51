# device call 39: compare.py's seed-MLP epoch row again, four harness runs (call 37: 0.924 from three, while
# call 38's six-epoch processes had the harness's steady epochs 2% faster than the bare loop's in both rounds).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 520 python3 benchmarks/compare.py --out $OUT/mlp --scratch /tmp/c39 --workloads mlp_epoch --repeats 4 --cell-timeout 120 --system-metrics-workload '' > $OUT/mlp.out 2>&1; el mlp $?
grep -h "^| \|^- [a-z0-9_]*: b\|epoch seconds" $OUT/mlp/*.md | cut -c1-260; grep -h "^epoch\|epoch_time_s" $OUT/mlp/*.log | cut -c1-200 | sed 's/"setup_s.*//'
