#!/bin/bash
# usage: bash .gpu/call7.sh (1 GPU, warm machine after call6): ResNet-50 max-autotune vs auto, warm caches, alternating, 8 repeats each
set -u
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off TORCHINDUCTOR_CACHE_DIR=/tmp/cache/inductor TRITON_CACHE_DIR=/tmp/cache/triton
mkdir -p /tmp/store7; uptime > $OUT/machine-alt.txt
for R in 1 2; do S=$(date +%s); timeout 190 python3 src/run.py -m model=resnet50 data=synthetic_imagenet task=benchmark device=gpu precision=mixed_bf16 batch_size=256 optimize=fast task.repeats=8 framework.compile_mode=max-autotune,auto tracking.uri=sqlite:////tmp/store7/mlflow.db >> $OUT/resnet50-modes-alternating.txt 2>&1; echo "round $R rc=$? wall_s=$(( $(date +%s) - S ))" >> $OUT/resnet50-modes-alternating.txt; done
grep -E "warm-up steps|finished in|ms/step" $OUT/resnet50-modes-alternating.txt; tail -14 $OUT/resnet50-modes-alternating.txt
python3 src/run.py export --uri sqlite:////tmp/store7/mlflow.db -o $OUT/resnet50-modes-alternating.json > /dev/null 2>&1; ls $OUT
