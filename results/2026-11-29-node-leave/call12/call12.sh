#!/usr/bin/env bash
# At 1200380: node 1's rank aborting on its way out, TRAINBENCH_LEAVE_TIMEOUT_S=20, on the GPU image's torch:
# node 0 says it went on. Run from the repository root; writes to $OUT (the store's artifacts stay in /tmp).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
root=$PWD
args="model=mlp data=digits device=cpu batch_size=32 tracking.system_metrics_interval_s=0 task.epochs=1 device.nodes=2"
mkdir -p /tmp/leave && cd /tmp/leave
export MLFLOW_TRACKING_URI=sqlite:////tmp/leave/mlflow.db TRAINBENCH_LEAVE_TIMEOUT_S=20
port=$((29500 + RANDOM % 1000))
TRAINBENCH_INJECT_FAULT=abort_on_exit@0,abort_on_exit@1 setsid python3 -m torch.distributed.run --nnodes=2 \
  --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port --rdzv-conf=is_host=false \
  -m trainbench.cell.ranks $args > "$OUT/node1.txt" 2>&1 &
node1=$!
start=$(date +%s.%N)
PET_RDZV_ENDPOINT=127.0.0.1:$port timeout 300 python3 "$root/src/run.py" $args > "$OUT/node0.txt" 2>&1
rc=$?
end=$(date +%s.%N)
wait $node1
rc1=$?
echo "node 0 exit $rc after $(python3 -c "print(round($end - $start, 1))") s; node 1 exit $rc1" > "$OUT/summary.txt"
