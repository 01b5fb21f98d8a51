# device call 23: ResNet-50 bs256 fast without coordinate-descent tuning: torch.compile's default mode against
# reduce-overhead (CUDA graphs), bare loop and harness, alternating (call 21 found CUDA graphs worth ~2% with tuning)
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
left() { echo $(( 575-($(date +%s)-S) )); }
export PYTHONUNBUFFERED=1
B="benchmarks/bare_loops.py resnet50 --variant fast --batch-size 256 --warmup 10 --steps 50 --device cuda"
H="src/run.py task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 optimize=fast task.warmup_steps=10 task.steps=50 device=gpu"
bare() { timeout $(left) python3 $B --compile-mode $1 >> $OUT/bare.jsonl 2>> $OUT/err; el bare-$1 $?; }
harness() { MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db timeout $(left) python3 $H optimize.compile_mode=$1 >> $OUT/harness.log 2>&1; el harness-$1 $?; }
bare default; bare reduce-overhead; harness auto; harness reduce-overhead; bare reduce-overhead; bare default
tail -c 20000 $OUT/err > $OUT/t; mv $OUT/t $OUT/err
cut -c1-330 $OUT/bare.jsonl
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
for (run,) in db.execute("select run_uuid from runs order by start_time"):
    m = dict(db.execute("select key, round(value, 3) from latest_metrics where run_uuid=? and key in ('samples_per_s','compile_time_s','step_time_ms_p50')", (run,)).fetchall())
    t = dict(db.execute("select key, value from tags where run_uuid=? and key in ('torch.compile_mode','trainbench.outcome')", (run,)).fetchall())
    print(t, m)
PY
