# device call 17 (2x H200): the data-parallel path on CUDA after issue 9's changes. DDP train cell (epoch sums on
# the device), ResNet-50 optimize=fast with DDP, and the launcher SIGKILLed under a 2-rank cell.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export MLFLOW_TRACKING_URI=sqlite:///$OUT/dp.db
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
D="model=mlp data=digits device=gpu batch_size=32 tracking.system_metrics_interval_s=0"
timeout 150 python3 src/run.py -m $D task.epochs=4 device.count=1,2 > $OUT/train-digits.log 2>&1; el train-digits $?
timeout 300 python3 src/run.py -m task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 optimize=fast device=gpu device.count=1,2 task.warmup_steps=10 task.steps=30 task.repeats=2 > $OUT/resnet50-fast-dp.log 2>&1; el resnet50-fast-dp $?
python3 src/run.py model=mlp data=synthetic data.num_samples=50000 data.num_val_samples=1000 device=gpu device.count=2 task.epochs=500 batch_size=32 > $OUT/kill.log 2>&1 &
L=$!
for i in $(seq 60); do sleep 1; [ $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l) -ge 2 ] && break; done
sleep 8; echo "before kill: $(nvidia-smi --query-compute-apps=pid,name --format=csv,noheader | tr '\n' ' ')"
kill -9 $L; el launcher-killed 0
for i in $(seq 40); do sleep 1; [ $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l) -eq 0 ] && break; done
el "gpu processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l); python left: $(pgrep -fc 'trainbench|torch.distributed|run.py' )" 0
sleep 3
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "dp.db"))
q = """select r.name, r.status, group_concat(t.key || '=' || substr(t.value, 1, 120), ' | ') from runs r
       join tags t on t.run_uuid = r.run_uuid
       where t.key in ('trainbench.outcome','trainbench.reason','trainbench.data_parallel','torch.compile_mode','trainbench.num_devices')
       group by r.run_uuid order by r.start_time"""
for row in db.execute(q):
    print(row)
for row in db.execute("""select r.name, m.key, round(m.value, 4) from runs r join latest_metrics m on m.run_uuid = r.run_uuid
       where m.key in ('samples_per_s','scaling_efficiency','val_accuracy','train_loss','compile_time_s') order by r.start_time, m.key"""):
    print(row)
PY
grep -h "samples/s\|finished\|failed\|killed\|rror" $OUT/*.log | head -40
