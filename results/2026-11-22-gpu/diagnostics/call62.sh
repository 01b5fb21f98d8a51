# device call 62: the final code of this session on the GPU, after the review commit 24140c8 (interleaved.py reads
# its environment once; flop_formulas maps kernels straight to formulas): interleaved.py, 3 rounds of three rows
# (the captured MLP graph, a transformer step with the event clock, the matmul), then call 61's FLOP check again.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 300 python3 benchmarks/interleaved.py --rounds 3 --out $OUT/il --workloads mlp_fast,distilbert_tf32,matmul_bf16 > $OUT/il.out 2>&1
el interleaved $?
grep -h "^| " $OUT/il/*.md | cut -c1-220
bash results/2026-11-22-gpu/diagnostics/call61.sh; el flops $?
