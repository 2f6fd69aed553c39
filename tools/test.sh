#!/bin/sh
# The README's test command, and all that .ci/run runs: installs what is missing, builds the release tree
# and passes its tests (unit, multi-process, launcher, packaging, docs, fuzz replays), then the
# sanitizer trees (tests/scripts/sanitizers.sh: ASan + UBSan with short fuzzing, and TSan).
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh --test
cmake -S . -B build -G Ninja -DDTRAIN_WERROR=ON  # examples, launcher and benchmarks warning-free
cmake --build build
ctest --test-dir build --output-on-failure -j2
tests/scripts/sanitizers.sh
