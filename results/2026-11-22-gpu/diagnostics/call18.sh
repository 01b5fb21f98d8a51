# device call 18: ResNet-50 bs256 fast, bare loop: coordinate-descent tuning of Inductor's Triton kernels (the
# batch-norm and pointwise kernels that take 25.7 of the step's 44.1 ms), then the default mode for reference
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s"; }
R="resnet50 --variant fast --batch-size 256 --warmup 10 --steps 50 --device cuda"
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout 480 python3 benchmarks/bare_loops.py $R --compile-mode default --profile-steps 3 > $OUT/rn-cdt.jsonl 2> $OUT/rn-cdt.err; el coordinate-descent $?
timeout $(( 590-($(date +%s)-S) )) python3 benchmarks/bare_loops.py $R --compile-mode default > $OUT/rn-default.jsonl 2> $OUT/rn-default.err; el default $?
tail -c 30000 $OUT/rn-cdt.err > $OUT/t && mv $OUT/t $OUT/rn-cdt.err
cat $OUT/*.jsonl | cut -c1-700
