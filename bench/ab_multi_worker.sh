#!/bin/bash
# Two builds of multi_worker_throughput against each other on 2 workers of this machine: ROUNDS rounds
# that run OLD then NEW for each case, so that both see the same machine load; prints per case the median
# ms/step of each and the median of the per-round ratios old/new (above 1: the new build is faster).
# Cases: model, per-worker batch, step|fit, steps, and the transport (shm: same-host shared memory, tcp:
# loopback TCP).
#   [CASES="mlp:32:fit:2000:tcp ..."] bench/ab_multi_worker.sh OLD_BUILD NEW_BUILD [ROUNDS (7)]
set -eu
old=$1/bench/multi_worker_throughput new=$2/bench/multi_worker_throughput launch=$2/tools/launch/dtrain-launch
rounds=${3:-7}
cases=${CASES:-"mlp:32:fit:2000:shm mlp:32:step:2000:shm mlp:32:fit:2000:tcp cnn:64:fit:100:shm"}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
ms() { grep -o 'ms/step [0-9.]*' | head -1 | awk '{print $2}'; }
for r in $(seq "$rounds"); do
  for c in $cases; do
    IFS=: read -r model batch mode steps transport <<< "$c"
    shm=1; [ "$transport" = tcp ] && shm=0
    for b in old new; do
      bin=$old; [ $b = new ] && bin=$new
      DTRAIN_SHM=$shm "$launch" -n 2 -- "$bin" "$steps" "$batch" "$mode" "$model" 2>&1 | ms >> "$t/$b.$c"
    done
    paste "$t/old.$c" "$t/new.$c" | tail -1 | awk '{printf "%.4f\n", $1 / $2}' >> "$t/ratio.$c"
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "n/a")}'; }
echo "# 2 workers, medians of $rounds rounds: ms/step of each build, and old/new per round (above 1: new faster)"
printf "%-26s %9s %9s %9s %9s %9s\n" case old_ms new_ms old/new min max
for c in $cases; do
  printf "%-26s %9s %9s %9s %9s %9s\n" "$c" "$(median < "$t/old.$c")" "$(median < "$t/new.$c")" "$(median < "$t/ratio.$c")" \
    "$(sort -g "$t/ratio.$c" | head -1)" "$(sort -g "$t/ratio.$c" | tail -1)"
done
