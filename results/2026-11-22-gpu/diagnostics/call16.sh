# device call 16: ResNet-50 bs256 fast, bare loop: GEMM autotuning only (1x1 convs as matmuls), default mode otherwise
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
R="resnet50 --variant fast --batch-size 256 --warmup 10 --steps 50 --device cuda"
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
timeout 100 python3 benchmarks/bare_loops.py $R --compile-mode default > $OUT/rn-default.jsonl 2> $OUT/rn-default.err; el default $?
TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 timeout $(( 560-($(date +%s)-S) )) python3 benchmarks/bare_loops.py $R --compile-mode default --profile-steps 3 > $OUT/rn-gemm.jsonl 2> $OUT/rn-gemm.err; el gemm-autotune $?
grep -c "^AUTOTUNE" $OUT/rn-gemm.err; tail -c 60000 $OUT/rn-gemm.err > $OUT/t && mv $OUT/t $OUT/rn-gemm.err
tar czf $OUT/autotune-cache.tgz -C /tmp/ind cache 2>/dev/null; du -sh /tmp/ind /tmp/ind/* 2>/dev/null | head; ls -la $OUT
cat $OUT/*.jsonl | cut -c1-400
