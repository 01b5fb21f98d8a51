#!/bin/bash
# usage: bash .gpu/call2.sh   (2 GPUs): JAX ResNet-50 x2 under XLA flag variants against x1; PyTorch eager BERT-Large x1, x2 pinned
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
T0=$(date +%s); W=/tmp/w; mkdir -p $W
{ date -u; nproc; uptime; env | grep -E "NCCL|NVSHMEM|TORCH_SYMM" ; python3 -c "import torch;print(torch.__version__, torch.cuda.nccl.version())"; } > $W/machine.txt 2>&1
J="--frameworks jax --models resnet50 --rounds 3 --block-seconds 1.5"
timeout 100 python3 benchmarks/data_parallel.py $J --counts 1 --out $W/j1 > $W/j1.txt 2>&1; echo "j1 $(( $(date +%s) - T0 )) s"
timeout 90 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/j2 > $W/j2.txt 2>&1; echo "j2 $(( $(date +%s) - T0 )) s"
XLA_FLAGS="--xla_gpu_enable_latency_hiding_scheduler=true" timeout 90 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/j2lhs > $W/j2lhs.txt 2>&1; echo "j2lhs $(( $(date +%s) - T0 )) s"
XLA_FLAGS="--xla_gpu_enable_command_buffer=" timeout 90 python3 benchmarks/data_parallel.py $J --counts 2 --out $W/j2nocb > $W/j2nocb.txt 2>&1; echo "j2nocb $(( $(date +%s) - T0 )) s"
P="--frameworks pytorch --models bert_large --rounds 10 --block-seconds 1.5"
L=$(( 585 - ($(date +%s) - T0) )); timeout $(( L / 2 )) python3 benchmarks/data_parallel.py $P --counts 1 --out $W/p1 > $W/p1.txt 2>&1; echo "p1 $(( $(date +%s) - T0 )) s"
L=$(( 585 - ($(date +%s) - T0) )); timeout $L python3 benchmarks/data_parallel.py $P --counts 2 --out $W/p2 > $W/p2.txt 2>&1; echo "p2 $(( $(date +%s) - T0 )) s"
cd $W && tar czf $OUT/call2.tgz . ; for f in $W/*.txt; do echo "== $f"; grep -v "^I0000\|WARNING: All\|^W0000" $f | grep -E "^==|hand-written [0-9]|rank cores|^\| (jax|pytorch) " | cut -c1-400; done
