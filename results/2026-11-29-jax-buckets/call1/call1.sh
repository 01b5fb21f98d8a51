#!/bin/bash
# usage: bash .gpu/call1.sh   (2 GPUs): JAX ResNet-50 per-device step with bucketed (raveled) all-reduces, x1 and x2
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s); W=/tmp/w; mkdir -p $W; B=src/trainbench/frameworks/jax/data_parallel.py
{ date -u; nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv; git log -1 --format=%H 2>&1; sha1sum $B; } > $W/machine.txt 2>&1
J="--frameworks jax --models resnet50 --rounds 3 --block-seconds 1.5"
timeout 100 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/j1 > $W/j1.txt 2>&1; echo "j1 $(( $(date +%s) - T0 )) s"
timeout 110 python3 benchmarks/data_parallel.py $J --counts 2 --profile-steps 5 --out $W/j2b25 > $W/j2b25.txt 2>&1; echo "j2b25 $(( $(date +%s) - T0 )) s"
cp $B /tmp/B.py; sed -i 's/^BUCKET_BYTES = .*/BUCKET_BYTES = 2**40/' $B
timeout 110 python3 benchmarks/data_parallel.py $J --counts 2 --profile-steps 5 --jax-loop pure_flat --out $W/j2one > $W/j2one.txt 2>&1; echo "j2one $(( $(date +%s) - T0 )) s"
cp /tmp/B.py $B
L=$(( 570 - ($(date +%s) - T0) )); XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,COLLECTIVES" timeout $L python3 benchmarks/data_parallel.py $J --counts 2 --out $W/j2coll > $W/j2coll.txt 2>&1; echo "j2coll $(( $(date +%s) - T0 )) s"
cd $W && tar czf $OUT/call1.tgz . ; for f in $W/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written [0-9]|^\| jax |rror" | cut -c1-300; done
