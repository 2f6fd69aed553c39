#!/bin/bash
# Every complete program in the docs compiles: each ```cpp block of README.md and docs/ that defines
# `int main` is compiled (syntax and templates, no link) against the headers, as a user copying it
# would: on its own when it has its own #include lines, else after the blocks of the same page that
# open with an #include and have no main (the page's setup). Fragments (no main) are left alone.
# usage: doc_programs.sh <c++ compiler> <dtrain source dir>
set -u
cxx=$1; root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0; failed=0
for md in "$root"/README.md "$root"/docs/*.md "$root"/docs/tutorials/*.md; do
  # one file per cpp block: <dir>/<doc>.<k>.cpp
  awk -v out="$dir/$(basename "$md" .md)" '
    /^```cpp[ \t]*$/ { inside = 1; k++; file = out "." k ".cpp"; next }
    /^```/ && inside { inside = 0; close(file); next }
    inside { print > file }' "$md"
  : > "$dir/setup"
  base="$dir/$(basename "$md" .md)"
  for k in $(seq 1 "$(ls "$base".*.cpp 2>/dev/null | wc -l)"); do
    src="$base.$k.cpp"
    if ! grep -q '^int main' "$src"; then
      head -1 "$src" | grep -q '^#include' && cat "$src" >> "$dir/setup"  # the page's setup
      continue
    fi
    n=$((n + 1))
    if grep -q '^#include' "$src"; then cp "$src" "$dir/program.cpp"; else cat "$dir/setup" "$src" > "$dir/program.cpp"; fi
    if ! "$cxx" -std=c++20 -fsyntax-only -I"$root/include" "$dir/program.cpp" 2> "$dir/err"; then
      echo "FAIL: a program in ${md#"$root"/} does not compile (block $(basename "$src")):"
      head -20 "$dir/err" | sed 's/^/  /'
      failed=1
    fi
  done
done
[ $n -gt 0 ] || { echo "FAIL: no complete program found in the docs"; exit 1; }
[ $failed -eq 0 ] && echo "PASS: $n doc programs compile"
exit $failed
