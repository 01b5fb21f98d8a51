#!/usr/bin/env bash
# MLX's CUDA backend against PyTorch on the same card, one call (issue 29). Every cell is run as a user runs
# it (python src/run.py), into one SQLite store under $OUT; each pair is run twice, in both orders.
# Needs: .whl carried (mlflow, hydra, keras wheels) and /tmp/mlxsite installed by the two calls before.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/mlxsite:/tmp/site
export MLFLOW_TRACKING_URI=sqlite:///$OUT/mlflow.db TRAINBENCH_HYDRA_DIR=$OUT/multirun
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c 'import mlx.core as mx, torch; print("mlx", mx.__version__, mx.default_device(), "torch", torch.__version__)'; } > $OUT/versions.txt 2>&1
sweep() {  # name, then overrides; a bound per sweep so one hang cannot take the call
  local name=$1; shift
  echo "== $name: $*" >> $OUT/progress.txt
  timeout "${BOUND:-240}" python3 src/run.py -m device=gpu "$@" > "$OUT/$name.log" 2>&1
  echo "   rc=$? at $(date +%T)" >> $OUT/progress.txt
}
case "${1:-a}" in
a)
  sweep train1 framework=mlx,pytorch
  sweep train2 framework=pytorch,mlx
  sweep fast1 framework=mlx,pytorch optimize=fast
  sweep fast2 framework=pytorch,mlx optimize=fast
  sweep rn50_1 framework=mlx,pytorch task=benchmark model=resnet50 data=synthetic_imagenet batch_size=128 precision=mixed_bf16 task.repeats=5
  sweep rn50_2 framework=pytorch,mlx task=benchmark model=resnet50 data=synthetic_imagenet batch_size=128 precision=mixed_bf16 task.repeats=5
  sweep bertl framework=mlx,pytorch,pytorch,mlx task=benchmark model=bert_large data=synthetic_text batch_size=32 precision=mixed_bf16 optim=adamw task.repeats=5
  ;;
b)
  sweep infer +experiment=inference_resnet50 framework=mlx,pytorch
  sweep infer_bert +experiment=inference_bert_large framework=mlx,pytorch
  BOUND=300 sweep rn50_fast framework=mlx,pytorch task=benchmark model=resnet50 data=synthetic_imagenet batch_size=128 optimize=fast task.repeats=5
  ;;
esac
