#!/bin/sh
# Fuzzes every reader a stranger or a damaged file can reach (tests/fuzz/): builds the libFuzzer
# harnesses with clang-19 (ASan + UBSan) in build-fuzz/, then runs each for RUNS executions (default
# 1,000,000) under a memory cap, and prints one line per harness. Crashes land in build-fuzz/crash-*;
# copy one to tests/fuzz/crashes/<name>/ once fixed, so fuzz_replay_<name> keeps it fixed.
#   tools/fuzz.sh [RUNS] [harness...]
set -eu
cd "$(dirname "$0")/.."
runs=${1:-1000000}
[ $# -gt 0 ] && shift
names=${*:-"handshake frame safetensors npy idx csv cluster training_state tfrecord example png jpeg bmp gif"}
cxx=${CXX:-clang++-19}
command -v "$cxx" > /dev/null || { echo "fuzz.sh: $cxx not found (Debian: apt install clang-19 libfuzzer-19-dev)"; exit 2; }
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRAIN_FUZZ=ON \
  -DDTRAIN_BUILD_EXAMPLES=OFF -DDTRAIN_BUILD_BENCHMARKS=OFF > /dev/null
targets=""
for n in $names; do targets="$targets fuzz_$n"; done
cmake --build build-fuzz --target $targets
mkdir -p build-fuzz/runs
printf '%-16s %12s %8s %9s  %s\n' harness executions seconds peak_MB result
status=0
for n in $names; do
  mkdir -p "build-fuzz/runs/$n"
  log="build-fuzz/runs/$n.log"
  start=$(date +%s)
  if (cd build-fuzz && "./tests/fuzz/fuzz_$n" -runs="$runs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
        -print_final_stats=1 "runs/$n" "../tests/fuzz/corpus/$n") > "$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log)"
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
  printf '%-16s %12s %8s %9s  %s\n' "$n" "${execs:-?}" "$(( $(date +%s) - start ))" "${rss:-?}" "$result"
done
exit $status
