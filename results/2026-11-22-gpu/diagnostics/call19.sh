# device call 19: the harness with optimize=fast optimize.coordinate_descent_tuning=true (ResNet-50 bs256), then the
# bare loop with the same tuning in whatever time is left (its compile reuses the harness's tuned kernels)
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db timeout 470 python3 src/run.py task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 optimize=fast optimize.coordinate_descent_tuning=true task.warmup_steps=10 task.steps=50 device=gpu > $OUT/harness.log 2>&1; el harness-tuned $?
timeout $(( 585-($(date +%s)-S) )) python3 benchmarks/bare_loops.py resnet50 --variant fast --coordinate-descent-tuning --batch-size 256 --warmup 10 --steps 50 --device cuda > $OUT/bare.jsonl 2> $OUT/bare.err; el bare-tuned $?
tail -c 20000 $OUT/bare.err > $OUT/t; mv $OUT/t $OUT/bare.err
grep -v "^\[" $OUT/harness.log | tail -6; cut -c1-330 $OUT/bare.jsonl
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
print(db.execute("select key, round(value, 3) from latest_metrics where key in ('samples_per_s','compile_time_s','warmup_time_s','step_time_ms_p50','step_time_ms_p99')").fetchall())
print(db.execute("select key, value from tags where key like 'torch.%' or key in ('trainbench.compile','trainbench.outcome')").fetchall())
PY
