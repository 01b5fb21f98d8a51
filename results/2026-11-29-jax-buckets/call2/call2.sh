#!/bin/bash
# usage: bash .gpu/call2.sh   (2 GPUs): JAX BERT-Large x1, x2 with bucketed all-reduces; PyTorch eager BERT-Large x2 pinned, 30 rounds
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s); W=/tmp/w2; mkdir -p $W
{ date -u; nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/machine.txt 2>&1
J="--frameworks jax --models bert_large --rounds 3 --block-seconds 1.5"
timeout 120 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/b1 > $W/b1.txt 2>&1; echo "b1 $(( $(date +%s) - T0 )) s"
timeout 130 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/b2 > $W/b2.txt 2>&1; echo "b2 $(( $(date +%s) - T0 )) s"
L=$(( 570 - ($(date +%s) - T0) )); timeout $L python3 benchmarks/data_parallel.py --frameworks pytorch --models bert_large --rounds 30 --block-seconds 1.5 --counts 2 --out $W/p2 > $W/p2.txt 2>&1; echo "p2 $(( $(date +%s) - T0 )) s"
cd $W && tar czf $OUT/call2.tgz . ; for f in $W/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written [0-9]|rank cores|^\| (jax|pytorch) |rror" | cut -c1-400; done
