# device call 59: BERT-Large bf16 was the one row still "within noise" after calls 57-58 (34 pairs pooled,
# 0.988 (0.962-1.015)): its 2 s blocks move 10-20% within seconds, so only more pairs narrow it: 60 rounds.
# DistilBERT tf32 had 12 pairs in call 57: 20 more.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,temperature.gpu --format=csv,noheader
timeout 280 python3 benchmarks/interleaved.py --rounds 60 --out $OUT/bert --workloads bert_large_bf16 > $OUT/bert.out 2>&1
el bert_large $?
timeout 150 python3 benchmarks/interleaved.py --rounds 20 --out $OUT/distilbert --workloads distilbert_tf32 > $OUT/distilbert.out 2>&1
el distilbert $?
grep -h "^| " $OUT/*/*.md | cut -c1-260; tail -n 2 $OUT/*.out
