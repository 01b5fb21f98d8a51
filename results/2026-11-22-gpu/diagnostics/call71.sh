# device call 71: jax.profiler traces of Keras-on-JAX BERT-Large bs32 and, for contrast, DistilBERT bs64 (at parity
# with PyTorch in call 68), `optimize=fast`, 5 steps each: call71_jax_profile.py.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PYTHONPATH:$PWD/src
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
P=results/2026-11-22-gpu/diagnostics/call71_jax_profile.py
timeout 280 python3 $P > $OUT/bert_large.txt 2> $OUT/bert_large.err; el bert_large $?; head -50 $OUT/bert_large.txt
timeout 250 python3 $P model=distilbert batch_size=64 > $OUT/distilbert.txt 2> $OUT/distilbert.err; el distilbert $?; head -30 $OUT/distilbert.txt
