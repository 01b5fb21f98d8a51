# device call 67: ResNet-50 bs256 `fast` (bf16, channels_last, CUDA graphs, fused SGD), bare loop: three Inductor
# levers not tried in calls 14-29, each against the plain mode in the same call. BN's statistics are reductions
# to a few hundred channels over 256x56x56 values, which Inductor splits in two kernels; call 21's profile put
# 24 of the step's 42.5 ms in such Triton kernels.
#   coop:   TORCHINDUCTOR_COOPERATIVE_REDUCTIONS=1 (one kernel with cross-block synchronization instead)
#   multi:  TORCHINDUCTOR_MULTI_KERNEL=1 (persistent and non-persistent reductions, picked by benchmarking)
#   fusion: TORCHINDUCTOR_BENCHMARK_FUSION=1 (fusion decisions by benchmarking)
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
B="benchmarks/bare_loops.py resnet50 --variant fast --batch-size 256 --warmup 10 --steps 50 --device cuda"
left() { echo $(( 575-($(date +%s)-S) )); }
show() { python3 -c "import json,sys; [print(sys.argv[1], round(d.get('samples_per_s',0),1), 'setup', round(d.get('setup_s',0) or 0,1), d.get('error','')) for d in map(json.loads, open(sys.argv[2]))]" $1 $OUT/$1.jsonl; }
timeout $(left) python3 $B > $OUT/base.jsonl 2> $OUT/base.err; el base $?; show base
TORCHINDUCTOR_COOPERATIVE_REDUCTIONS=1 timeout $(left) python3 $B > $OUT/coop.jsonl 2> $OUT/coop.err; el coop $?; show coop
TORCHINDUCTOR_MULTI_KERNEL=1 timeout $(left) python3 $B > $OUT/multi.jsonl 2> $OUT/multi.err; el multi $?; show multi
timeout $(left) python3 $B > $OUT/base2.jsonl 2> $OUT/base2.err; el base2 $?; show base2
TORCHINDUCTOR_BENCHMARK_FUSION=1 timeout $(left) python3 $B > $OUT/fusion.jsonl 2> $OUT/fusion.err; el fusion $?; show fusion
