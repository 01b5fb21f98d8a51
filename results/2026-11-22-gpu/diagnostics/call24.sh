# device call 24: compare.py's ResNet-50 rows after the change to CUDA graphs (reduce-overhead) as ResNet-50's mode
# in optimize=fast and in the bare loop's default: resnet50_fast, then resnet50_tuned (+ coordinate-descent tuning)
# with call 21's Inductor cache (.cache-ind/ind.tgz), so the tuned compiles reuse its tuned launch settings
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind PYTHONUNBUFFERED=1
tar -C /tmp -xzf .cache-ind/ind.tgz
timeout 200 python3 benchmarks/compare.py --out $OUT/fast --scratch /tmp/c24f --workloads resnet50_fast --repeats 1 --system-metrics-workload '' > $OUT/fast.out 2>&1; el resnet50_fast $?
timeout $(( 570-($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/tuned --scratch /tmp/c24t --workloads resnet50_tuned --repeats 1 --system-metrics-workload '' > $OUT/tuned.out 2>&1; el resnet50_tuned $?
grep -h "resnet50_[a-z]* |\|^- resnet50" $OUT/fast/*.md $OUT/tuned/*.md; tail -5 $OUT/tuned.out
