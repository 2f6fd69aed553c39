#!/bin/bash
# docs/packaging.md's "Plain header inclusion" lines, as written there (only -O2 made -O0, for time, and
# dtrain/include this tree's include/): each builds a small program, app.cpp (a model trained a few
# steps) or ring_app.cpp (the same under multi_worker_mirrored_strategy<ring_tcp>, one worker), which
# must run. A compiler the machine lacks is skipped, and said so.
# usage: header_inclusion.sh <dtrain source dir>
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/app.cpp" << 'CPP'
#include <cstdio>
#include <dtrain/dtrain.hpp>
using net = dtrain::sequential<dtrain::input<4>, dtrain::dense<8, dtrain::relu>, dtrain::dense<2>>;
int main() {
  net model;
  model.compile({.optimizer = dtrain::sgd{{.learning_rate = 0.1f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}}});
  dtrain::tensor x = dtrain::zeros({16, 4}), y = dtrain::zeros({16});
  x.fill(1.0f);
  const auto h = model.fit(x, y, {.epochs = 3, .verbose = 0, .batch_size = 8});
  std::printf("trained: loss %.4f -> %.4f\n", h["loss"].front(), h["loss"].back());
  return h["loss"].back() < h["loss"].front() ? 0 : 1;
}
CPP
sed -e 's|#include <dtrain/dtrain.hpp>|&\n#include <dtrain/distribute/comm/ring_tcp.hpp>|' \
    -e 's|  net model;|  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy;\n  auto model = strategy.make_model<net>();|' \
    "$tmp/app.cpp" > "$tmp/ring_app.cpp"

lines=$(sed -n '/^## Plain header inclusion/,/^## /p' "$src/docs/packaging.md" | grep -E '^(g|clang)\+\+')
[ -n "$lines" ] || { echo "FAIL: no compiler lines in docs/packaging.md's Plain header inclusion"; exit 1; }
built=0
while read -r line; do
  compiler=${line%% *}
  if ! command -v "$compiler" > /dev/null; then
    echo "skipped (no $compiler here): $line"
    continue
  fi
  cmd=$(echo "$line" | sed -e "s| dtrain/include | $src/include |" -e 's| -O2 | -O0 |')
  (cd "$tmp" && rm -f a.out && eval "$cmd" > log 2>&1) || { echo "FAIL: $line"; tail -30 "$tmp/log"; exit 1; }
  out=$(cd "$tmp" && env -u TF_CONFIG ./a.out 2>&1) || { echo "FAIL: the program of '$line' failed: $out"; exit 1; }
  echo "ok: $line: $out"
  built=$((built + 1))
done <<< "$lines"
echo "PASS: header inclusion ($built lines)"
