#!/bin/bash
# The torch on the GPU image (2.11) against this session's process-group code: the timeouts' functions, a digits
# GPU cell, 2 gloo ranks on one node, and 2 nodes of 1 rank joined by hand (one of them never joining).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export TRAINBENCH_SHARED_RUNS=off PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:////tmp/c9/mlflow.db
mkdir -p /tmp/c9 && cd /tmp/c9
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, torch.distributed.distributed_c10d as c; print(torch.__version__, c._get_default_timeout('nccl'), c._get_default_timeout('gloo'), hasattr(c, 'set_timeout'), hasattr(c, '_set_pg_timeout'))"; } > $OUT/machine.txt 2>&1
R=$OLDPWD
timeout 200 python3 $R/src/run.py model=mlp data=digits device=gpu task.epochs=2 tracking.system_metrics_interval_s=0 > $OUT/gpu-digits.txt 2>&1; echo "rc=$?" >> $OUT/gpu-digits.txt
timeout 200 python3 $R/src/run.py model=mlp data=digits device=cpu device.count=2 task.epochs=1 tracking.system_metrics_interval_s=0 > $OUT/cpu-2ranks.txt 2>&1; echo "rc=$?" >> $OUT/cpu-2ranks.txt
P=29611
(python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$P --rdzv-conf=is_host=false -m trainbench.cell.ranks model=mlp data=digits device=cpu batch_size=32 task.epochs=1 device.nodes=2 tracking.system_metrics_interval_s=0 > $OUT/node1.txt 2>&1 &)
PET_RDZV_ENDPOINT=127.0.0.1:$P timeout 200 python3 $R/src/run.py model=mlp data=digits device=cpu batch_size=32 task.epochs=1 device.nodes=2 tracking.system_metrics_interval_s=0 > $OUT/two-nodes.txt 2>&1; echo "rc=$?" >> $OUT/two-nodes.txt
P=29631
(python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$P --rdzv-conf=is_host=false -m trainbench.cell.ranks model=mlp data=digits device=cpu task.epochs=1 device.nodes=2 modell=x > $OUT/node1-typo.txt 2>&1 &)
S=$(date +%s); TRAINBENCH_JOIN_TIMEOUT_S=10 PET_RDZV_ENDPOINT=127.0.0.1:$P timeout 200 python3 $R/src/run.py model=mlp data=digits device=cpu task.epochs=1 device.nodes=2 tracking.system_metrics_interval_s=0 > $OUT/never-joins.txt 2>&1; echo "rc=$? wall_s=$(( $(date +%s) - S ))" >> $OUT/never-joins.txt
tail -n 4 $OUT/*.txt
