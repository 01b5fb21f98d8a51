#!/usr/bin/env bash
# At the heartbeat fix: a process beating back to back to a torch TCPStore ends cleanly (with and without the
# fix's exit handler), then two PyTorch nodes plainly (twice) and with node 1's rank aborting on exit, then two JAX
# nodes joined by hand; device=cpu, on the GPU image's torch and JAX. Run from the repository root; writes to $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src
root=$PWD
python3 -c "import torch, jax, platform; print('torch', torch.__version__, 'jax', jax.__version__, 'python', platform.python_version())" > "$OUT/machine.txt" 2>&1
beat='
import datetime, sys, threading, time
import torch.distributed as dist
from trainbench.frameworks.heartbeat import beat_until_exit
recording = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
joining = dist.TCPStore("127.0.0.1", recording.port, None, False, datetime.timedelta(seconds=10))
if sys.argv[1] == "helper":
    beat_until_exit(lambda: joining.add("beat", 1), 0.0, 10)
else:
    threading.Thread(target=lambda: [joining.add("beat", 1) for _ in iter(int, 1)], daemon=True).start()
time.sleep(0.5)
print("beats", recording.add("beat", 0), flush=True)
'
for how in helper helper helper plain_daemon plain_daemon plain_daemon; do
  python3 -c "$beat" $how > /tmp/beat.txt 2>&1; rc=$?
  echo "beating to the end, $how: exit $rc; $(tr '\n' ' ' < /tmp/beat.txt)" >> "$OUT/summary.txt"
done
args="model=mlp data=digits device=cpu batch_size=32 tracking.system_metrics_interval_s=0 task.epochs=1 device.nodes=2"
two_nodes() {  # case, node 1's extra environment, node 1's command
  local case=$1; shift
  mkdir -p "/tmp/$case" && cd "/tmp/$case"
  export MLFLOW_TRACKING_URI="sqlite:///$OUT/$case.db"
  env PET_RDZV_ENDPOINT=127.0.0.1:$port "$@" > "$OUT/$case-node1.txt" 2>&1 &
  local node1=$! start=$(date +%s.%N)
  PET_RDZV_ENDPOINT=127.0.0.1:$port timeout 400 python3 "$root/src/run.py" $node0_args > "$OUT/$case-node0.txt" 2>&1
  local rc=$? end=$(date +%s.%N)
  wait $node1; local rc1=$?
  echo "$case: node 0 exit $rc after $(python3 -c "print(round($end - $start, 1))") s; node 1 exit $rc1" >> "$OUT/summary.txt"
  cd "$root"
}
torchrun="python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-conf=is_host=false"
node0_args=$args
for case in plain-1 plain-2 abort_on_exit; do
  port=$((29500 + RANDOM % 1000))
  fault=""; [ "$case" = abort_on_exit ] && fault="abort_on_exit@0,abort_on_exit@1"
  two_nodes $case TRAINBENCH_INJECT_FAULT=$fault setsid $torchrun --rdzv-endpoint=127.0.0.1:$port -m trainbench.cell.ranks $args
done
port=$((29500 + RANDOM % 1000))
node0_args="framework=jax $args"
two_nodes jax TRAINBENCH_NODE_RANK=1 setsid python3 -m trainbench.cell.ranks framework=jax $args
cat "$OUT/summary.txt"
