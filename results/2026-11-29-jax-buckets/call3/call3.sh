#!/bin/bash
# usage: bash .gpu/call3.sh   (2 GPUs): JAX BERT-Large x1, x2 with bucketed all-reduces; JAX ResNet-50 x1, x2 again against the raveled pure-JAX loop
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s); W=/tmp/w3; mkdir -p $W
{ date -u; nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/machine.txt 2>&1
J="--frameworks jax --models bert_large --rounds 3 --block-seconds 1.5"
timeout 150 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/b1 > $W/b1.txt 2>&1; echo "b1 $(( $(date +%s) - T0 )) s"
timeout 150 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/b2 > $W/b2.txt 2>&1; echo "b2 $(( $(date +%s) - T0 )) s"
J="--frameworks jax --models resnet50 --rounds 3 --block-seconds 1.5"
timeout 100 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/j1 > $W/j1.txt 2>&1; echo "j1 $(( $(date +%s) - T0 )) s"
L=$(( 570 - ($(date +%s) - T0) )); timeout $L python3 benchmarks/data_parallel.py $J --counts 2 --jax-loop pure_flat --out $W/j2flat > $W/j2flat.txt 2>&1; echo "j2flat $(( $(date +%s) - T0 )) s"
cd $W && tar czf $OUT/call3.tgz . ; for f in $W/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written [0-9]|^\| jax |rror" | cut -c1-300; done
