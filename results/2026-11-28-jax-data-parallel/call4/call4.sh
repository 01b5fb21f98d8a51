#!/bin/bash
# usage: bash .gpu/call4.sh   (2 GPUs): JAX ResNet-50 per-device step, profiled at 1 GPU, and at 2 with one big gradient all-reduce
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s); W=/tmp/w; mkdir -p $W
J="--frameworks jax --models resnet50 --rounds 3 --block-seconds 1.5 --profile-steps 5"
timeout 100 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/j1 > $W/j1.txt 2>&1; echo "j1 $(( $(date +%s) - T0 )) s"
XLA_FLAGS="--xla_gpu_all_reduce_combine_threshold_bytes=268435456" timeout 110 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/j2big > $W/j2big.txt 2>&1; echo "j2big $(( $(date +%s) - T0 )) s"
cd $W && tar czf $OUT/call4.tgz . ; for f in $W/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written [0-9]|^\| jax " | cut -c1-300; done
