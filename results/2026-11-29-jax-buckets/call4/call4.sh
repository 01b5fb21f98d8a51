#!/bin/bash
# usage: bash .gpu/call4.sh   (2 GPUs): the scaling study as a user runs it, Keras on JAX with the bucketed step, 1 and 2 GPUs; exported
set -u
{ date -u; nproc; uptime; git log -1 --format=%H 2>&1; sha1sum src/trainbench/frameworks/jax/data_parallel.py; } > $OUT/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1
mkdir -p /tmp/s; T0=$(date +%s)
timeout 480 python3 src/run.py -m +experiment=scaling_study framework=jax device.count=1,2 tracking.uri=sqlite:////tmp/s/mlflow.db > $OUT/scaling.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - T0 ))" >> $OUT/scaling.txt
python3 src/run.py export tracking.uri=sqlite:////tmp/s/mlflow.db -o $OUT/2026-11-29-scaling-study-jax-2x-nvidia-h200.json >> $OUT/scaling.txt 2>&1
python3 - <<'PY' > $OUT/table.txt 2>&1
import mlflow
c = mlflow.MlflowClient("sqlite:////tmp/s/mlflow.db")
for e in c.search_experiments():
    for r in c.search_runs([e.experiment_id]):
        t, m, p = r.data.tags, r.data.metrics, r.data.params
        if t.get("trainbench.kind") != "cell": continue
        print(t.get("mlflow.runName"), t.get("trainbench.outcome"), round(m.get("samples_per_s", 0), 1), m.get("samples_per_s_ci95"), m.get("scaling_efficiency"), m.get("scaling_efficiency_ci95"), t.get("trainbench.noisy"), t.get("trainbench.rank_cores"), m.get("host_load_1m_start"), m.get("host_load_1m_end"), t.get("trainbench.data_parallel"), t.get("trainbench.reason"))
PY
tail -25 $OUT/scaling.txt; cat $OUT/table.txt
