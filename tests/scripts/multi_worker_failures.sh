#!/bin/bash
# Process-level failure tests of multi-worker training (the multi_worker_mnist example on loopback):
#  1. a garbage client connects to a training worker's port: it is rejected and training finishes;
#  2. one of three workers is killed (-9) mid-epoch: the others exit with 138 within the timeout,
#     naming the dead rank.
# usage: multi_worker_failures.sh path/to/multi_worker_mnist
set -u
prog=$1
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; cat "$f"; done; exit 1; }
. "$(dirname "$0")/ports.sh"
cluster() { # n base -> TF_CONFIG cluster part
  n=$1; b=$2; list=""
  i=0; while [ $i -lt $n ]; do list="$list${list:+, }\"127.0.0.1:$((b + i))\""; i=$((i + 1)); done
  echo "{\"cluster\": {\"worker\": [$list]}"
}
start() { # n base args... : starts n workers, pids in $pids
  n=$1; b=$2; shift 2; pids=""; c=$(cluster "$n" "$b")
  i=0; while [ $i -lt $n ]; do
    TF_CONFIG="$c, \"task\": {\"type\": \"worker\", \"index\": $i}}" "$prog" --verbose 0 "$@" > "$dir/w$i.log" 2>&1 &
    pids="$pids $!"; i=$((i + 1))
  done
}

# 1. garbage against a training worker
base=$(free_ports 3)
start 2 "$base" --model cnn --epochs 1 --steps-per-epoch 150
for try in $(seq 50); do grep -q "connected" "$dir/w1.log" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
# a wrong magic and an absurd length, then a client that sends nothing
printf 'DTRF\xff\xff\xff\xff%%0200d' 0 > /dev/tcp/127.0.0.1/$((base + 1)) || fail "could not reach worker 1"
exec 3<>/dev/tcp/127.0.0.1/$((base + 1)); exec 3>&-
for p in $pids; do wait "$p" || fail "a worker failed after a garbage client (exit $?)"; done
grep -q "test_accuracy:" "$dir/w0.log" || fail "the chief did not finish"
grep -q "rejected connection" "$dir/w1.log" || fail "worker 1 did not log the rejected client"

# 2. kill -9 one of three workers
base=$(free_ports 3)
start 3 "$base" --model mlp --epochs 5 --steps-per-epoch 400
set -- $pids
sleep 2
kill -0 "$2" 2>/dev/null || fail "worker 1 exited before it was to be killed"
kill -9 "$2"
t0=$(date +%s)
wait "$1"; r0=$?
wait "$3"; r2=$?
t1=$(date +%s)
[ "$r0" = 138 ] || fail "rank 0 exited with $r0, expected 138"
[ "$r2" = 138 ] || fail "rank 2 exited with $r2, expected 138"
[ $((t1 - t0)) -le 60 ] || fail "the survivors took $((t1 - t0)) s to stop"
grep -q "rank 1 (127.0.0.1:$((base + 1)))" "$dir/w0.log" || fail "rank 0 does not name the dead rank 1"
grep -q "rank 1 (127.0.0.1:$((base + 1)))" "$dir/w2.log" || fail "rank 2 does not name the dead rank 1"
echo "PASS: garbage clients rejected while training went on; killed rank 1 -> ranks 0 and 2 exited 138 in $((t1 - t0)) s naming it"
