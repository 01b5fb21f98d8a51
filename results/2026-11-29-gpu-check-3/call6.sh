#!/bin/bash
# usage: bash .gpu/call6.sh   (2 GPUs), 2026-11-29 session 12: the current build as a user runs it on 2 GPUs:
# the suite's multi_gpu class (PyTorch DDP, cells started with python -P), then Keras-on-JAX ResNet-50 bs256 bf16 at 1 and 2
# GPUs (the bucketed per-device step of a1d3707, not run on 2 GPUs since), then the suite's store exported.
set -u
{ date -u; nproc; uptime; nvidia-smi -L; git log --oneline -1 2>/dev/null; sha1sum src/trainbench/frameworks/jax/data_parallel.py src/trainbench/locations.py; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export PYTHONUNBUFFERED=1
mkdir -p /tmp/s6 /tmp/j6
T0=$(date +%s)
timeout 240 python3 src/run.py suite device=gpu device.count=2 tracking.uri=sqlite:////tmp/s6/mlflow.db > $OUT/suite.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/suite.txt
python3 src/run.py export --uri sqlite:////tmp/s6/mlflow.db -o $OUT/suite-v2-2x-nvidia-h200.json > $OUT/export.txt 2>&1; echo "rc=$?" >> $OUT/export.txt
T0=$(date +%s)
timeout 300 python3 src/run.py -m task=benchmark model=resnet50 data=synthetic_imagenet precision=mixed_bf16 framework.channels_last=true batch_size=256 device=gpu framework=jax device.count=1,2 tracking.uri=sqlite:////tmp/j6/mlflow.db > $OUT/jax-resnet50.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/jax-resnet50.txt
python3 - <<'PY' > $OUT/table.txt 2>&1
import mlflow
for uri in ("sqlite:////tmp/s6/mlflow.db", "sqlite:////tmp/j6/mlflow.db"):
    c = mlflow.MlflowClient(uri)
    e = c.get_experiment_by_name("trainbench")
    for r in c.search_runs([e.experiment_id]):
        t, m = r.data.tags, r.data.metrics
        if t.get("trainbench.kind") == "cell":
            print(uri[-20:], t.get("mlflow.runName"), t.get("trainbench.num_devices"), t.get("trainbench.outcome"), round(m.get("samples_per_s", 0), 1), m.get("samples_per_s_ci95"), m.get("scaling_efficiency"), m.get("scaling_efficiency_ci95"), t.get("trainbench.data_parallel"))
PY
tail -25 $OUT/suite.txt | cut -c1-250; grep -v "^  " $OUT/jax-resnet50.txt | tail -8 | cut -c1-250; cat $OUT/table.txt $OUT/export.txt
