# device call 63: the captured epoch with one metric kernel a step (the host copies each batch's positions into
# the graph's index buffer, as the bare graph loop does; the loss and accuracy come from the kept logits after
# the epoch). The GPU tests of the captured epoch (op count against a bare graph step; loss and accuracy equal to
# an eager epoch's), then interleaved.py on mlp_fast, 20 rounds (call 57: 12 pairs gave an interval +-0.05%).
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_lean_loop.py > $OUT/pytest.out 2>&1
el pytest $?; tail -15 $OUT/pytest.out
timeout 300 python3 benchmarks/interleaved.py --rounds 20 --out $OUT/il --workloads mlp_fast > $OUT/il.out 2>&1
el interleaved $?
grep -h "^| " $OUT/il/*.md | cut -c1-220
# The op-count test must fail on a mutant whose graph runs one more metric kernel a step (an in-graph counter).
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r src tests /tmp/mut/ && cp pyproject.toml /tmp/mut/ 2>/dev/null
python3 - <<'PY'
p = "/tmp/mut/src/trainbench/frameworks/pytorch/adapter.py"
s = open(p).read()
line = "        self.predictions.index_copy_(0, positions, predicted.detach())\n"
assert line in s
open(p, "w").write(s.replace(line, line + "        self.full_count.add_(1)\n").replace(
    "        self.predictions: Any = None\n", "        self.predictions: Any = None\n        self.full_count = torch.zeros(1, device=device)\n"))
PY
(cd /tmp/mut && timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_lean_loop.py -k "one_kernel" > $OUT/mutant.out 2>&1); el mutant-must-fail $?; tail -4 $OUT/mutant.out
