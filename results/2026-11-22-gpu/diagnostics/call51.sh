# device call 51: is the launch-bound rows' process-to-process spread (DistilBERT tf32 bare 3,051-3,304 in one call,
# the MLP bare epoch 20k-30k) where the scheduler puts the process? The host's topology, then three rounds of the
# same bare loop unpinned (sampling which CPUs it ran on), pinned to CPUs 4-7, and pinned to CPUs 12-15.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
{ nproc; lscpu; nvidia-smi topo -m; numactl -H; cat /proc/loadavg; top -bn1 | head -30; cat /sys/fs/cgroup/cpu.max;
  cat /proc/cmdline; nvidia-smi -q | grep -i -A3 "clocks\b\|persistence"; } > $OUT/topology.txt 2>&1
rate() { python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print(round(d["samples_per_s"], 1))'; }
# one run; prints its rate and the CPUs its main thread was seen on (sampled every 0.5 s)
one() { local pin=$1; shift
  if [ "$pin" = none ]; then python3 benchmarks/bare_loops.py "$@" > /tmp/r.json 2>/tmp/r.err & else taskset -c $pin python3 benchmarks/bare_loops.py "$@" > /tmp/r.json 2>/tmp/r.err & fi
  local pid=$! cpus=""; while kill -0 $pid 2>/dev/null; do cpus="$cpus $(ps -o psr= -p $pid 2>/dev/null)"; sleep 0.5; done
  echo "$pin $(rate < /tmp/r.json) cpus:$(echo $cpus | tr ' ' '\n' | sort -n | uniq -c | tr -s ' \n' ' ')"; }
DB="distilbert --variant tf32 --batch-size 64 --warmup 10 --steps 600 --device cuda"
MLP="mlp_epoch --batch-size 32 --samples 50000 --epochs 3 --variant eager --precision tf32 --device cuda"
for round in 1 2 3; do for pin in none 4-7 12-15; do echo -n "distilbert_tf32 r$round "; one $pin $DB; done; el r$round 0; done 2>&1 | tee $OUT/distilbert.txt
for round in 1 2 3; do for pin in none 4-7 12-15; do echo -n "mlp_epoch r$round "; one $pin $MLP; done; el r$round 0; done 2>&1 | tee $OUT/mlp.txt
