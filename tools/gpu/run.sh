#!/bin/bash
# dtrain's GPU checks, on the GPU machine, from the repository's root, with the pack of tools/gpu/pack.sh:
#   1. NVRTC compiles the kernels for every architecture it knows;
#   2. the `gpu` test label: the GPU suite (every backend-parameterised case on cuda, graph replay, cpu vs
#      cuda equality, 2 and 3 GPU workers over loopback ring_tcp equal to one, NCCL with one rank,
#      mirrored_strategy with NCCL) and single_worker_mnist --device gpu's smoke run;
#   3. single_worker_mnist --device gpu: CNN, Adam, 3 full epochs; fails below 0.89 test accuracy;
#   4. mirrored_mnist --device gpu (mirrored_strategy<comm::nccl, cuda> on every GPU), two multi_worker_mnist
#      --device gpu processes sharing the GPU over the TCP ring (dtrain-launch), both with the same metrics,
#      and one multi_worker_mnist --device gpu worker over NCCL;
#   5. train_throughput --device cuda against PyTorch on the same GPU (python3 with torch: DTRAIN_TORCH_PYTHON).
# Everything printed is also written to RESULTS_DIR/gpu.log.
#   tools/gpu/run.sh [--pack PACK_DIR] [--out RESULTS_DIR] [--quick] [--no-compile]
#     --pack: the pack (default: .gpu in the repository); --out: where the log goes (default: $DTRAIN_GPU_OUT,
#     else PACK_DIR/results); --quick: 1 epoch and --quick timings, to check the wiring; --no-compile: no
#     torch.compile column (its compiles take minutes). Every step stops after DTRAIN_GPU_STEP_TIMEOUT s (300).
set -uo pipefail
pack='' results=${DTRAIN_GPU_OUT:-}
epochs=3 quick=()
while [ $# -gt 0 ]; do
  case $1 in
    --pack) pack=${2:?run.sh: --pack needs a folder}; shift ;;
    --out) results=${2:?run.sh: --out needs a folder}; shift ;;
    --quick) epochs=1 quick+=(--quick --no-compile) ;;
    --no-compile) quick+=(--no-compile) ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[ -n "$pack" ] && pack=$(absolute "$pack")
[ -n "$results" ] && results=$(absolute "$results")
cd "$(dirname "$0")/../.." || exit 2
here=${pack:-$PWD/.gpu}
[ -d "$here/bin" ] || { echo "run.sh: no pack in $here: run tools/gpu/pack.sh first and copy its folder here" >&2; exit 2; }
results=${results:-$here/results}
mkdir -p "$results" || { echo "run.sh: cannot make $results" >&2; exit 2; }
log=$results/gpu.log
exec > >(tee "$log") 2>&1
limit=${DTRAIN_GPU_STEP_TIMEOUT:-300}

# CUDA's libraries: the toolkit's, else the pip packages' beside PyTorch
libs=$here/lib
[ -d /usr/local/cuda/lib64 ] && libs=$libs:/usr/local/cuda/lib64
for d in $(python3 -c 'import nvidia, os; [print(os.path.join(p, q, "lib")) for p in nvidia.__path__ for q in os.listdir(p)]' 2>/dev/null); do
  [ -d "$d" ] && libs=$libs:$d
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DTRAIN_FASHION_MNIST_DIR=$here/data DTRAIN_TEST_SOURCE_DIR=$PWD/tests
export DTRAIN_TORCH_CUDA_SCRIPT=$PWD/bench/torch_cuda_train.py DTRAIN_TORCH_PYTHON=python3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

status=0
step() {  # exit 77: skipped (no device), as CTest reads it
  echo; echo "=== $*"; local t0=$SECONDS; timeout "$limit" "$@"; local rc=$?
  echo "=== ($((SECONDS - t0)) s)"
  if [ $rc = 77 ]; then echo "=== SKIPPED: $*"; elif [ $rc = 124 ]; then echo "=== TIMED OUT after $limit s: $*"; status=1
  elif [ $rc != 0 ]; then echo "=== FAILED ($rc): $*"; status=1; fi
}
step "$here/bin/test_nvrtc_kernels"
step "$here/bin/test_gpu" --report_level=short
step "$here/bin/single_worker_mnist" --device gpu --model cnn --optimizer adam --epochs 2 --steps-per-epoch 3 --verbose 2
echo; echo "=== single_worker_mnist --device gpu, CNN, Adam, $epochs full epochs"
start=$(date +%s.%N)
timeout "$limit" "$here/bin/single_worker_mnist" --device gpu --model cnn --optimizer adam --epochs "$epochs" --steps-per-epoch 0 \
  --verbose 2 | tee "$results/mnist.txt" || status=1
echo "wall: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
acc=$(sed -n 's/^test_accuracy: //p' "$results/mnist.txt")
if [ "$epochs" = 3 ] && ! awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.89) }'; then
  echo "=== FAILED: test accuracy ${acc:-none} < 0.89"; status=1
fi
step "$here/bin/mirrored_mnist" --device gpu --epochs 1 --steps-per-epoch 200
step bash tests/scripts/tutorial_examples.sh "$here/bin/dtrain-launch" "$here/bin" multi_worker_mnist --device gpu --implementation ring
# one GPU worker over NCCL (a world of one: NCCL refuses two ranks on one GPU)
step "$here/bin/multi_worker_mnist" --device gpu --implementation nccl --model cnn --optimizer adam --epochs 1 \
  --steps-per-epoch 50 --verbose 2
step "$here/bin/train_throughput" --device cuda "${quick[@]}"
echo; echo "=== run.sh: $([ $status = 0 ] && echo all passed || echo FAILURES above)"
exit $status
