#!/bin/sh
# dtrain-launch against small /bin/sh workers, one behaviour per case; prints PASS or FAIL: why, and exits
# non-zero on a mismatch.  usage: launch_test.sh path/to/dtrain-launch case
set -u
L=$1
case $L in /*) ;; *) L=$PWD/$L ;; esac  # the exec_failure case changes directory
case_name=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL ($case_name): $*"
  for f in "$dir"/out "$dir"/err; do [ -f "$f" ] && { echo "--- $f:"; cat "$f"; }; done
  exit 1
}
has() { grep -q -e "$1" "$2" || fail "no line matching '$1' in $2"; }
hasnt() { ! grep -q -e "$1" "$2" || fail "unexpected line matching '$1' in $2"; }
count() {  # lines of $2 matching $1; 0 while $2 does not exist yet
  n=$(grep -c -e "$1" "$2" 2> /dev/null)
  echo "${n:-0}"
}
# wait_for N PATTERN FILE: until FILE has N lines matching PATTERN (at most 10 s)
wait_for() {
  t=0
  while [ "$(count "$2" "$3")" -lt "$1" ]; do
    t=$((t + 1))
    [ $t -gt 200 ] && fail "timed out waiting for $1 lines matching '$2'"
    sleep 0.05
  done
}
export D="$dir"  # the workers' handshake files: $D/ready.RANK
# a worker that says "ready" and runs until stopped; $1: what it does on SIGTERM, $2: on SIGINT
looping_worker() {
  echo "trap '$1' TERM; trap '$2' INT; echo ready; touch \"\$D/ready.\$DTRAIN_LAUNCH_RANK\"; while :; do sleep 0.05; done"
}
# shell code that waits until the workers named in $1 (e.g. "0 2") are ready
await_workers() { echo "for r in $1; do while [ ! -e \"\$D/ready.\$r\" ]; do sleep 0.02; done; done"; }

case $case_name in
ps_roles)  # --ps: a chief, the workers and the ps tasks, each with its task in TF_CONFIG and as its prefix
  "$L" -n 2 --ps 2 -- sh -c 'echo "$TF_CONFIG threads=$DTRAIN_NUM_THREADS"; echo "rank=$DTRAIN_LAUNCH_RANK of $DTRAIN_LAUNCH_WORLD_SIZE" >&2' \
    > "$dir/out" 2> "$dir/err" || fail "5 echo tasks failed"
  [ "$(wc -l < "$dir/out")" -eq 5 ] || fail "expected 5 lines on stdout"
  spec='{"cluster": {"chief": \["localhost:[0-9]*"\], "worker": \["localhost:[0-9]*", "localhost:[0-9]*"\], "ps": \["localhost:[0-9]*", "localhost:[0-9]*"\]}'
  rank=0
  for task in chief:0 worker:0 worker:1 ps:0 ps:1; do
    has "^\[$task\] $spec, \"task\": {\"type\": \"${task%:*}\", \"index\": ${task#*:}}} threads=" "$dir/out"
    has "^\[$task\] rank=$rank of 5$" "$dir/err"
    rank=$((rank + 1))
  done
  has "^\[chief:0\] .* threads=1$" "$dir/out"
  has "^\[ps:1\] .* threads=1$" "$dir/out"
  [ "$(head -1 "$dir/out" | grep -o 'localhost:[0-9]*' | sort -u | wc -l)" -eq 5 ] || fail "the 5 ports are not distinct"
  ;;
tf_config)  # TF_CONFIG per worker as the tutorial sets it, rank prefixes on stdout and stderr, distinct ports
  "$L" -n 3 -- sh -c 'echo "$TF_CONFIG"; echo "rank=$DTRAIN_LAUNCH_RANK of $DTRAIN_LAUNCH_WORLD_SIZE" >&2' \
    > "$dir/out" 2> "$dir/err" || fail "3 echo workers failed"
  [ "$(wc -l < "$dir/out")" -eq 3 ] || fail "expected 3 lines on stdout"
  for i in 0 1 2; do
    has "^\[$i\] {\"cluster\": {\"worker\": \[\"localhost:[0-9]*\", \"localhost:[0-9]*\", \"localhost:[0-9]*\"\]}, \"task\": {\"type\": \"worker\", \"index\": $i}}$" "$dir/out"
    has "^\[$i\] rank=$i of 3$" "$dir/err"
  done
  [ "$(head -1 "$dir/out" | grep -o 'localhost:[0-9]*' | sort -u | wc -l)" -eq 3 ] || fail "the 3 ports are not distinct"
  [ "$(cut -d' ' -f2- "$dir/out" | sed 's/"index": [0-9]*//' | sort -u | wc -l)" -eq 1 ] ||
    fail "the workers got different clusters"
  # the workers inherit nothing of each other's (no stray pipe ends): each has the same open files
  if [ -d /proc/self/fd ]; then
    "$L" -n 3 -- sh -c 'exec ls /proc/self/fd' > "$dir/out" || fail "fd listing failed"
    for i in 0 1 2; do grep "^\[$i\] " "$dir/out" | cut -d' ' -f2 | sort -n | tr '\n' ' '; echo; done > "$dir/fds"
    [ "$(sort -u "$dir/fds" | wc -l)" -eq 1 ] || fail "the workers' open files differ: $(cat "$dir/fds")"
  fi
  ;;
job_token)  # one random token for all workers of a launch, a new one per launch; a token set by the user is kept
  "$L" -n 3 -- sh -c 'echo "token=$DTRAIN_JOB_TOKEN"' > "$dir/out" || fail "token workers failed"
  [ "$(grep -c '^\[[0-9]\] token=[0-9a-f]\{64\}$' "$dir/out")" -eq 3 ] || fail "expected 3 tokens of 64 hex digits: $(cat "$dir/out")"
  [ "$(cut -d' ' -f2 "$dir/out" | sort -u | wc -l)" -eq 1 ] || fail "the workers got different tokens"
  "$L" -n 1 -- sh -c 'echo "token=$DTRAIN_JOB_TOKEN"' > "$dir/out2" || fail "second launch failed"
  [ "$(cut -d' ' -f2 "$dir/out" | sort -u)" != "$(cut -d' ' -f2 "$dir/out2")" ] || fail "two launches made the same token"
  DTRAIN_JOB_TOKEN=mine-0123456789abcdef "$L" -n 2 -- sh -c 'echo "token=$DTRAIN_JOB_TOKEN"' > "$dir/out" || fail "user token run failed"
  [ "$(grep -c 'token=mine-0123456789abcdef$' "$dir/out")" -eq 2 ] || fail "the user's token was replaced"
  DTRAIN_JOB_TOKEN_FILE=/some/file "$L" -n 1 -- sh -c 'echo "token=$DTRAIN_JOB_TOKEN."' > "$dir/out" || fail "token file run failed"
  has '^\[0\] token=\.$' "$dir/out"
  ;;
base_port)  # --base-port P gives P, P+1, ...; --host names the host; --flag=value works too
  "$L" -n 2 --base-port 41000 -- sh -c 'echo "$TF_CONFIG"' > "$dir/out" || fail "--base-port run failed"
  has '"localhost:41000", "localhost:41001"\]' "$dir/out"
  "$L" -n3 --base-port=41010 --host=127.0.0.1 -- sh -c 'echo "$TF_CONFIG"' > "$dir/out" || fail "--x=v run failed"
  has '\["127.0.0.1:41010", "127.0.0.1:41011", "127.0.0.1:41012"\]' "$dir/out"
  "$L" -n 2 --host 127.0.0.1 -- sh -c 'echo "$TF_CONFIG"' > "$dir/out" || fail "free ports of --host failed"
  has '\["127.0.0.1:[0-9]*", "127.0.0.1:[0-9]*"\]' "$dir/out"
  ;;
gpus)  # --gpus pins worker i to one GPU of the list, round-robin; without it CUDA_VISIBLE_DEVICES is left alone
  "$L" -n 3 --gpus 4,GPU-5f2e -- sh -c 'echo "gpu=$CUDA_VISIBLE_DEVICES"' > "$dir/out" || fail "--gpus run failed"
  has '^\[0\] gpu=4$' "$dir/out"
  has '^\[1\] gpu=GPU-5f2e$' "$dir/out"
  has '^\[2\] gpu=4$' "$dir/out"
  CUDA_VISIBLE_DEVICES=2,3 "$L" -n 2 -- sh -c 'echo "gpu=$CUDA_VISIBLE_DEVICES"' > "$dir/out" || fail "plain run failed"
  [ "$(grep -c '^\[[01]\] gpu=2,3$' "$dir/out")" -eq 2 ] || fail "without --gpus the workers' view changed: $(cat "$dir/out")"
  ;;
lines)  # lines written in pieces come out whole, never mixed with another worker's; a last partial line is kept
  "$L" -n 3 -- sh -c 'i=0; while [ $i -lt 20 ]; do printf "r$DTRAIN_LAUNCH_RANK-"; sleep 0.01; printf "part2-$i\n";
                        i=$((i + 1)); done; printf "tail-$DTRAIN_LAUNCH_RANK"; printf "err-no-newline" >&2' \
    > "$dir/out" 2> "$dir/err" || fail "line workers failed"
  bad=$(grep -v -E '^\[([0-9])\] (r\1-part2-[0-9]+|tail-\1)$' "$dir/out")
  [ -z "$bad" ] || fail "mixed or unprefixed lines: $bad"
  for i in 0 1 2; do
    [ "$(count "^\[$i\] r$i-part2-" "$dir/out")" -eq 20 ] || fail "worker $i's lines are not all there"
    has "^\[$i\] tail-$i$" "$dir/out"
    has "^\[$i\] err-no-newline$" "$dir/err"
  done
  ;;
progress)  # a progress bar ('\r' redraws) is drawn live on a terminal (the workers are told); in a file only its last line
  bar='[ "$DTRAIN_LAUNCH_RANK" = 0 ] || exit 0; echo "progress=${DTRAIN_PROGRESS:-unset}"; i=1
       while [ $i -le 3 ]; do printf "\r$i/3 bar"; sleep 0.2; i=$((i + 1)); done; printf " - loss\nafter\n"'
  "$L" -n 2 -- sh -c "$bar" > "$dir/out" 2> "$dir/err" || fail "bar workers failed (not a terminal)"
  [ "$(cat "$dir/out")" = "$(printf '[0] progress=unset\n[0] 3/3 bar - loss\n[0] after')" ] || fail "not a terminal: $(cat -A "$dir/out")"
  command -v script > /dev/null || { echo "PASS ($case_name): (no script(1): the terminal half skipped)"; exit 0; }
  script -qec "'$L' -n 2 -- sh -c '$bar'" /dev/null > "$dir/out" 2> "$dir/err" || fail "bar workers failed (a terminal)"
  tr -d '\r' < "$dir/out" | sed 's/\x1b\[K/<clear>/g' > "$dir/screen"
  has '^\[0\] progress=live$' "$dir/screen"
  has '^<clear>\[0\] 1/3 bar<clear>\[0\] 2/3 bar<clear>\[0\] 3/3 bar<clear>\[0\] 3/3 bar - loss$' "$dir/screen"
  has '^\[0\] after$' "$dir/screen"
  ;;
exit_code)  # a worker exiting 138: non-zero exit with its code, one summary line naming worker and code
  "$L" -n 3 -- sh -c '[ "$DTRAIN_LAUNCH_RANK" = 1 ] && exit 138; [ "$DTRAIN_LAUNCH_RANK" = 2 ] && exit 3; exit 0' \
    2> "$dir/err"
  code=$?
  [ $code -ne 0 ] || fail "launcher exited 0"
  has "^dtrain-launch: worker 1 (pid [0-9]*) exited with code 138$" "$dir/err"
  has "^dtrain-launch: worker 2 (pid [0-9]*) exited with code 3$" "$dir/err"
  hasnt "worker 0" "$dir/err"
  # the first failure's code
  "$L" -n 2 -- sh -c '[ "$DTRAIN_LAUNCH_RANK" = 1 ] && { touch "$D/ready.1"; exit 138; }
                     while [ ! -e "$D/ready.1" ]; do sleep 0.02; done; sleep 1; exit 5' 2> "$dir/err"
  code=$?
  [ $code -eq 138 ] || fail "exit code $code, expected the first failure's 138"
  ;;
signal_summary)  # a worker killed by a signal: the summary names the signal, the exit code is 128 + signal
  "$L" -n 3 -- sh -c '[ "$DTRAIN_LAUNCH_RANK" = 2 ] && kill -9 $$; exit 0' 2> "$dir/err"
  code=$?
  [ $code -eq 137 ] || fail "exit code $code, expected 137"
  has "^dtrain-launch: worker 2 (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/err"
  [ "$(count '^dtrain-launch: worker' "$dir/err")" -eq 1 ] || fail "expected exactly one summary line"
  ;;
no_kill_by_default)  # without --kill-on-failure the others finish on their own
  "$L" -n 3 -- sh -c '[ "$DTRAIN_LAUNCH_RANK" = 1 ] && exit 138; sleep 0.5; echo finished' > "$dir/out" 2> "$dir/err"
  code=$?
  [ $code -eq 138 ] || fail "exit code $code, expected 138"
  has '^\[0\] finished$' "$dir/out"
  has '^\[2\] finished$' "$dir/out"
  [ "$(count '^dtrain-launch: worker' "$dir/err")" -eq 1 ] || fail "expected one summary line"
  ;;
kill_on_failure)  # --kill-on-failure: SIGTERM to the rest when one fails; SIGKILL for one that ignores it
  "$L" -n 3 --kill-on-failure -- sh -c "[ \"\$DTRAIN_LAUNCH_RANK\" = 1 ] && { $(await_workers '0 2'); exit 138; }
                                        $(looping_worker 'echo stopped; exit 143' '')" > "$dir/out" 2> "$dir/err"
  code=$?
  [ $code -eq 138 ] || fail "exit code $code, expected the failed worker's 138"
  has '^\[0\] stopped$' "$dir/out"
  has '^\[2\] stopped$' "$dir/out"
  has "^dtrain-launch: worker 1 (pid [0-9]*) exited with code 138$" "$dir/err"
  has "^dtrain-launch: worker 0 (pid [0-9]*) exited with code 143$" "$dir/err"
  start=$(date +%s)
  rm -f "$dir"/ready.*
  "$L" -n 2 --kill-on-failure -- sh -c "[ \"\$DTRAIN_LAUNCH_RANK\" = 1 ] && { $(await_workers 0); exit 138; }
                                        $(looping_worker 'echo ignored' '')" > "$dir/out" 2> "$dir/err"
  code=$?
  [ $code -eq 138 ] || fail "exit code $code, expected 138"
  has '^\[0\] ignored$' "$dir/out"
  has "^dtrain-launch: worker 0 (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/err"
  [ $(($(date +%s) - start)) -lt 30 ] || fail "the stubborn worker was not killed in time"
  ;;
sigterm)  # SIGTERM to the launcher reaches every worker; the launcher exits non-zero
  "$L" -n 2 -- sh -c "$(looping_worker 'echo got TERM; exit 143' '')" > "$dir/out" 2> "$dir/err" &
  lp=$!
  wait_for 2 ready "$dir/out"
  kill -TERM $lp
  wait $lp
  code=$?
  [ $code -eq 143 ] || fail "launcher exited $code after SIGTERM, expected 143"
  [ "$(count '^\[[01]\] got TERM$' "$dir/out")" -eq 2 ] || fail "the workers did not both get SIGTERM"
  has "^dtrain-launch: got SIGTERM; forwarding it to the workers$" "$dir/err"
  ;;
sigterm_graceful)  # workers that exit 0 on SIGTERM: the interrupted run still exits non-zero
  "$L" -n 2 -- sh -c "$(looping_worker 'echo saved; exit 0' '')" > "$dir/out" 2> "$dir/err" &
  lp=$!
  wait_for 2 ready "$dir/out"
  kill -TERM $lp
  wait $lp
  code=$?
  [ $code -eq 143 ] || fail "launcher exited $code, expected 143"
  [ "$(count saved "$dir/out")" -eq 2 ] || fail "the workers did not both stop cleanly"
  has "^dtrain-launch: stopped by signal 15 (Terminated); every worker exited 0$" "$dir/err"
  ;;
sigint_twice)  # the first SIGINT is forwarded, the second kills
  "$L" -n 2 -- sh -c "$(looping_worker '' 'echo got INT')" > "$dir/out" 2> "$dir/err" &
  lp=$!
  wait_for 2 ready "$dir/out"
  kill -INT $lp
  wait_for 2 'got INT' "$dir/out"
  kill -INT $lp
  wait $lp
  code=$?
  [ $code -eq 137 ] || fail "launcher exited $code after two SIGINTs, expected 137"
  has "^dtrain-launch: worker 0 (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/err"
  has "^dtrain-launch: worker 1 (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/err"
  ;;
restarts)  # --max-restarts: worker 0 fails on the first attempt only
  "$L" -n 2 --max-restarts 2 -- sh -c '[ "$DTRAIN_RESTART_COUNT" = 0 ] && [ "$DTRAIN_LAUNCH_RANK" = 0 ] && exit 3;
                                       sleep 0.2; echo "attempt $DTRAIN_RESTART_COUNT ok"' > "$dir/out" 2> "$dir/err" ||
    fail "restart run failed"
  has "restarting all 2 workers (restart 1 of 2)" "$dir/err"
  [ "$(count 'attempt 1 ok' "$dir/out")" -eq 2 ] || fail "the restarted workers did not run"
  ;;
usage)  # bad usage: exit code 2 and a clear message; --help: exit 0, text on stdout
  expect_usage() {  # expect_usage MESSAGE ARGS...
    msg=$1
    shift
    "$L" "$@" > "$dir/out" 2> "$dir/err"
    code=$?
    [ $code -eq 2 ] || fail "dtrain-launch $* exited $code, expected 2"
    has "^dtrain-launch: $msg" "$dir/err"
    has "; see dtrain-launch --help$" "$dir/err"
    [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "dtrain-launch $* wrote more than one line: $(cat "$dir/err")"
    [ ! -s "$dir/out" ] || fail "dtrain-launch $* wrote to stdout"
  }
  expect_usage "missing -n N"
  expect_usage "missing -n N" -- true
  expect_usage "bad value '0' for -n" -n 0 -- true
  expect_usage "bad value 'two' for -n" -n two -- true
  expect_usage "missing value after -n" -n
  expect_usage "missing -- and the program" -n 2
  expect_usage "missing -- before the program to run: dtrain-launch -n N \[options\] -- ./prog" -n 2 ./prog
  expect_usage "missing the program to run after --" -n 2 --
  expect_usage "unknown option --bogus" -n 2 --bogus -- true
  expect_usage "bad value '70000' for --base-port" -n 2 --base-port 70000 -- true
  expect_usage "--base-port 65535 leaves no room for 2 ports" -n 2 --base-port 65535 -- true
  expect_usage "bad value '0,,1' for --gpus" -n 2 --gpus 0,,1 -- true
  "$L" --help > "$dir/out" 2> "$dir/err" || fail "--help exited non-zero"
  has "^usage: dtrain-launch -n N" "$dir/out"
  has "--kill-on-failure" "$dir/out"
  [ ! -s "$dir/err" ] || fail "--help wrote to stderr"
  ;;
exec_failure)  # a program that cannot be run: the exec error comes back from the child
  expect_exec() {  # expect_exec PROGRAM ERROR
    "$L" -n 2 -- "$1" > "$dir/out" 2> "$dir/err"
    code=$?
    [ $code -eq 127 ] || fail "exit code $code for $1, expected 127"
    has "^dtrain-launch: cannot run $1: $2$" "$dir/err"
    hasnt "^dtrain-launch: worker" "$dir/err"
  }
  expect_exec /nonexistent/prog "No such file or directory"
  cd "$dir" || fail "cd"
  expect_exec ./prog "No such file or directory"
  printf '#!/bin/sh\necho hi\n' > "$dir/prog"
  expect_exec ./prog "Permission denied"
  expect_exec no-such-command-dtrain "No such file or directory"
  ;;
*)
  echo "unknown case $case_name"
  exit 2
  ;;
esac
echo "PASS ($case_name)"
