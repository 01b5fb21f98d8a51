# device call 14: ResNet-50 bs256 fast, bare loop, torch.compile's kernel-tuning options against its default mode
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
R="resnet50 --variant fast --batch-size 256 --warmup 10 --steps 50 --device cuda"
timeout 150 python3 benchmarks/bare_loops.py $R --compile-mode default > $OUT/rn-1-default.jsonl 2> $OUT/rn-1-default.err; el default-cold $?
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout 200 python3 benchmarks/bare_loops.py $R --compile-mode default --profile-steps 3 > $OUT/rn-2-cdt.jsonl 2> $OUT/rn-2-cdt.err; el coordinate-descent $?
timeout 60 python3 benchmarks/bare_loops.py $R --compile-mode default > $OUT/rn-3-default.jsonl 2> $OUT/rn-3-default.err; el default-warm $?
timeout $(( 585-($(date +%s)-S) )) python3 benchmarks/bare_loops.py $R --compile-mode max-autotune-no-cudagraphs --profile-steps 3 > $OUT/rn-4-mat.jsonl 2> $OUT/rn-4-mat.err; el max-autotune-no-cudagraphs $?
for f in $OUT/*.err; do [ $(stat -c %s $f) -gt 100000 ] && { tail -c 100000 $f > $f.tail; mv $f.tail $f; }; done
for f in $OUT/*.jsonl; do echo "$f"; python3 -c "
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    p=d.get('profile')
    print({k:p.get(k) for k in ('wall_ms_per_step','device_busy_ms_per_step','busy_fraction')} if p else {k:d.get(k) for k in ('samples_per_s','warmup_s','compile_mode')})
" $f; done
