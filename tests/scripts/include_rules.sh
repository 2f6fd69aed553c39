#!/bin/bash
# The layering the design promises, checked on what the compiler really opens (g++ -H): a header may not
# pull in the folders above it.
#   model/sequential.hpp: not the trainer (model/fit.hpp), data pipelines, callbacks, checkpoints, nor
#                         what only they need (nlohmann-json, zlib)
#   layers/*, losses/*, metrics/*, optimizers/* (and backend/backend.hpp): not the model, data,
#                         callbacks, checkpoints or distribute/
#   layers/*: the backend concept only, never a backend (backend/cpu.hpp, cuda, opaque)
#   everywhere: no BLAS header and no xtensor-blas (BLAS is declared once, in backend/cpu/blas.hpp)
# usage: include_rules.sh <c++ compiler> <dtrain source dir>
set -u
cxx=$1; root=$2
failed=0
check() {  # check <header> <forbidden regex>
  local opened
  opened=$(echo "#include <$1>" | "$cxx" -std=c++20 -H -E -I"$root/include" -x c++ - 2>&1 >/dev/null |
           grep -E '^\.+ ' | sed 's/^\.* //' | grep -E "$2")
  if [ -n "$opened" ]; then
    echo "FAIL: $1 includes what it must not ($2):"
    echo "$opened" | sed 's/^/  /'
    failed=1
  fi
}
check dtrain/model/sequential.hpp 'dtrain/(model/fit|data/|callbacks/|checkpoint/)|nlohmann|zlib\.h'
for h in "$root"/include/dtrain/{layers,losses,metrics,optimizers}/*.hpp "$root"/include/dtrain/backend/backend.hpp; do
  check "${h#"$root"/include/}" 'dtrain/(model|data|callbacks|checkpoint|distribute)/'
done
for h in "$root"/include/dtrain/layers/*.hpp; do
  check "${h#"$root"/include/}" 'dtrain/backend/(cpu|opaque|cuda)'
done
check dtrain/dtrain.hpp 'xtensor-blas|xflens|cblas\.h|f77blas\.h'
[ $failed -eq 0 ] && echo "PASS: include rules"
exit $failed
