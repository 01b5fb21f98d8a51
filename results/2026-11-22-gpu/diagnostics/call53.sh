# device call 53: the captured epoch's metrics cost 3 kernels per step instead of ~10 (working tree on 23a3f06:
# the batch found by one gather of a row of the permutation, the predictions copied to their samples' rows and
# counted after the timed block, the loss summed with one add). Call 52 had the harness's fast MLP epoch at
# 0.439 s against the bare graph's 0.412 s (0.940). First the new GPU test (captured vs eager epoch, weights held
# still), and the same test on a copy with the accounting broken (it must fail); then compare.py, 2 repeats.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider tests/test_lean_loop.py > $OUT/test.txt 2>&1; el test $?; tail -5 $OUT/test.txt
rm -rf /tmp/mut && cp -r . /tmp/mut && sed -i 's/covered = self.batches.view(-1)/covered = self.batches[1:].reshape(-1)/' /tmp/mut/src/trainbench/frameworks/pytorch/adapter.py
(cd /tmp/mut && grep -c "batches\[1:\]" src/trainbench/frameworks/pytorch/adapter.py && python3 -m pytest -q -p no:cacheprovider tests/test_lean_loop.py -k captured > $OUT/mutant.txt 2>&1); el mutant-must-fail $?; tail -4 $OUT/mutant.txt
timeout 330 python3 benchmarks/compare.py --out $OUT/mlp-fast --scratch /tmp/c53 --workloads mlp_fast --repeats 2 --system-metrics-workload '' > $OUT/mlp-fast.out 2>&1; el mlp_fast $?
grep -h "^| \|epoch seconds" $OUT/mlp-fast/*.md | cut -c1-300; tail -n 3 $OUT/mlp-fast.out
