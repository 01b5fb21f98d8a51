# device call 21: ResNet-50 bs256 fast with coordinate-descent tuning and CUDA graphs (compile mode reduce-overhead):
# first the harness (its graph's kernels differ from the bare loop's, so it tunes afresh), then the bare loop from the
# Inductor cache call 20 brought back (.cache-ind/ind.tgz: the tuned launch settings and FX graphs).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind PYTHONUNBUFFERED=1
tar -C /tmp -xzf .cache-ind/ind.tgz
MLFLOW_TRACKING_URI=sqlite:///$OUT/h.db timeout 420 python3 src/run.py task=benchmark model=resnet50 data=synthetic_imagenet batch_size=256 optimize=fast optimize.coordinate_descent_tuning=true optimize.compile_mode=reduce-overhead task.warmup_steps=10 task.steps=50 device=gpu > $OUT/harness.log 2>&1; el harness-tuned-reduce-overhead $?
timeout $(( 570-($(date +%s)-S) )) python3 benchmarks/bare_loops.py resnet50 --variant fast --coordinate-descent-tuning --batch-size 256 --warmup 10 --steps 50 --device cuda --compile-mode reduce-overhead --profile-steps 3 > $OUT/bare.jsonl 2> $OUT/bare.err; el bare-tuned-reduce-overhead $?
tail -c 20000 $OUT/bare.err > $OUT/t; mv $OUT/t $OUT/bare.err
grep -v "^\[" $OUT/harness.log | tail -6 | cut -c1-400; cut -c1-900 $OUT/bare.jsonl
python3 - <<'PY'
import os, sqlite3
db = sqlite3.connect(os.path.join(os.environ["OUT"], "h.db"))
print(db.execute("select key, round(value, 3) from latest_metrics where key in ('samples_per_s','compile_time_s','warmup_time_s','step_time_ms_p50','step_time_ms_p99')").fetchall())
print(db.execute("select key, value from tags where key like 'torch.%' or key in ('trainbench.compile','trainbench.outcome')").fetchall())
PY
cd /tmp && find ind -name '*.best_config' -o -path 'ind/fxgraph*' | tar -czf $OUT/ind.tgz -T -; ls -l $OUT/ind.tgz
