#!/bin/bash
# usage: bash .gpu/call8.sh   2026-11-29 session 12, the final build (after the review fixes) on one GPU as a user
# runs it: the main job, then two workloads of the suite with their summary.
set -u
{ date -u; nproc; uptime; nvidia-smi -L; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export PYTHONUNBUFFERED=1
mkdir -p /tmp/s8
T0=$(date +%s)
MLFLOW_TRACKING_URI=sqlite:////tmp/s8/mlflow.db timeout 200 python3 src/run.py > $OUT/main-job.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/main-job.txt
T0=$(date +%s)
timeout 200 python3 src/run.py suite device=gpu +suite_cell=gemm,mlp_train tracking.uri=sqlite:////tmp/s8/mlflow.db > $OUT/suite-part.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/suite-part.txt
grep -v "^Side by side" $OUT/main-job.txt | tail -12 | cut -c1-260; sed -n '/^Standard suite/,$p' $OUT/suite-part.txt | cut -c1-260
