# device call 55: MLX on CUDA, never run before. Rebuild the mlx-cuda-13 wheel from call 54's half and this call's
# (.mlxb also holds mlx 0.32.4 and the mlflow/hydra wheels without keras), then cells on device=gpu: the seed MLP's
# train task eager (fp32) and fast (mx.compile, bf16), bf16 matmul n=8192, ResNet-50 bs64 bf16 benchmark.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
W=/tmp/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
cat /tmp/mlxparts/part1 .mlxb/part2 > $W && [ "$(sha256sum $W | cut -c1-64)" = "$(cat .mlxb/sha256)" ] || { echo "wheel halves missing or wrong"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .mlxb/*.whl $W || exit 4
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/mlflow.db
python3 -c "import mlx.core as mx; print('mlx', mx.__version__, 'cuda', mx.cuda.is_available(), mx.default_device())" 2>&1 | tail -3; el import $?
MLP="framework=mlx device=gpu model=mlp task=train data=synthetic data.num_samples=50000 data.num_val_samples=1000 batch_size=32 task.epochs=3 optim=sgd optim.lr=0.01 optim.momentum=0.9"
timeout 120 python3 src/run.py $MLP precision=fp32 > $OUT/mlp-eager.txt 2>&1; el mlp-eager $?
timeout 120 python3 src/run.py $MLP optimize=fast > $OUT/mlp-fast.txt 2>&1; el mlp-fast $?
timeout 90 python3 src/run.py framework=mlx device=gpu task=matmul precision=mixed_bf16 'task.sizes=[8192]' > $OUT/matmul.txt 2>&1; el matmul $?
timeout 150 python3 src/run.py framework=mlx device=gpu task=benchmark model=resnet50 data=synthetic_imagenet batch_size=64 precision=mixed_bf16 task.warmup_steps=3 task.steps=20 > $OUT/resnet50.txt 2>&1; el resnet50 $?
grep -h "epoch \|finished\|failed\|Error\|error" $OUT/*.txt | cut -c1-250
