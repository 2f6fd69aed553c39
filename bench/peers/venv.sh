#!/bin/sh
# The benchmarks' Python peers from PyPI, in one virtual environment made once:
#   bench/peers/venv.sh DIR     # DIR/bin/python then has current torch, tensorflow-cpu (Keras 3) and
#                               # tf_keras (Keras 2, the seeds' Keras: TF_USE_LEGACY_KERAS=1)
#
# train_throughput and bench/seed_tutorial/run.sh call this with DIR under the build tree. A second call
# with the environment complete does nothing. The CPU build of torch comes from PyTorch's own index when
# that is reachable; otherwise from PyPI (the default wheel, whose CUDA libraries are installed but unused
# on a CPU). Exit status 3, with one line on stderr, when PyPI cannot be reached: the callers then print
# "n/a" for these peers.
set -eu
dir=${1:?usage: venv.sh DIR}
python=${DTRAIN_PEER_BASE_PYTHON:-python3}
stamp="$dir/.dtrain-peers-complete-2"  # -2: with tf_keras
[ -f "$stamp" ] && exit 0

if ! "$python" - <<'EOF' 2>/dev/null
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15)
EOF
then
  echo "venv.sh: PyPI (https://pypi.org) cannot be reached: no PyPI peers (torch, tensorflow-cpu)" >&2
  exit 3
fi

echo "venv.sh: creating $dir with torch and tensorflow-cpu from PyPI (once; a few GiB, a few minutes)" >&2
rm -rf "$dir"
"$python" -m venv "$dir"
pip="$dir/bin/python -m pip install --quiet --disable-pip-version-check --progress-bar off"
if ! $pip --retries 0 --timeout 10 --index-url https://download.pytorch.org/whl/cpu torch >/dev/null 2>&1; then
  echo "venv.sh: PyTorch's CPU index not reachable; the default torch wheel from PyPI" >&2
  $pip torch >&2
fi
$pip tensorflow-cpu tf_keras >&2
"$dir/bin/python" -c "import torch, tensorflow, tf_keras" >&2
touch "$stamp"
echo "venv.sh: done ($("$dir/bin/python" -c 'import torch, tensorflow as tf; print("torch", torch.__version__, "tensorflow", tf.__version__)'))" >&2
