# device call 72: Keras' BERT with its segment embedding looked up by selection (SegmentLookup), on the H100:
# the Keras-on-JAX BERT-Large bs32 `fast` cell as a user runs it (call 68: 556.0 seq/s), then call 71's profile
# of its step (call 71: one scatter-add kernel, 32.1 ms of a 63.6 ms step).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/jax.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 250 python3 src/run.py framework=jax optimize=fast device=gpu task=benchmark data=synthetic_text optim=adamw optim.lr=0.0001 model=bert_large batch_size=32 task.warmup_steps=10 task.steps=40 > $OUT/cells.log 2>&1; el bert_large-cell $?
python3 -c "
import sys; sys.path.insert(0, 'src')
from trainbench import results_table; results_table.main([])"
PYTHONPATH=$PYTHONPATH:$PWD/src timeout 250 python3 results/2026-11-22-gpu/diagnostics/call71_jax_profile.py > $OUT/bert_large.txt 2> $OUT/bert_large.err; el profile $?; head -16 $OUT/bert_large.txt
