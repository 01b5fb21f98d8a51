#!/bin/bash
# usage: bash .gpu/jax_dp.sh   (2 GPUs): Keras-on-JAX data parallel, the harness's per-device step against a pure-JAX loop
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; nproc; uptime; python3 -c "import jax,keras;print(jax.__version__,keras.__version__)"; } > $OUT/machine.txt 2>&1
A="--frameworks jax --rounds 6 --block-seconds 1.5"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/data_parallel.py $A --models resnet50 --counts 1 --out $OUT/r1 > $OUT/r1.txt 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 benchmarks/data_parallel.py $A --models bert_large --counts 1 --out $OUT/b1 > $OUT/b1.txt 2>&1 &
wait; echo "x1 done at $(( $(date +%s) - T0 )) s"; uptime
timeout 170 python3 benchmarks/data_parallel.py $A --models resnet50 --counts 2 --profile-steps 5 --out $OUT/r2 > $OUT/r2.txt 2>&1
echo "r2 done at $(( $(date +%s) - T0 )) s"
timeout 170 python3 benchmarks/data_parallel.py $A --models bert_large --counts 2 --profile-steps 5 --out $OUT/b2 > $OUT/b2.txt 2>&1
echo "b2 done at $(( $(date +%s) - T0 )) s"
L=$(( 585 - ($(date +%s) - T0) )); [ $L -gt 60 ] && timeout $L python3 benchmarks/data_parallel.py --frameworks jax --rounds 4 --block-seconds 1.5 --models resnet50 --counts 2 --jax-loop keras_io --jax-step keras --profile-steps 5 --out $OUT/r2k > $OUT/r2k.txt 2>&1
echo "all done at $(( $(date +%s) - T0 )) s"
for f in $OUT/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written|rc=" ; done
