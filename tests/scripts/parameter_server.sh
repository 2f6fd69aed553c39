#!/bin/bash
# Parameter server jobs as separate processes on loopback (the parameter_server_mnist example):
#  1. through dtrain-launch: a chief, 2 workers and 1 ps task train to a test accuracy of at least 0.65
#     (100 steps), every task exits 0;
#  2. started by hand, each process with its TF_CONFIG: 2 workers and 2 ps tasks, the same;
#  3. a worker is killed (-9) mid-training: its steps run on the other worker, and the coordinator names
#     it; started again, it rejoins the job; training finishes;
#  4. a ps task is killed (-9): the coordinator stops within a minute with exit code 138, naming it, and
#     the job started again resumes from the coordinator's backup and finishes;
#  5. with an evaluator task in the cluster: it evaluates the coordinator's checkpoints as they appear, the
#     last one with the coordinator's own test loss;
#  6. the custom loop with a cluster_coordinator (parameter_server_custom_loop) through dtrain-launch: the
#     chief reports every epoch, the fetched final loss and the test accuracy; then by hand with a worker
#     killed (-9) mid-loop: its functions run on the other worker, and started again it rejoins.
# usage: parameter_server.sh path/to/dtrain-launch path/to/parameter_server_mnist path/to/parameter_server_custom_loop
set -u
launch=$1
prog=$2
custom=$3
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do echo "== $f"; cat "$f"; done; exit 1; }
. "$(dirname "$0")/ports.sh"
addresses() { # n base -> "127.0.0.1:base", ...
  list=""; i=0; while [ $i -lt "$1" ]; do list="$list${list:+, }\"127.0.0.1:$(($2 + i))\""; i=$((i + 1)); done; echo "$list"
}
start() { # workers ps args... : starts every task, pids in chief, workers, pss (with EVALUATOR=1 an evaluator task too: its pid in evaluator)
  nw=$1; np=$2; shift 2; b=$(free_ports $((2 + nw + np)))
  ev=""; [ "${EVALUATOR:-0}" = 1 ] && ev=", \"evaluator\": [$(addresses 1 $((b + 1 + nw + np)))]"
  c="{\"cluster\": {\"chief\": [$(addresses 1 "$b")], \"worker\": [$(addresses "$nw" $((b + 1)))], \"ps\": [$(addresses "$np" $((b + 1 + nw)))]$ev}"
  if [ -n "$ev" ]; then
    TF_CONFIG="$c, \"task\": {\"type\": \"evaluator\", \"index\": 0}}" "$prog" "$@" > "$dir/evaluator.log" 2>&1 & evaluator=$!
  fi
  workers=""; pss=""
  i=0; while [ $i -lt "$np" ]; do
    TF_CONFIG="$c, \"task\": {\"type\": \"ps\", \"index\": $i}}" "$prog" "$@" > "$dir/ps$i.log" 2>&1 & pss="$pss $!"; i=$((i + 1))
  done
  i=0; while [ $i -lt "$nw" ]; do
    TF_CONFIG="$c, \"task\": {\"type\": \"worker\", \"index\": $i}}" "$prog" "$@" > "$dir/w$i.log" 2>&1 & workers="$workers $!"; i=$((i + 1))
  done
  TF_CONFIG="$c, \"task\": {\"type\": \"chief\", \"index\": 0}}" "$prog" "$@" > "$dir/chief.log" 2>&1 & chief=$!
}
accuracy_at_least() { # bar log what: the chief's test accuracy (2 workers, 100 steps of the MLP: about 0.72-0.78)
  local a
  a=$(grep -oE "^\[chief:0\] test_accuracy: [0-9.]+" "$2" | grep -oE "[0-9.]+$")
  [ -n "$a" ] || fail "$3: not reported"
  awk -v a="$a" -v b="$1" 'BEGIN { exit !(a >= b) }' || fail "$3 is $a, below $1"
}
export DTRAIN_NUM_THREADS=1

# 1. the launcher's roles
"$launch" -n 2 --ps 1 -- "$prog" --model mlp --optimizer adam --epochs 2 --steps-per-epoch 50 --verbose 2 \
  > "$dir/launch.log" 2>&1 || fail "dtrain-launch --ps 1 exited with $?"
accuracy_at_least 0.65 "$dir/launch.log" "the chief's test accuracy with Model.fit"
grep -q "^\[chief:0\] Epoch 2/2" "$dir/launch.log" || fail "the chief did not report epoch 2"

# 2. by hand: 2 workers, 2 ps tasks
start 2 2 --model mlp --epochs 2 --steps-per-epoch 50 --verbose 2
for p in $chief $workers $pss; do wait "$p" || fail "a task exited with $? (2 workers, 2 ps)"; done
grep -q "test_accuracy: 0\.[0-9]" "$dir/chief.log" || fail "the chief did not report the test accuracy (2 ps)"

# 3. kill -9 a worker
start 2 1 --model mlp --epochs 5 --steps-per-epoch 400 --verbose 2
set -- $workers
sleep 2
kill -0 "$2" 2>/dev/null || fail "worker 1 exited before it was to be killed"
kill -9 "$2"
TF_CONFIG="$c, \"task\": {\"type\": \"worker\", \"index\": 1}}" "$prog" --model mlp --epochs 5 --steps-per-epoch 400 \
  --verbose 2 > "$dir/w1-again.log" 2>&1 &
again=$!
wait "$chief" || fail "the chief exited with $? after worker 1 was killed"
grep -q "worker 1 rejoined" "$dir/chief.log" || { kill -9 "$again"; fail "the restarted worker 1 did not rejoin"; }
wait "$again" || fail "the restarted worker 1 exited with $?"
wait "$1" || fail "worker 0 exited with $? after worker 1 was killed"
for p in $pss; do wait "$p" || fail "a ps task exited with $? after worker 1 was killed"; done
grep -q "test_accuracy: 0\.[0-9]" "$dir/chief.log" || fail "the chief did not finish after worker 1 was killed"
grep -q "worker 1 failed" "$dir/chief.log" || fail "the chief does not name the failed worker 1"

# 4. kill -9 a ps task
start 2 2 --model mlp --epochs 5 --steps-per-epoch 400 --verbose 2 --backup-dir "$dir/backup"
set -- $pss
for try in $(seq 300); do ls "$dir/backup"/*.safetensors > /dev/null 2>&1 && break; sleep 0.1; done
kill -0 "$1" 2>/dev/null || fail "ps 0 exited before it was to be killed"
kill -9 "$1"
t0=$(date +%s)
wait "$chief"; rc=$?
t1=$(date +%s)
[ "$rc" = 138 ] || fail "the chief exited with $rc after ps 0 was killed, expected 138"
[ $((t1 - t0)) -le 60 ] || fail "the chief took $((t1 - t0)) s to stop"
grep -q "ps:0" "$dir/chief.log" || fail "the chief does not name ps:0"
for p in $workers; do wait "$p"; r=$?; [ "$r" = 138 ] || fail "a worker exited with $r after ps 0 was killed, expected 138"; done
wait "$2"; r=$?; [ "$r" = 138 ] || fail "ps 1 exited with $r after ps 0 was killed, expected 138"
start 2 2 --model mlp --epochs 5 --steps-per-epoch 400 --verbose 2 --backup-dir "$dir/backup"
for p in $chief $workers $pss; do wait "$p" || fail "a task of the restarted job exited with $?"; done
grep -q "resuming at epoch [2-5]" "$dir/chief.log" || fail "the restarted coordinator did not resume from its backup"
grep -q "test_accuracy: 0\.[0-9]" "$dir/chief.log" || fail "the restarted job did not finish"
# 5. an evaluator task beside them evaluates the coordinator's checkpoints as they appear
EVALUATOR=1 start 1 1 --model mlp --epochs 3 --steps-per-epoch 30 --dir "$dir/ckpt"
for p in $chief $workers $pss $evaluator; do wait "$p" || fail "a task exited with $? (with an evaluator)"; done
grep -qE '^evaluator: [1-3] checkpoint\(s\) evaluated$' "$dir/evaluator.log" || fail "no evaluator summary"
# the last epoch's checkpoint holds the ps tasks' final variables: the coordinator's own test loss
last=$(grep -oE '^sidecar_evaluator: ckpt-3.safetensors: loss: [0-9.]+' "$dir/evaluator.log" | grep -oE '[0-9.]+$')
[ -n "$last" ] && grep -q "^test_loss: $last$" "$dir/chief.log" ||
  fail "the evaluator's loss on the last checkpoint ($last) is not the coordinator's test loss"

# 6. the custom loop
"$launch" -n 2 --ps 1 -- "$custom" --model mlp --epochs 2 --steps-per-epoch 50 > "$dir/custom.log" 2>&1 ||
  fail "dtrain-launch --ps 1 with the custom loop exited with $?"
grep -q "^\[chief:0\] Finished epoch 1, accuracy is 0\.[0-9]" "$dir/custom.log" || fail "the custom loop's chief did not report epoch 1"
grep -q "^\[chief:0\] Final loss is [0-9]" "$dir/custom.log" || fail "the custom loop's chief did not fetch the final loss"
accuracy_at_least 0.65 "$dir/custom.log" "the custom loop's test accuracy"
prog=$custom
start 2 1 --model mlp --epochs 6 --steps-per-epoch 300
set -- $workers
sleep 2
kill -0 "$2" 2>/dev/null || fail "worker 1 of the custom loop exited before it was to be killed"
kill -9 "$2"
TF_CONFIG="$c, \"task\": {\"type\": \"worker\", \"index\": 1}}" "$prog" --model mlp --epochs 6 --steps-per-epoch 300 \
  > "$dir/w1-again.log" 2>&1 &
again=$!
wait "$chief" || fail "the custom loop's chief exited with $? after worker 1 was killed"
grep -q "worker 1 failed" "$dir/chief.log" || fail "the custom loop's chief does not name the failed worker 1"
grep -q "worker 1 rejoined" "$dir/chief.log" || { kill -9 "$again"; fail "the restarted worker 1 did not rejoin the custom loop"; }
wait "$again" || fail "the restarted worker 1 of the custom loop exited with $?"
wait "$1" || fail "worker 0 of the custom loop exited with $?"
for p in $pss; do wait "$p" || fail "a ps task of the custom loop exited with $?"; done
grep -q "test_accuracy: 0\.[0-9]" "$dir/chief.log" || fail "the custom loop did not finish after worker 1 was killed"

echo "PASS: parameter server jobs (launcher; by hand with 2 ps; a killed worker's steps ran elsewhere and it rejoined; a killed ps stopped the job in $((t1 - t0)) s naming it, and the restarted job resumed from its backup; an evaluator task evaluated the coordinator's checkpoints; the custom loop through the launcher, and with a killed worker that rejoined)"
