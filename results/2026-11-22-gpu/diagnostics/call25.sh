# device call 25: compare.py's resnet50_fast row after the change (reduce-overhead for ResNet-50 in optimize=fast and
# in the bare loop): bare, harness, bare, harness, bare. Call 24 gave it 200 s, too few for the harness's compile.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind PYTHONUNBUFFERED=1
timeout 560 python3 benchmarks/compare.py --out $OUT/fast --scratch /tmp/c25f --workloads resnet50_fast --repeats 2 --system-metrics-workload '' > $OUT/fast.out 2>&1; el resnet50_fast $?
grep -h "resnet50_[a-z]* |\|^- resnet50" $OUT/fast/*.md; tail -12 $OUT/fast.out | cut -c1-200
