#!/bin/bash
# Automated fault injection: kill -9 a random worker at a random moment of multi-worker training under
# `dtrain-launch --max-restarts`; every run must finish, and its final weights must be bitwise equal to
# an uninterrupted run's. Prints each trial's seed, which worker died when, and the recovery time
# (from the kill to the restarted workers resuming from the backup).
# usage: fault_injection.sh dtrain-launch multi_worker_mnist [trials]
set -u
L=$1; P=$2; trials=${3:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; tail -n 30 "$dir"/*.log; exit 1; }
args=(--model cnn --optimizer adam --epochs 3 --steps-per-epoch 40 --verbose 0 --seed 4)

"$L" -n 2 -- "$P" "${args[@]}" --backup-dir "$dir/ref-backup" --save-freq 10 --save-weights "$dir/ref.safetensors" \
  > "$dir/ref.log" 2>&1 || fail "the uninterrupted run failed"
[ -f "$dir/ref.safetensors" ] || fail "no reference weights"

for t in $(seq "$trials"); do
  seed=$(( $(od -An -N2 -tu2 /dev/urandom) ))
  RANDOM=$seed
  delay_ms=$(( 1200 + RANDOM % 2500 ))
  victim=$(( RANDOM % 2 ))
  log="$dir/trial$t.log"
  start=$(date +%s.%N)
  "$L" -n 2 --max-restarts 3 -- "$P" "${args[@]}" --backup-dir "$dir/backup$t" --save-freq 10 \
    --save-weights "$dir/out$t.safetensors" > "$log" 2>&1 &
  lp=$!
  sleep "$(awk -v d=$delay_ms 'BEGIN {print d / 1000}')"
  pids=($(pgrep -P $lp))
  [ ${#pids[@]} = 2 ] || { wait $lp; fail "trial $t: the workers finished before the kill (delay ${delay_ms} ms)"; }
  kill -9 "${pids[$victim]}"
  killed=$(date +%s.%N)
  resumed=""
  while kill -0 $lp 2>/dev/null; do
    [ -z "$resumed" ] && grep -q "resuming at" "$log" && resumed=$(date +%s.%N)
    sleep 0.05
  done
  wait $lp || fail "trial $t: the job did not finish (launcher exit $?)"
  [ -z "$resumed" ] && grep -q "resuming at" "$log" && resumed=$(date +%s.%N)
  cmp -s "$dir/ref.safetensors" "$dir/out$t.safetensors" || fail "trial $t: final weights differ from the uninterrupted run"
  where=$(grep -o "resuming at epoch [0-9]*, batch [0-9]*" "$log" | head -1)
  printf "trial %d: seed %d, killed worker %d at %.2f s into the run; restarted and %s; recovery %.2f s; weights identical\n" \
    "$t" "$seed" "$victim" "$(echo "$killed - $start" | bc)" "${where:-restarted from scratch (no backup yet)}" \
    "$(echo "${resumed:-$killed} - $killed" | bc)"
done
echo "PASS: $trials fault-injection trials, all bitwise equal to the uninterrupted run"
