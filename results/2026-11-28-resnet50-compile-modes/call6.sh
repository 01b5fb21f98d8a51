#!/bin/bash
# usage: bash .gpu/call6.sh [warm]  (1 GPU): ResNet-50 under max-autotune with Inductor's cache cold (saved to $OUT) or warm (carried in .gpu/cache.tgz)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off TORCHINDUCTOR_CACHE_DIR=/tmp/cache/inductor TRITON_CACHE_DIR=/tmp/cache/triton
MODE=${1:-cold}; mkdir -p /tmp/cache /tmp/store
[ "$MODE" = warm ] && tar xzf .gpu/cache.tgz -C /tmp/cache && du -sh /tmp/cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; uptime; python3 -c "import torch,mlflow,hydra;print(torch.__version__,torch.version.cuda,torch.backends.cudnn.version(),mlflow.__version__,hydra.__version__)"; python3 --version; git log -1 --format=%H; } > $OUT/machine-$MODE.txt 2>&1
MODES=max-autotune; [ "$MODE" = warm ] && MODES=max-autotune,auto
S=$(date +%s); timeout ${2:-540} python3 src/run.py -m model=resnet50 data=synthetic_imagenet task=benchmark device=gpu precision=mixed_bf16 batch_size=256 optimize=fast task.repeats=3 framework.compile_mode=$MODES tracking.uri=sqlite:////tmp/store/mlflow.db > $OUT/resnet50-max-autotune-$MODE.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $OUT/resnet50-max-autotune-$MODE.txt
tail -25 $OUT/resnet50-max-autotune-$MODE.txt
python3 src/run.py export --uri sqlite:////tmp/store/mlflow.db -o $OUT/resnet50-max-autotune-$MODE.json > /dev/null 2>&1
du -sh /tmp/cache/*; [ "$MODE" = cold ] && (cd /tmp/cache && tar czf $OUT/cache.tgz . && ls -la $OUT/cache.tgz)
