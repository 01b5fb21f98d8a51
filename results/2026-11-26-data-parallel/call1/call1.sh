# Issue 30, call 1: data-parallel, the harness against hand-written loops, interleaved (benchmarks/data_parallel.py),
# four lanes at once on a 4-GPU machine (each lane its own GPUs): PyTorch x2 then JAX x2 on GPUs 0,1; PyTorch x1
# on GPU 2; JAX x1 on GPU 3; then, on GPUs 2,3, the PyTorch BERT-Large cells as a user runs them (processes mode).
cd .calls/ddp || exit 1
S=$(date +%s); el() { echo "$1 rc=$2 $(( $(date +%s)-S ))s" | tee -a $OUT/steps.txt; }
left() { echo $(( ${1:-530}-($(date +%s)-S) )); }
export PYTHONUNBUFFERED=1 TRAINBENCH_HYDRA_DIR=/tmp/multirun
nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
nvidia-smi topo -m > $OUT/topo.txt 2>&1; lscpu > $OUT/lscpu.txt 2>&1; nproc >> $OUT/lscpu.txt
python3 -c "import torch, jax, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'jax', jax.__version__, 'transformers', transformers.__version__)" >> $OUT/gpu.txt 2>&1
D="python3 benchmarks/data_parallel.py"
( CUDA_VISIBLE_DEVICES=0,1 timeout $(left 200) $D --frameworks pytorch --counts 2 --profile-steps 5 --out $OUT/pt2 > $OUT/pt2.txt 2>&1; el pt2 $?
  CUDA_VISIBLE_DEVICES=0,1 timeout $(left) $D --frameworks jax --counts 2 --rounds 5 --block-seconds 1.5 --profile-steps 3 --out $OUT/jax2 > $OUT/jax2.txt 2>&1; el jax2 $? ) & LANE01=$!
( CUDA_VISIBLE_DEVICES=2 timeout $(left 200) $D --frameworks pytorch --counts 1 --profile-steps 5 --out $OUT/pt1 > $OUT/pt1.txt 2>&1; el pt1 $? ) & LANE2=$!
( CUDA_VISIBLE_DEVICES=3 timeout $(left 260) $D --frameworks jax --counts 1 --rounds 5 --block-seconds 1.5 --profile-steps 3 --out $OUT/jax1 > $OUT/jax1.txt 2>&1; el jax1 $? ) & LANE3=$!
wait $LANE2 $LANE3
CUDA_VISIBLE_DEVICES=2,3 timeout $(left) $D --mode processes --frameworks pytorch --models bert_large --repeats 1 --out $OUT/proc > $OUT/proc.txt 2>&1; el proc $?
wait $LANE01
cat $OUT/steps.txt; tail -n 3 $OUT/*.txt | cut -c1-300
