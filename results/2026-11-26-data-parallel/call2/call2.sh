# Issue 30, call 2: optimize=fast on one and two GPUs (torch.compile'd DDP against a hand-written compiled DDP loop,
# interleaved: benchmarks/data_parallel.py --variant fast), two lanes at once (GPUs 0,1 and GPU 2); then the scaling
# study's BERT-Large cells at 1 and 4 GPUs as a user runs them (all four GPUs, nothing else running).
cd .calls/ddp || exit 1
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s" | tee -a $OUT/steps.txt; }
left() { echo $(( ${1:-420}-($(date +%s)-S) )); }
export PYTHONUNBUFFERED=1 TRAINBENCH_HYDRA_DIR=/tmp/multirun
D="python3 benchmarks/data_parallel.py --variant fast --rounds 4 --block-seconds 1.5 --models bert_large,resnet50"
( CUDA_VISIBLE_DEVICES=0,1 timeout $(left 280) $D --frameworks pytorch --counts 2 --profile-steps 3 --out $OUT/fast2 > $OUT/fast2.txt 2>&1; el fast2 $? ) & LANE01=$!
( CUDA_VISIBLE_DEVICES=2 timeout $(left 280) $D --frameworks pytorch --counts 1 --out $OUT/fast1 > $OUT/fast1.txt 2>&1; el fast1 $? ) & LANE2=$!
wait $LANE01 $LANE2
mkdir -p $OUT/scaling; MLFLOW_TRACKING_URI=sqlite:///$OUT/scaling/mlflow.db timeout $(left) python3 src/run.py -m +experiment=scaling_study +scaling_cell=bert_large_bs32 device.count=1,4 > $OUT/scaling.txt 2>&1; el scaling $?
cd $OUT && tar czf results.tgz fast1 fast2 scaling && rm -rf fast1 fast2 scaling
cat $OUT/steps.txt; grep -h -A3 "^== \|^\[cell\|^benchmark:\|samples/s\|scaling" $OUT/*.txt | cut -c1-300 | tail -60
