# device call 60: the one fast-mode setting never run in the harness on a GPU: ResNet-50 bs256 under full
# max-autotune (CUDA graphs, coordinate-descent tuning, Triton templates against cuDNN/cuBLAS). The bare loop
# compiled it in 529 s and ran 5,908.7 img/s (call 29), so this cell may not finish inside one call: the
# timeout leaves the last lines of its log.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/call60-store.sqlite
timeout 570 python3 src/run.py task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 device=gpu \
  optimize=fast optimize.compile_mode=max-autotune task.warmup_steps=10 task.steps=50 > $OUT/resnet50-max-autotune.txt 2>&1
el harness $?
grep -v "^AUTOTUNE\|^  triton_\|^  convolution\|^  mm \|SingleProcess AUTOTUNE" $OUT/resnet50-max-autotune.txt | tail -n 25
