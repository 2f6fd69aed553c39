#!/bin/bash
# dtrain-launch against small shell workers. usage: test_launch.sh path/to/dtrain-launch
set -u
L=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. TF_CONFIG per worker, rank prefixes, distinct free ports
"$L" -n 3 -- sh -c 'echo "$TF_CONFIG"; echo "rank=$DTRAIN_LAUNCH_RANK of $DTRAIN_LAUNCH_WORLD_SIZE" >&2' > "$dir/out" 2> "$dir/err" ||
  fail "3 echo workers failed"
for i in 0 1 2; do
  grep -q "^\[$i\] {\"cluster\": {\"worker\": \[\"localhost:[0-9]*\", \"localhost:[0-9]*\", \"localhost:[0-9]*\"\]}, \"task\": {\"type\": \"worker\", \"index\": $i}}$" "$dir/out" ||
    fail "worker $i's TF_CONFIG line is missing or wrong: $(cat "$dir/out")"
  grep -q "^\[$i\] rank=$i of 3$" "$dir/err" || fail "worker $i's stderr is not prefixed"
done
[ "$(grep -o 'localhost:[0-9]*' "$dir/out" | head -3 | sort -u | wc -l)" = 3 ] || fail "ports are not distinct"

# 2. --base-port
"$L" -n 2 --base-port 41000 -- sh -c 'echo "$TF_CONFIG"' > "$dir/out" || fail "base-port run failed"
grep -q '"localhost:41000", "localhost:41001"' "$dir/out" || fail "--base-port not applied"

# 3. a worker exiting 138 and one killed by a signal: non-zero exit and one summary line each
"$L" -n 3 -- sh -c '[ "$DTRAIN_LAUNCH_RANK" = 1 ] && exit 138; [ "$DTRAIN_LAUNCH_RANK" = 2 ] && kill -9 $$; exit 0' 2> "$dir/err"
code=$?
[ $code = 138 ] || fail "exit code $code, expected 138"
grep -q "^dtrain-launch: worker 1 (pid [0-9]*) exited with code 138$" "$dir/err" || fail "no summary for worker 1: $(cat "$dir/err")"
grep -q "^dtrain-launch: worker 2 (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/err" || fail "no summary for worker 2"
! grep -q "worker 0" "$dir/err" || fail "worker 0 succeeded but is reported"

# 4. SIGTERM to the launcher reaches the workers
"$L" -n 2 -- sh -c 'trap "echo got TERM; exit 143" TERM; echo ready; while :; do sleep 0.05; done' > "$dir/out" 2>&1 &
lp=$!
for t in $(seq 100); do [ "$(grep -c ready "$dir/out")" = 2 ] && break; sleep 0.05; done
kill -TERM $lp
wait $lp
code=$?
[ $code != 0 ] || fail "launcher exited 0 after SIGTERM"
[ "$(grep -c 'got TERM' "$dir/out")" = 2 ] || fail "workers did not get SIGTERM: $(cat "$dir/out")"

# 5. restarts: worker 0 fails on the first attempt only
"$L" -n 2 --max-restarts 2 -- sh -c '[ "$DTRAIN_RESTART_COUNT" = 0 ] && [ "$DTRAIN_LAUNCH_RANK" = 0 ] && exit 3; sleep 0.2; echo "attempt $DTRAIN_RESTART_COUNT ok"' > "$dir/out" 2> "$dir/err" ||
  fail "restart run failed: $(cat "$dir/err")"
grep -q "restarting all 2 workers (restart 1 of 2)" "$dir/err" || fail "no restart message"
[ "$(grep -c 'attempt 1 ok' "$dir/out")" = 2 ] || fail "the restarted workers did not run"

# 6. bad usage
"$L" -- true 2> "$dir/err"; [ $? = 2 ] && grep -q "missing -n" "$dir/err" || fail "missing -n not reported"
"$L" -n 0 -- true 2> /dev/null; [ $? = 2 ] || fail "-n 0 accepted"
"$L" -n 2 2> "$dir/err"; [ $? = 2 ] && grep -q "missing the program" "$dir/err" || fail "missing program not reported"
"$L" -n 1 -- /nonexistent/prog 2> "$dir/err"; [ $? = 127 ] && grep -q "cannot run /nonexistent/prog: No such file" "$dir/err" ||
  fail "exec failure not reported: $(cat "$dir/err")"
echo "PASS: dtrain-launch"
