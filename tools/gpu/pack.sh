#!/bin/bash
# Packs what the GPU machine needs for dtrain's GPU checks into .gpu/ (git-ignored; at most 64 MiB, the
# device tool's limit): the GPU programs built here against /usr/local/cuda, the Debian libraries they
# load that the GPU machine lacks (OpenBLAS, Boost.Test, ...; not CUDA's, which it has), and Fashion-MNIST.
# Then, on the GPU machine, from the repository's root: tools/gpu/run.sh (the device tool: carry .gpu).
#   tools/gpu/pack.sh [BUILD_DIR]      # default build-gpu
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
out=$root/.gpu
targets=(test_gpu test_nvrtc_kernels single_worker_mnist multi_worker_mnist mirrored_mnist dtrain-launch train_throughput)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_CUDA=ON -DDTRAIN_GPU_TESTS=ON >/dev/null
cmake --build "$build" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "pack.sh: $t was not built" >&2; exit 1; }
  cp "$f" "$out/bin/$t"
  strip "$out/bin/$t"
done

# The shared libraries the programs load from Debian, except the C runtime and CUDA's and NCCL's own (the
# GPU machine has them, newer: NCCL from the pip package nvidia-nccl-cu13). OpenBLAS (35 MiB: every
# CPU's kernels) would not fit: netlib's reference BLAS
# (Debian's libblas3, 0.4 MiB) takes its file name there. The GPU programs use the CPU's BLAS only for
# the cpu side of their comparisons, and dtrain needs nothing of OpenBLAS but sgemm_.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnvrtc|libnccl)'
for f in "$out"/bin/*; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
done
reference=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3
[ -f "$reference" ] || { echo "pack.sh: needs netlib's reference BLAS ($reference; Debian: libblas3)" >&2; exit 1; }
cp -L "$reference" "$out/lib/libopenblas.so.0"

data=${DTRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
cp "$data"/*-ubyte.gz "$out/data/"

size=$(du -sm "$out" | cut -f1)
echo "pack.sh: $out holds $size MiB:"
du -sh "$out"/bin/* "$out"/lib "$out"/data
if [ "$size" -gt 64 ]; then echo "pack.sh: over the device tool's 64 MiB" >&2; exit 1; fi
echo "next, on the GPU machine: tools/gpu/run.sh   (device tool: carry [\".gpu\"])"
