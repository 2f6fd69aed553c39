#!/bin/sh
# CI's second and third build trees (tools/test.sh runs each as a stage after the release tree's tests):
#   tests/scripts/sanitizers.sh [asan|tsan]   (both when no argument is given)
# - build-asan: clang-19 with AddressSanitizer + UndefinedBehaviorSanitizer (every finding fatal, leaks
#   too): every unit test, multi_worker_mnist's workers killed, hung and fed garbage
#   (example_multi_worker_failures), and a few seconds of fuzzing per parser after its corpus and past
#   crashes. Built at -O0: it compiles three times faster than -O1 and its tests take two minutes. The
#   release tree's other multi-process tests (fault injection, the tutorial's saving programs) run library
#   code the unit tests run here; under ASan they would add eight minutes.
# - build-tsan: ThreadSanitizer on the communicator and strategy tests (threads and sockets), at -O1;
#   and every public header compiled on its own (headers_self_contained: clang's precompiled bases keep
#   their instantiations, GCC's do not).
# Both build only what they run, and clang-19 checks every other example for warnings (examples_warnings:
# -Wall -Wextra -Werror, front end only).
set -eu
cd "$(dirname "$0")/../.."
common="-G Ninja -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_BUILD_TYPE=Debug -DDTRAIN_BUILD_BENCHMARKS=OFF -DDTRAIN_WERROR=ON"
export UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS=halt_on_error=1

asan() {
  echo "== ASan + UBSan: unit tests and fuzzers (build-asan)"
  cmake -S . -B build-asan $common -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DDTRAIN_SANITIZE=address,undefined -DDTRAIN_FUZZ=ON \
    -DDTRAIN_FUZZ_SMOKE_SECONDS=5
  cmake --build build-asan --target unit_tests fuzzers sanitizer_examples
  ctest --test-dir build-asan -L "unit|fuzz" -R "^(example_multi_worker_failures)$|" --output-on-failure -j2
}

tsan() {
  echo "== ThreadSanitizer: communicator and strategy tests, and every header on its own (build-tsan)"
  cmake -S . -B build-tsan $common -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DDTRAIN_SANITIZE=thread -DDTRAIN_BUILD_EXAMPLES=OFF
  cmake --build build-tsan --target test_comm test_distribute
  ctest --test-dir build-tsan -R "^(comm|distribute|headers_self_contained)$" --output-on-failure -j2
}

case ${1:-both} in
asan) asan ;;
tsan) tsan ;;
both) asan; tsan ;;
*) echo "usage: sanitizers.sh [asan|tsan]" >&2; exit 2 ;;
esac
