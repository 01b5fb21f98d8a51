#!/bin/bash
# usage: bash .gpu/call9.sh   (2 GPUs), 2026-11-29 session 13: the build whose processes all leave the starting folder
# off their import path (PYTHONSAFEPATH=1 set by the sweep): the main job, the suite's
# multi_gpu class (PyTorch DDP ranks started by torch elastic), and Keras-on-JAX ResNet-50 on 2 GPUs, all started from a
# folder holding a numpy.py and a torch.py that must never run.
set -u
{ date -u; nproc; uptime; nvidia-smi -L; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export PYTHONUNBUFFERED=1
REPO=$PWD
mkdir -p /tmp/planted /tmp/s9
for m in numpy torch; do echo "open('/tmp/planted/RAN-$m', 'w').write('ran'); raise SystemExit(3)" > /tmp/planted/$m.py; done
cd /tmp/planted
T0=$(date +%s)
MLFLOW_TRACKING_URI=sqlite:////tmp/s9/main.db timeout 200 python3 $REPO/src/run.py > $OUT/main-job.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/main-job.txt
T0=$(date +%s)
timeout 240 python3 $REPO/src/run.py suite device=gpu device.count=2 tracking.uri=sqlite:////tmp/s9/suite.db > $OUT/suite.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/suite.txt
T0=$(date +%s)
timeout 200 python3 $REPO/src/run.py task=benchmark model=resnet50 data=synthetic_imagenet precision=mixed_bf16 framework.channels_last=true batch_size=256 device=gpu framework=jax device.count=2 tracking.uri=sqlite:////tmp/s9/jax.db > $OUT/jax-resnet50.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/jax-resnet50.txt
ls /tmp/planted > $OUT/planted-folder.txt
cd $REPO
python3 src/run.py export --uri sqlite:////tmp/s9/suite.db -o $OUT/suite-v2-2x-nvidia-h200.json > $OUT/export.txt 2>&1; echo "rc=$?" >> $OUT/export.txt
echo "== planted folder (no RAN-* expected):"; cat $OUT/planted-folder.txt
grep -v "^Side by side" $OUT/main-job.txt | tail -6 | cut -c1-260; sed -n '/^Standard suite/,$p' $OUT/suite.txt | cut -c1-260; tail -4 $OUT/suite.txt | cut -c1-200; grep -v "^  " $OUT/jax-resnet50.txt | tail -5 | cut -c1-260; cat $OUT/export.txt
