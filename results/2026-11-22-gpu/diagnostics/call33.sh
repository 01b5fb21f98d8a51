# device calls 33 and 34: compare.py's core rows that no call since the first ones has re-measured, at the code this
# session ends with: ResNet-50 fp32, tf32, bf16+channels_last and the bf16 matmul (call 33: `bash call33.sh 33`),
# BERT-Large bf16 and the seed MLP's epoch (call 34: `bash call33.sh 34`); one harness run each between two bare
# ones. `compare.py --merge` joins the two calls' .json into one table.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
if [ "$1" = 33 ]; then W=resnet50_fp32,resnet50_tf32,resnet50_bf16_cl,matmul_bf16; else W=bert_large_bf16,mlp_epoch; fi
timeout 585 python3 benchmarks/compare.py --out $OUT/core --scratch /tmp/c$1 --workloads $W --repeats 1 --cell-timeout 200 --system-metrics-workload '' > $OUT/core.out 2>&1; el core $?
grep -h "^| [a-z0-9_]* |\|^- [a-z0-9_]*: b" $OUT/core/*.md | cut -c1-260; tail -3 $OUT/core.out | cut -c1-200
