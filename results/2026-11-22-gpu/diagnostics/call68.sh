# device call 68: Keras-on-JAX `optimize=fast` (XLA, mixed bf16) on the issue's four target workloads, never run on a
# GPU before: the harness cells of compare.py's target rows with framework=jax, as a user runs them, one store.
# keras-hub (DistilBERT, BERT-Large for Keras) travels as a wheel without TensorFlow; its tokenizers are not used.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
left() { echo $(( 570-($(date +%s)-S) )); }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/jax.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
J="python3 src/run.py framework=jax optimize=fast device=gpu"
TEXT="task=benchmark data=synthetic_text optim=adamw optim.lr=0.0001"
timeout $(left) $J task=train model=mlp data=synthetic data.num_samples=50000 data.num_val_samples=1000 batch_size=32 task.epochs=3 optim=sgd optim.lr=0.01 optim.momentum=0.9 >> $OUT/cells.log 2>&1; el mlp $?
timeout $(left) $J $TEXT model=distilbert batch_size=64 task.warmup_steps=10 task.steps=100 >> $OUT/cells.log 2>&1; el distilbert $?
timeout $(left) $J $TEXT model=bert_large batch_size=32 task.warmup_steps=10 task.steps=40 >> $OUT/cells.log 2>&1; el bert_large $?
timeout $(left) $J task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 task.warmup_steps=10 task.steps=50 >> $OUT/cells.log 2>&1; el resnet50 $?
python3 - <<'PY'
import os, sys
sys.path.insert(0, "src")
from trainbench import results_table
results_table.main(["--uri", os.environ["MLFLOW_TRACKING_URI"]])
import mlflow
for run in mlflow.MlflowClient().search_runs(["1"], "tags.`trainbench.kind` = 'cell'"):
    m, t = run.data.metrics, run.data.tags
    keep = {k: v for k, v in t.items() if k.startswith(("trainbench.compile", "trainbench.fused", "trainbench.capture", "jax.", "keras", "sw."))}
    print(run.data.tags.get("mlflow.runName"), run.info.status, {k: round(m[k], 3) for k in ("samples_per_s", "compile_time_s", "warmup_time_s", "epoch_time_s", "mfu") if k in m}, keep)
PY
