#!/usr/bin/env bash
# Issue 30, items 2 and 3, on one CUDA GPU: batch_size=max for BERT-Large and ResNet-50 (the search's time, probes
# and processes, goal: under 60 s each), and a sweep with a cell that runs out of GPU memory (its terminal output
# kept: goal, one line for it and no traceback; the traceback in the run's stderr_tail.txt).
#
#   bash benchmarks/batch_size_max_gpu.sh          # writes to $OUT (the device machine's), else ./batch-max-out
#
# On the project's GPU machine, carry [".whl"] (../shared/device/README.md): the wheels are installed first when
# .whl/ is there. Runs in about 5 minutes on an H100; the last lines say PASS or FAIL for each goal.
set -u
OUT=${OUT:-$PWD/batch-max-out}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 MLFLOW_TRACKING_URI=sqlite:///$OUT/mlflow.db
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/summary.txt"

# The cell run at the batch found is kept short: the search is what is measured.
short=(task=benchmark task.warmup_steps=2 task.steps=5 device=gpu tracking.system_metrics_interval_s=0)
cell() {  # name, overrides...: run one invocation, its terminal output (stdout and stderr) in $OUT/name.txt
  local name=$1 started ended
  shift
  started=$(date +%s.%N)
  timeout 150 python3 src/run.py "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  ended=$(date +%s.%N)
  echo "$name: exit $rc, $(python3 -c "print(f'{$ended - $started:.1f}')") s wall" | tee -a "$OUT/summary.txt"
}
cell oom_sweep -m model=resnet50 data=synthetic_imagenet batch_size=64,16384 "${short[@]}"
cell bert_large_max model=bert_large data=synthetic_text batch_size=max "${short[@]}"
cell resnet50_max model=resnet50 data=synthetic_imagenet batch_size=max "${short[@]}"
echo "--- the OOM sweep's terminal output:" && cat "$OUT/oom_sweep.txt"

python3 - "$OUT" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

out = Path(sys.argv[1])
client = MlflowClient()
cells = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)
         if r.data.tags.get("trainbench.kind") == "cell"]
verdicts = []


def num(metrics, key, form=".0f"):
    return "-" if metrics.get(key) is None else format(metrics[key], form)


for model in ("bert_large", "resnet50"):
    (run,) = [r for r in cells if r.data.tags.get("trainbench.model") == model and r.data.params.get("batch_size") == "max"]
    m = run.data.metrics
    history = client.get_metric_history(run.info.run_id, "batch_size_probe_fits")
    probes = ", ".join(f"{int(h.step)}{'' if h.value else ' (no)'}" for h in sorted(history, key=lambda h: h.step))
    print(f"{model}: max_batch_size {num(m, 'max_batch_size')}, estimate {num(m, 'batch_size_estimate')}, "
          f"{num(m, 'batch_size_probes')} probes in {num(m, 'batch_size_search_processes')} process(es), "
          f"batch_size_search_s {num(m, 'batch_size_search_s', '.1f')}, then {num(m, 'samples_per_s', ',.0f')} "
          f"samples/s ({run.data.tags.get('trainbench.outcome')}: {run.data.tags.get('trainbench.reason', '')}); "
          f"probes: {probes}")
    verdicts.append((f"{model} batch_size=max under 60 s", m.get("batch_size_search_s", 1e9) < 60
                     and run.data.tags.get("trainbench.outcome") == "finished"))
terminal = (out / "oom_sweep.txt").read_text()
said = [line for line in terminal.splitlines() if " ran out of " in line]
print("the OOM cell's line:", *said, sep="\n  ")
(oom,) = [r for r in cells if r.data.params.get("batch_size") == "16384"]
try:
    tail = Path(client.download_artifacts(oom.info.run_id, "stderr_tail.txt")).read_text()
except Exception as error:
    tail = f"(no stderr_tail.txt: {error})"
verdicts += [
    ("one line for the OOM cell, with its batch size", len(said) == 1 and "bs16384" in said[0] and "ran out of GPU memory (" in said[0]),
    ("no traceback on the terminal", "Traceback" not in terminal),
    ("the traceback in stderr_tail.txt", "Traceback (most recent call last)" in tail and "OutOfMemoryError" in tail),
    ("the OOM cell recorded failed, trainbench.failure=oom",
     (oom.data.tags.get("trainbench.outcome"), oom.data.tags.get("trainbench.failure")) == ("failed", "oom")),
]
for what, ok in verdicts:
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
EOF
