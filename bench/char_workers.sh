#!/bin/bash
# examples/char_transformer on one worker and mirrored on two (the launcher, this machine's cores split
# between them), seeing the same number of text windows: one worker STEPS steps of its batch, two workers
# STEPS / 2 steps of the twice larger global batch at twice the peak learning rate (the linear scaling
# rule). Per seed: the validation loss and perplexity at the end and the wall time; then the medians. The
# corpus is the fortunes package's (examples/char_transformer.cpp).
#   bench/char_workers.sh BUILD_DIR [STEPS (1000)] [SEEDS ("1 2 3")] [LEARNING_RATE (1e-3)]
set -eu
build=$1 steps=${2:-1000} seeds=${3:-"1 2 3"} rate=${4:-1e-3}
bin=$build/examples/char_transformer launch=$build/tools/launch/dtrain-launch
[ -x "$bin" ] && [ -x "$launch" ] || { echo "char_workers: build char_transformer and dtrain-launch in $build first"; exit 2; }
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
run() {  # workers seed -> "val_loss perplexity seconds"
  local n=$1 seed=$2 s=$((steps / $1)) start end
  local args="--epochs 4 --steps-per-epoch $((s / 4)) --seed $seed --sample-length 0 --verbose 0"
  args="$args --learning-rate $(awk -v r="$rate" -v n="$n" 'BEGIN { printf "%g", r * n }')"
  start=$(date +%s.%N)
  if [ "$n" = 1 ]; then "$bin" $args > "$t/out" 2>&1
  else "$launch" -n "$n" -- "$bin" $args > "$t/out" 2>&1
  fi || { cat "$t/out"; exit 1; }
  end=$(date +%s.%N)
  grep -m1 'validation: loss' "$t/out" | sed -E 's/.*loss ([0-9.]+), perplexity ([0-9.]+).*/\1 \2/' | tr '\n' ' '
  echo "$end - $start" | bc
}
echo "# char_transformer on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores): $steps steps of one worker's batch 32 at peak rate $rate against $((steps / 2)) of two workers' (global batch 64) at twice it"
printf "%-8s %5s %10s %11s %9s\n" workers seed val_loss perplexity seconds
for seed in $seeds; do
  for n in 1 2; do
    read -r loss ppl secs <<< "$(run "$n" "$seed")"
    printf "%-8s %5s %10s %11s %9.1f\n" "$n" "$seed" "$loss" "$ppl" "$secs"
    echo "$loss $secs" >> "$t/w$n"
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "n/a")}'; }
for n in 1 2; do
  printf "median   %5s %10s %11s %9.1f\n" "w$n" "$(cut -d' ' -f1 "$t/w$n" | median)" "" "$(cut -d' ' -f2 "$t/w$n" | median)"
done
