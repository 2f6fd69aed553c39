#!/bin/bash
# Builds dtrain's GPU programs on this machine (against /usr/local/cuda; no GPU needed) and packs what a GPU
# machine needs to run tools/gpu/run.sh into one folder: the programs, the Debian libraries they load that
# a GPU machine may lack (OpenBLAS, Boost.Test, ...; not CUDA's or NCCL's, which it has), and
# Fashion-MNIST. Copy the repository's working tree and that folder to the GPU machine, then run
# tools/gpu/run.sh there (tools/gpu/README.md).
#   tools/gpu/pack.sh [-o PACK_DIR] [--max-mib N] [BUILD_DIR]
#     -o, --out PACK_DIR  where the pack goes (default: .gpu in the repository, git-ignored); emptied first
#     --max-mib N         fail when the pack is larger than N MiB (default: no limit)
#     BUILD_DIR           the CUDA build tree (default: build-gpu in the repository)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-gpu out=$root/.gpu max_mib=
while [ $# -gt 0 ]; do
  case $1 in
    -o | --out) out=${2:?pack.sh: $1 needs a folder}; shift 2 ;;
    --max-mib) max_mib=${2:?pack.sh: --max-mib needs a number}; shift 2 ;;
    -h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "pack.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
case $out in /*) ;; *) out=$PWD/$out ;; esac
[ "$out" != / ] && [ "$out" != "$root" ] || { echo "pack.sh: refusing to empty $out" >&2; exit 2; }
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
# GPU machine has them, possibly newer: NCCL also comes with the pip package nvidia-nccl-cu13). OpenBLAS'
# library (35 MiB: every CPU's kernels) is left out to keep the pack small: netlib's reference BLAS
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
if [ -n "$max_mib" ] && [ "$size" -gt "$max_mib" ]; then echo "pack.sh: over --max-mib $max_mib" >&2; exit 1; fi
if [ "$out" = "$root/.gpu" ]; then
  echo "next, on the GPU machine, from the repository's root: tools/gpu/run.sh"
else
  echo "next, on the GPU machine, from the repository's root: tools/gpu/run.sh --pack DIR (DIR: where $out went)"
fi
