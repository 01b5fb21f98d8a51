# device call 52: compare.py at HEAD (23a3f06: its interval now from trainbench.timing, so its parent imports numpy
# and scipy here for the first time) on the seed MLP's fast mode, never run at this commit (target: one epoch of
# 50,000 in <= 0.5 s, i.e. >= 100,000 samples/s), then the eager MLP epoch row for as long as the call allows.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 300 python3 benchmarks/compare.py --out $OUT/mlp-fast --scratch /tmp/c52 --workloads mlp_fast --repeats 1 --system-metrics-workload '' > $OUT/mlp-fast.out 2>&1; el mlp_fast $?
timeout 240 python3 benchmarks/compare.py --out $OUT/mlp-epoch --scratch /tmp/c52b --workloads mlp_epoch --repeats 3 --system-metrics-workload '' > $OUT/mlp-epoch.out 2>&1; el mlp_epoch $?
grep -h "^| \|epoch seconds" $OUT/*/*.md | cut -c1-300; tail -3 $OUT/*.out
