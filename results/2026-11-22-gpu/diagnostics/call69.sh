# device call 69: Keras-on-JAX BERT-Large bs32 read 556 seq/s under optimize=fast in call 68, against 822.4 for
# mixed_bf16 on the H200 of 2026-11-21. Is it repeatable, and is it the `fast` switch? The same cell again, then
# optimize=none precision=mixed_bf16 (for JAX the two should be the same program), then fast with 100 timed steps.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
left() { echo $(( 570-($(date +%s)-S) )); }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/jax.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
J="python3 src/run.py framework=jax device=gpu task=benchmark data=synthetic_text optim=adamw optim.lr=0.0001 model=bert_large batch_size=32 task.warmup_steps=10"
timeout $(left) $J optimize=fast task.steps=40 >> $OUT/cells.log 2>&1; el fast $?
timeout $(left) $J precision=mixed_bf16 task.steps=40 >> $OUT/cells.log 2>&1; el mixed_bf16 $?
timeout $(left) $J optimize=fast task.steps=100 >> $OUT/cells.log 2>&1; el fast-100 $?
python3 - <<'PY'
import os, sys
sys.path.insert(0, "src")
from trainbench import results_table
results_table.main(["--uri", os.environ["MLFLOW_TRACKING_URI"]])
PY
