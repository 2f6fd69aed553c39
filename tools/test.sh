#!/bin/sh
# The README's test command, and all that .ci/run runs: installs what is missing, then three stages, each
# run and reported even when an earlier one failed:
#   release  a release tree of its own (build-test/): the numeric unit tests (kernels, layers, losses,
#            optimizers, metrics, golden values), multi-process, launcher, packaging, docs, fuzz replays
#   asan     clang-19, AddressSanitizer + UndefinedBehaviorSanitizer: every unit test, a multi-process test
#            and a few seconds of fuzzing per parser (tests/scripts/sanitizers.sh asan)
#   tsan     clang-19, ThreadSanitizer: the communicator and strategy tests; every public header compiled
#            on its own (tests/scripts/sanitizers.sh tsan)
# Each stage has a time budget, measured on 2 cores with a cold compiler cache (the whole run about 30
# minutes); a stage that overruns it says so, and its labels (ctest -L slow|multiprocess|build) are where
# to look. The last line counts the tests of every stage: "total: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
tools/install-deps.sh --test || exit 1

# budgets in seconds (2 cores, cold ccache; fresh clones on an AMD EPYC Zen 4 guest took 895, 458 and 278
# one evening, 1035, 491 and 314 in a busier hour of its host)
budget_release=1100
budget_asan=500
budget_tsan=330

passed=0 failed=0 failed_stages="" summary=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# count LOG: adds the ctest summary line of LOG ("N% tests passed, F tests failed out of T") to the totals
count() {
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)
  [ -n "$line" ] || return 0
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/')
  t=$(echo "$line" | sed -E 's/.* failed out of ([0-9]+).*/\1/')
  passed=$((passed + t - f)) failed=$((failed + f))
}

# stage NAME BUDGET COMMAND...: runs COMMAND, tees its output, records the result and the time
stage() {
  name=$1 budget=$2
  shift 2
  echo "==== $name (budget ${budget} s)"
  start=$(date +%s)
  # (a status file: the pipe's status would be tee's)
  { "$@"; echo $? > "$log.rc"; } 2>&1 | tee "$log"
  rc=$(cat "$log.rc")
  seconds=$(($(date +%s) - start))
  count "$log"
  result=passed
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc)" failed_stages="$failed_stages $name"
    grep -qE '^[0-9]+% tests passed' "$log" || failed=$((failed + 1))  # it failed before its tests ran
  fi
  over=""
  [ "$seconds" -gt "$budget" ] && over=" (over its budget of $budget s)"
  summary="$summary$(printf '%-8s %-18s %5d s of %5d s%s' "$name" "$result" "$seconds" "$budget" "$over")
"
  rm -f "$log.rc"
}

# The release tree: examples, launcher and benchmarks warning-free (-Werror), at -O1 like the test
# programs (DTRAIN_TEST_OPTIMIZE): tests check behaviour, not speed, and -O1 compiles them in less than half
# of -O3's time (CMake's Release default). A tree of its own, so that build/ (the demo's, the
# benchmarks') keeps the Release flags. The slow tests carry a COST, so that ctest starts them first.
# Every header compiling on its own is checked in the tsan stage's clang tree, three times faster there.
# The unit tests of the model, strategies, communicators, data, callbacks and checkpoints run in the asan
# stage (and the tsan one) rather than here too: building them twice would cost a third of the CI's time.
# Three tests at a time on two cores: several of them wait on the network (the interop tests' package
# installs) or on their worker processes, which leaves a core idle at two.
release() {
  cmake -S . -B build-test -G Ninja -DDTRAIN_WERROR=ON -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DDTRAIN_UNIT_TESTS="core;backend;layers;losses;optimizers;metrics;golden" &&
    cmake --build build-test &&
    ctest --test-dir build-test --output-on-failure -j3 -E '^headers_self_contained$'
}

stage release $budget_release release
stage asan $budget_asan tests/scripts/sanitizers.sh asan
stage tsan $budget_tsan tests/scripts/sanitizers.sh tsan

echo "==== stages"
printf '%s' "$summary"
echo "total: $passed passed, $failed failed"
[ -z "$failed_stages" ]
