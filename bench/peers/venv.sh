#!/bin/sh
# The benchmarks' Python peers, in one virtual environment made once, installed by pip from the package
# index it is configured with (PyPI unless pip.conf or PIP_INDEX_URL says otherwise):
#   bench/peers/venv.sh DIR     # DIR/bin/python then has current torch, tensorflow-cpu (Keras 3) and
#                               # tf_keras (Keras 2, the tutorial's Keras: TF_USE_LEGACY_KERAS=1)
#
# train_throughput, bench/tf_tutorial/run.py and bench/resnet/run.py call this with DIR under the build
# tree. A second call with the environment complete does nothing. torch is the index's default wheel (on
# PyPI the one whose CUDA libraries are installed but unused on a CPU; point pip at a CPU-only index for a
# smaller environment). Exit status 3, with one line on stderr, when pip cannot reach its index: the
# callers then print "n/a" for these peers.
set -eu
dir=${1:?usage: venv.sh DIR}
python=${DTRAIN_PEER_BASE_PYTHON:-python3}
stamp="$dir/.dtrain-peers-complete-2"  # -2: with tf_keras
[ -f "$stamp" ] && exit 0

echo "venv.sh: creating $dir with torch and tensorflow-cpu (once; a few GiB, a few minutes)" >&2
rm -rf "$dir"
"$python" -m venv "$dir" || { echo "venv.sh: $python -m venv failed (Debian: apt install python3-venv)" >&2; exit 1; }

# Can pip reach its index? One small download through pip itself, so its configuration (index, proxy,
# certificates) is what is probed.
probe=$(mktemp -d)
if ! "$dir/bin/python" -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
     --retries 0 --timeout 15 -d "$probe" pip >/dev/null 2>&1; then
  rm -rf "$probe" "$dir"
  echo "venv.sh: pip cannot reach its package index: no Python peers (torch, tensorflow-cpu)" >&2
  exit 3
fi
rm -rf "$probe"

pip="$dir/bin/python -m pip install --quiet --disable-pip-version-check --progress-bar off"
$pip torch >&2
$pip tensorflow-cpu tf_keras >&2
"$dir/bin/python" -c "import torch, tensorflow, tf_keras" >&2
touch "$stamp"
echo "venv.sh: done ($("$dir/bin/python" -c 'import torch, tensorflow as tf; print("torch", torch.__version__, "tensorflow", tf.__version__)'))" >&2
