#!/bin/bash
# usage: bash .gpu/call8.sh (1 GPU): the main job on the GPU (prestart + data prefetch), a benchmark sweep and its
# resume (config hash of the prepared cell), and the Python API, on one new store
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1 && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 TRAINBENCH_SHARED_RUNS=off
U=sqlite:////tmp/s8/mlflow.db; mkdir -p /tmp/s8; O=$OUT/gpu-check.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c "import torch,jax,keras;print(torch.__version__,jax.__version__,keras.__version__)"; git log -1 --format=%H; } > $O 2>&1
S=$(date +%s); echo "== main job on the GPU" >> $O; timeout 120 python3 src/run.py device=gpu tracking.uri=$U >> $O 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $O
B="model=resnet50 task=benchmark device=gpu precision=mixed_bf16 batch_size=256 task.repeats=3 tracking.uri=$U"
S=$(date +%s); echo "== sweep" >> $O; timeout 200 python3 src/run.py -m framework=pytorch,jax $B >> $O 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $O
S=$(date +%s); echo "== resume" >> $O; timeout 100 python3 src/run.py -m framework=pytorch,jax $B sweep.resume=true >> $O 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $O
S=$(date +%s); echo "== API" >> $O; timeout 100 python3 -c "
import sys; sys.path.insert(0, 'src'); import trainbench
s = trainbench.run(['model=mlp', 'device=gpu', 'batch_size=32,64'], tracking_uri='$U', output='quiet')
print(s.outcome, [(c.name, c.outcome, c.figure) for c in s.cells])
for row in trainbench.compare(s): print(row.title, [(m.kind, m.machine, m.figure) for m in row.machines])
" >> $O 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $O
python3 src/run.py export --uri $U -o $OUT/gpu-check.json >> $O 2>&1
grep -E "^==|rc=|skipp|resum|finished|samples/s|Traceback|Error" $O | cut -c1-250 | head -60
