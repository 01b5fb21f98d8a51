# device call 66: the captured MLP epoch, A/B/C in one call on one machine, interleaved.py mlp_fast 20 rounds each:
#   old  = bb15b6c's captured epoch (in-graph step counter, in-graph loss sum, index_copy_ of the logits);
#   new  = the host copies each batch's positions, the loss comes from the kept logits (index_copy_ only);
#   put  = new, with the logits written by index_put_ instead of index_copy_ (call 65's profile: index_copy_'s
#          kernel took 3.5 us a step, the gather kernels 2.3).
# Each variant runs from its own copy of src/. The old adapter was carried as an untracked file for this call only;
# `git show bb15b6c:src/trainbench/frameworks/pytorch/adapter.py > $D/call66-old-adapter.py.txt` recreates it.
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
export PYTHONUNBUFFERED=1
D=results/2026-11-22-gpu/diagnostics
for v in old new put; do rm -rf /tmp/$v && mkdir /tmp/$v && cp -r src benchmarks pyproject.toml /tmp/$v/; done
cp $D/call66-old-adapter.py.txt /tmp/old/src/trainbench/frameworks/pytorch/adapter.py
python3 - <<'PY'
p = "/tmp/put/src/trainbench/frameworks/pytorch/adapter.py"
s = open(p).read()
old = "self.predictions.index_copy_(0, positions, predicted.detach())"
assert old in s
open(p, "w").write(s.replace(old, "self.predictions.index_put_((positions,), predicted.detach())"))
PY
for v in old new put; do
  (cd /tmp/$v && PYTHONPATH=$PYTHONPATH:/tmp/$v/src timeout 150 python3 benchmarks/interleaved.py --rounds 20 --out $OUT/$v --workloads mlp_fast > $OUT/$v.out 2>&1); el $v $?
  grep -h "^| mlp" $OUT/$v/*.md | cut -c1-220
done
