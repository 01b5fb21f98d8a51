#!/usr/bin/env bash
# Two nodes of one gloo rank each on one host, joined by hand (torchrun + src/run.py), on the GPU image's torch:
# once plainly, once with node 1's rank aborting after its work (TRAINBENCH_INJECT_FAULT=abort_on_exit).
# Run from the repository root on the lent machine; writes to $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
root=$PWD
python3 - > "$OUT/machine.txt" 2>&1 <<'PY'
import inspect, platform, torch
from torch.distributed.launcher import api
print("torch", torch.__version__, "python", platform.python_version())
print("launcher.api.LocalElasticAgent", inspect.signature(api.LocalElasticAgent.__init__))
print("launch_agent builds it from the module:", "LocalElasticAgent(" in inspect.getsource(api.launch_agent))
PY
args="model=mlp data=digits device=cpu batch_size=32 tracking.system_metrics_interval_s=0 task.epochs=1 device.nodes=2"
for case in plain abort_on_exit; do
  mkdir -p "/tmp/$case" && cd "/tmp/$case"
  port=$((29500 + RANDOM % 1000))
  fault=""; [ "$case" = abort_on_exit ] && fault="abort_on_exit@0,abort_on_exit@1"
  export MLFLOW_TRACKING_URI="sqlite:///$OUT/$case.db"
  TRAINBENCH_INJECT_FAULT=$fault setsid python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=1 \
    --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port --rdzv-conf=is_host=false \
    -m trainbench.cell.ranks $args > "$OUT/$case-node1.txt" 2>&1 &
  node1=$!
  start=$(date +%s.%N)
  PET_RDZV_ENDPOINT=127.0.0.1:$port timeout 500 python3 "$root/src/run.py" $args > "$OUT/$case-node0.txt" 2>&1
  rc=$?
  end=$(date +%s.%N)
  wait $node1; rc1=$?
  echo "$case: node 0 exit $rc after $(python3 -c "print(round($end - $start, 1))") s; node 1 exit $rc1" | tee -a "$OUT/summary.txt"
  grep -h "exit barrier" /tmp/$case/mlruns/*/*/artifacts/framework_log.txt >> "$OUT/summary.txt" 2>/dev/null
  cd "$root"
done
