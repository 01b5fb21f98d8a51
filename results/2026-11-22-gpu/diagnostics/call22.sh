# device call 22: DistilBERT bs64 bf16 (eager) harness vs bare, 4 harness runs between 5 bare ones, twice: every process
# pinned to the same four CPUs (taskset: the bare loop's launch-bound speed follows the CPU it lands on), then unpinned
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
taskset -c 4-7 timeout 280 python3 benchmarks/compare.py --out $OUT/pinned --scratch /tmp/c22p --workloads distilbert_bf16 --repeats 4 --system-metrics-workload '' > $OUT/pinned.out 2>&1; el pinned $?
timeout $(( 560-($(date +%s)-S) )) python3 benchmarks/compare.py --out $OUT/free --scratch /tmp/c22f --workloads distilbert_bf16 --repeats 4 --system-metrics-workload '' > $OUT/free.out 2>&1; el unpinned $?
grep -h "distilbert_bf16 |\|^- distilbert_bf16:" $OUT/pinned/*.md $OUT/free/*.md
