#!/bin/sh
# Installs the Debian 12 packages dtrain builds and runs its demo with; with --test, also what the
# sanitizer and fuzzing trees need (clang-19 and its runtimes), Open MPI for the comm::mpi tests, and what
# the Python interop tests make their venv with. Idempotent: it calls apt-get only when a package is missing. Runs as root, or
# through sudo when there is one.
set -eu
packages="cmake g++ ninja-build ccache libxtensor-dev libopenblas-dev libboost-test-dev
libasio-dev libssl-dev nlohmann-json3-dev zlib1g-dev libcli11-dev libpng-dev libjpeg-dev libgif-dev libhdf5-dev
libonnx-dev libprotobuf-dev dataset-fashion-mnist fortunes"
[ "${1:-}" = "--test" ] && packages="$packages clang-19 libclang-rt-19-dev libfuzzer-19-dev python3-venv python3-yaml libopenmpi-dev openmpi-bin"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
