#!/bin/bash
# usage: bash .gpu/call7.sh   2026-11-29 session 12: the standard suite's gpu class (one GPU) as a user runs it with the
# current build: its first screen and suite summary against the contributed machines, then the store exported.
set -u
{ date -u; nproc; uptime; nvidia-smi -L; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
mkdir -p /tmp/s7
T0=$(date +%s)
timeout 420 python3 src/run.py suite device=gpu tracking.uri=sqlite:////tmp/s7/mlflow.db > $OUT/suite.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/suite.txt
python3 src/run.py export --uri sqlite:////tmp/s7/mlflow.db -o $OUT/suite-v2-nvidia-h200.json > $OUT/export.txt 2>&1; echo "rc=$?" >> $OUT/export.txt
sed -n '/^cell /,$p' $OUT/suite.txt | grep -v "^Side by side" | cut -c1-260 | head -80; cat $OUT/export.txt
