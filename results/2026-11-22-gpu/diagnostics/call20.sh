# device call 20: ResNet-50 bs256 fast, bare loop, with coordinate-descent tuning, two more levers on its 43.8 ms step:
# cuDNN trying every convolution algorithm (torch.backends.cudnn.benchmark_limit=0; PyTorch's default tries 10) and
# CUDA graphs (reduce-overhead: the profile's device span exceeds busy time by ~2.5 ms per step).
# All runs share one Inductor cache, so only the first pays for the tuning; the cache comes back for later calls.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind PYTHONUNBUFFERED=1
R="resnet50 --variant fast --coordinate-descent-tuning --batch-size 256 --warmup 10 --steps 50 --device cuda --profile-steps 3"
# benchmark_limit is read when cuDNN benchmarks a convolution, after bare_loops.py has set benchmark=True
limit0() { python3 -c "import runpy, sys, torch; torch.backends.cudnn.benchmark_limit = 0; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')" benchmarks/bare_loops.py "$@"; }
timeout 400 bash -c "$(declare -f limit0); limit0 $R --compile-mode default" > $OUT/a-limit0-default.jsonl 2>> $OUT/log; el a-limit0-default $?
timeout 120 python3 benchmarks/bare_loops.py $R --compile-mode default > $OUT/c-limit10-default.jsonl 2>> $OUT/log; el c-limit10-default $?
timeout $(( 560-($(date +%s)-S) )) bash -c "$(declare -f limit0); limit0 $R --compile-mode reduce-overhead" > $OUT/b-limit0-reduce-overhead.jsonl 2>> $OUT/log; el b-limit0-reduce-overhead $?
du -sh /tmp/ind; find /tmp/ind -name '*.best_config' | wc -l
tar -C /tmp -czf $OUT/ind.tgz ind; ls -l $OUT/ind.tgz
[ $(stat -c %s $OUT/ind.tgz) -gt 15000000 ] && { rm $OUT/ind.tgz; cd /tmp && find ind -name '*.best_config' -o -path 'ind/fxgraph*' | tar -czf $OUT/ind.tgz -T -; ls -l $OUT/ind.tgz; cd - >/dev/null; }
tail -c 30000 $OUT/log > $OUT/t; mv $OUT/t $OUT/log
for f in $OUT/*.jsonl; do echo "== $f"; cut -c1-900 $f; done
