# device call 57: harness vs bare interleaved block by block in ONE process (benchmarks/interleaved.py, new):
# the launch-bound rows that compare.py, one process per run, could not judge at 2% on this shared host
# (calls 44-53: the bare loop alone moved 8-28% process to process). 12 rounds, ~2 s blocks (the MLP: an epoch).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,temperature.gpu --format=csv,noheader
timeout 545 python3 benchmarks/interleaved.py --rounds 12 --out $OUT/il \
  --workloads mlp_epoch,distilbert_tf32,bert_large_bf16,distilbert_bf16,matmul_bf16,mlp_fast > $OUT/il.out 2>&1
el interleaved $?
grep "^| " $OUT/il/*.md | cut -c1-260; tail -n 4 $OUT/il.out
