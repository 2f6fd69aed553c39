#!/bin/bash
# Automated fault injection on multi-worker training (multi_worker_mnist's MLP under dtrain-launch, with
# backup_and_restore every 20 of its 300 batches). Each trial breaks a run its own way, at a random moment
# between the first backup and the tenth (counted, so that the moment falls inside the run on a fast
# machine and a slow one alike); every run must finish with the final weights of an uninterrupted run:
#   chief       kill -9 worker 0; the launcher restarts the job (--max-restarts)
#   worker      kill -9 worker 1 likewise
#   mid-write   kill -9 the chief while it writes a backup after the first (its temporary file is there
#               at the kill, and stays): the restart resumes from the previous backup
#   damaged     the job dies, then its newest backup is damaged (a flipped byte); the restart says so,
#               resumes from the previous backup
#   fewer       a job of 4 workers dies; it resumes on 2 workers with the same global batch (2 x 64
#               instead of 4 x 32): equal to float rounding, not bitwise (another summation order). This
#               trial trains with SGD: Adam's normalisation turns rounding differences of weights whose
#               gradients are near zero into visible ones (an uninterrupted 4 x 32 Adam run differs
#               from a 2 x 64 one by more than the rounding bound), SGD keeps them at rounding size.
# Prints each trial's seed, what was killed when, where the job resumed, and the recovery time (from
# the kill to the workers resuming from the backup).
# usage: fault_injection.sh dtrain-launch multi_worker_mnist
set -u
L=$1; P=$2
dir=$(mktemp -d)
trap 'pkill -9 -P $$ 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; tail -n 30 "$dir"/*.log; exit 1; }
args=(--model mlp --optimizer adam --epochs 3 --steps-per-epoch 100 --verbose 0 --seed 4 --save-freq 20)

"$L" -n 2 -- "$P" "${args[@]}" --backup-dir "$dir/ref-backup" --save-weights "$dir/ref.safetensors" \
  > "$dir/ref.log" 2>&1 || fail "the uninterrupted run failed"
"$L" -n 2 -- "$P" "${args[@]}" --optimizer sgd --save-weights "$dir/ref-sgd.safetensors" > "$dir/ref-sgd.log" 2>&1 ||
  fail "the uninterrupted SGD run failed"
[ -f "$dir/ref.safetensors" ] && [ -f "$dir/ref-sgd.safetensors" ] || fail "no reference weights"

# the largest |a - b| / (1e-3 + |b|) over the weights of two safetensors files (no numpy needed)
max_rel_diff() {
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
print("%.3g" % max(abs(x - y) / (1e-3 + abs(y)) for k in a for x, y in zip(a[k], b[k])))
EOF
}
newest_backup() { sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$1/checkpoint"; }
backups() {  # how many backups the job has written: the newest one's number (ckpt-N; older ones are deleted)
  local n; n=$(newest_backup "$1" 2>/dev/null); echo "${n#ckpt-}" | grep -E '^[0-9]+$' || echo 0
}
wait_for_backups() {  # wait_for_backups <launcher pid> <backup dir> <count> <trial>
  local deadline=$((SECONDS + 120))
  until [ "$(backups "$2")" -ge "$3" ]; do
    kill -0 "$1" 2>/dev/null && ((SECONDS < deadline)) || fail "$4: no backup to resume from"
    sleep 0.02
  done
}
worker_pids() { pgrep -P "$1"; }  # in rank order: the launcher starts rank 0 first
when_resumed() {  # waits for the launcher $1 to end; prints when its log $2 first said "resuming at"
  local resumed=""
  while kill -0 "$1" 2>/dev/null; do
    [ -z "$resumed" ] && grep -q "resuming at" "$2" && resumed=$(date +%s.%N)
    sleep 0.02
  done
  [ -z "$resumed" ] && grep -q "resuming at" "$2" && resumed=$(date +%s.%N)
  echo "$resumed"
}
# at_random_moment <launcher pid> <backup dir> <fewest backups> <trial>: returns once the job has written
# a random number of backups, from the fewest to 10, and a random 0-30 ms more have passed
at_random_moment() {
  wait_for_backups "$1" "$2" $(( $3 + RANDOM % (11 - $3) )) "$4"
  sleep "$(awk -v d=$(( RANDOM % 30 )) 'BEGIN {print d / 1000}')"
}
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
where() { grep -o "resuming at epoch [0-9]*, batch [0-9]*" "$1" | head -1; }

passed=0
for trial in chief worker mid-write damaged fewer; do
  seed=$(( $(od -An -N2 -tu2 /dev/urandom) ))
  RANDOM=$seed
  log="$dir/$trial.log"; b="$dir/$trial-backup"; out="$dir/$trial.safetensors"
  case $trial in
    chief|worker)
      victim=$([ $trial = chief ] && echo 0 || echo 1)
      start=$(date +%s.%N)
      "$L" -n 2 --max-restarts 3 -- "$P" "${args[@]}" --backup-dir "$b" --save-weights "$out" > "$log" 2>&1 &
      lp=$!
      at_random_moment $lp "$b" 1 $trial
      pids=($(worker_pids $lp))
      [ ${#pids[@]} = 2 ] || { wait $lp; fail "$trial: the workers finished before the kill"; }
      kill -9 "${pids[$victim]}"; killed=$(date +%s.%N)
      resumed=$(when_resumed $lp "$log")
      wait $lp || fail "$trial: the job did not finish (launcher exit $?)"
      cmp -s "$dir/ref.safetensors" "$out" || fail "$trial: final weights differ from the uninterrupted run"
      printf "trial %-9s seed %5d: killed worker %d at %s s; %s; recovery %s s; weights identical\n" "$trial" "$seed" \
        "$victim" "$(since "$start" "$killed")" "$(where "$log" || true)" "$(since "$killed" "${resumed:-$killed}")"
      ;;
    mid-write)
      "$L" -n 2 --max-restarts 3 -- "$P" "${args[@]}" --backup-dir "$b" --save-weights "$out" > "$log" 2>&1 &
      lp=$!
      wait_for_backups $lp "$b" 1 $trial
      deadline=$((SECONDS + 120))
      pids=($(worker_pids $lp))
      partial=""
      # the chief is writing the next backup: stop it at once, and kill it if the temporary file is still
      # there (the write is cut off); a write that finished meanwhile lets it go on to the next one
      while [ -z "$partial" ]; do
        until compgen -G "$b/.ckpt-*.tmp*" > /dev/null; do
          kill -0 $lp 2>/dev/null && ((SECONDS < deadline)) || fail "mid-write: never caught a backup being written"
        done
        kill -STOP "${pids[0]}"
        partial=$(compgen -G "$b/.ckpt-*.tmp*" | head -1)
        [ -n "$partial" ] || kill -CONT "${pids[0]}"
      done
      kill -9 "${pids[0]}"; killed=$(date +%s.%N)
      partial=$(basename "$partial")
      resumed=$(when_resumed $lp "$log")
      wait $lp || fail "mid-write: the job did not finish (launcher exit $?)"
      cmp -s "$dir/ref.safetensors" "$out" || fail "mid-write: final weights differ from the uninterrupted run"
      printf "trial %-9s: killed the chief while it wrote %s (left behind); %s; recovery %s s; weights identical\n" \
        "$trial" "$partial" "$(where "$log" || true)" "$(since "$killed" "${resumed:-$killed}")"
      ;;
    damaged|fewer)
      if [ $trial = damaged ]; then n=2; bs=64; opt=adam; else n=4; bs=32; opt=sgd; fi
      "$L" -n $n -- "$P" "${args[@]}" --optimizer $opt --batch-size $bs --backup-dir "$b" > "$log" 2>&1 &
      lp=$!
      at_random_moment $lp "$b" $([ $trial = damaged ] && echo 2 || echo 1) $trial
      pids=($(worker_pids $lp))
      kill -9 "${pids[$(( RANDOM % n ))]}"
      wait $lp && fail "$trial: the job survived the kill without --max-restarts"
      newest=$(newest_backup "$b")
      if [ $trial = damaged ]; then
        f="$b/$newest.safetensors"
        python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(-3, 2); c = f.read(1); f.seek(-3, 2); f.write(bytes([c[0] ^ 0x10]))" "$f"
      fi
      "$L" -n 2 -- "$P" "${args[@]}" --optimizer $opt --batch-size 64 --backup-dir "$b" --save-weights "$out" > "$log.resume" 2>&1 ||
        { cat "$log.resume" >> "$log"; fail "$trial: the resumed job failed"; }
      if [ $trial = damaged ]; then
        grep -q "unusable, falling back" "$log.resume" && grep -q "$newest.safetensors: checksum mismatch" "$log.resume" ||
          { cat "$log.resume" >> "$log"; fail "damaged: the restart did not report the damaged $newest"; }
        cmp -s "$dir/ref.safetensors" "$out" || fail "damaged: final weights differ from the uninterrupted run"
        printf "trial %-9s seed %5d: the job died, its newest backup %s got a flipped byte; the restart reported it, %s from the previous one; weights identical\n" \
          "$trial" "$seed" "$newest" "$(where "$log.resume")"
      else
        d=$(max_rel_diff "$out" "$dir/ref-sgd.safetensors")
        awk -v d="$d" 'BEGIN { exit !(d <= 1e-3) }' || fail "fewer: weights differ from the uninterrupted run by $d (relative)"
        printf "trial %-9s seed %5d: 4 workers x 32 died after backup %s; 2 workers x 64 %s; weights within %s (relative) of the uninterrupted run\n" \
          "$trial" "$seed" "$newest" "$(where "$log.resume")" "$d"
      fi
      ;;
  esac
  passed=$((passed + 1))
done
echo "PASS: $passed fault-injection trials"
