# device call 33: compare.py's core rows that no call since the first ones has re-measured, at commit c76559f (the
# code this session ends with): ResNet-50 fp32, tf32, bf16+channels_last, BERT-Large bf16, the seed MLP's epoch and
# the bf16 matmul, one harness run each between two bare ones (a device call lasts at most 10 minutes).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
timeout 585 python3 benchmarks/compare.py --out $OUT/core --scratch /tmp/c33 --workloads resnet50_fp32,resnet50_tf32,resnet50_bf16_cl,bert_large_bf16,mlp_epoch,matmul_bf16 --repeats 1 --time-budget-s 470 --cell-timeout 200 --system-metrics-workload '' > $OUT/core.out 2>&1; el core $?
grep -h "^| [a-z0-9_]* |\|^- [a-z0-9_]*: b" $OUT/core/*.md | cut -c1-260; tail -3 $OUT/core.out | cut -c1-200
