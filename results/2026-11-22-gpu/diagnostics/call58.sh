# device call 58: call 57's rows still "within noise" with 12 rounds (eager MLP epoch, BERT-Large bf16, DistilBERT
# bf16), now 22 rounds each, and matmul bf16 (call 57 refused it: the bare product left TF32 off where the harness's
# mixed_bf16 turns it on; the bare loop now sets it as the harness does, which a bf16 product ignores).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,temperature.gpu --format=csv,noheader
timeout 550 python3 benchmarks/interleaved.py --rounds 22 --out $OUT/il \
  --workloads matmul_bf16,mlp_epoch,bert_large_bf16,distilbert_bf16 > $OUT/il.out 2>&1
el interleaved $?
grep "^| " $OUT/il/*.md | cut -c1-260; tail -n 4 $OUT/il.out
