#!/bin/bash
# The repository speaks of the product only: no issue-tracker tags or numbers, no words about the machines
# or tools it was developed with, no package-index host names outside the peer benchmarks, and TensorFlow's
# documents named as such. Greps every tracked text file (outside the fuzz corpora) for the patterns below
# and prints each hit as file:line: text.
#   usage: check_vocabulary.sh <repository root>
# Prints "PASS: vocabulary" when nothing matches; otherwise the hits and "FAIL: vocabulary", exit status 1.
set -u
root=${1:-.}
cd "$root" || { echo "FAIL: vocabulary: cannot enter $root"; exit 1; }

tags='backend|cuda|nccl|perf|scale-out|state|security|ecosystem|fidelity|models|semantics|precision|sequence'
tags="$tags|convnets|ps|keras-breadth|scale|hygiene|house"
hosts='pypi[.]org|python[h]osted|download[.]pytorch'
patterns=(
  "\\[($tags)\\]"                                                        # issue tags
  'issue #?[0-9]+'                                                        # issue numbers
  'device[ ]tool'                                                         # the development tooling
  "$hosts"                                                                # package-index hosts
  '\bseeds?\b document|the seeds\b|seed (tutorial|example|program|document|pattern)s?'  # TF's documents
  'this (2-core )?VM'                                                     # the development machine
)
self=tests/scripts/check_vocabulary.sh

# the files: in a git checkout the tracked ones and the new ones git does not ignore, else every file under
# the root (outside .git and build trees)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" -ef . ]; then
  mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard)
else
  mapfile -d '' files < <(find . -type f ! -path './.git/*' ! -path './build*' -printf '%P\0')
fi

selected=()
for f in "${files[@]}"; do
  case "$f" in
    "$self" | tests/fuzz/corpus/* | tests/fuzz/crashes/*) continue ;;  # this script; fuzz inputs
  esac
  [ -f "$f" ] || continue
  selected+=("$f")
done

hits=""
if [ ${#selected[@]} -gt 0 ]; then
  for p in "${patterns[@]}"; do
    # -I: skip binary files; -n: line numbers; -H: always the file name
    out=$(printf '%s\0' "${selected[@]}" | xargs -0 grep -InHiP -e "$p" -- 2>/dev/null)
    # the peer benchmarks install their peers (PyTorch, TensorFlow, Gloo) from the package indexes
    [ "$p" = "$hosts" ] && out=$(printf '%s\n' "$out" | grep -v '^bench/peers/')
    [ -n "$out" ] && hits+="$out"$'\n'
  done
fi
# each line once (a line may match several patterns), in file and line order
[ -n "$hits" ] && printf '%s' "$hits" | sort -t: -k1,1 -k2,2n -u | sed 's/^\([^:]*:[0-9]*\):/\1: /'

if [ -z "$hits" ]; then
  echo "PASS: vocabulary (${#selected[@]} files)"
  exit 0
fi
echo "FAIL: vocabulary: the lines above speak of the development, not of the product"
exit 1
