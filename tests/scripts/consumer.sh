#!/bin/bash
# Installs dtrain from a build tree into a temporary prefix, then configures, builds and runs the tiny
# project in tests/consumer against it with find_package, and against the sources with add_subdirectory
# and FetchContent.
# usage: consumer.sh <dtrain build dir> <dtrain source dir>
set -u
build=$1; src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -40 "$tmp/log"; exit 1; }
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/log" 2>&1 || fail "cmake --install"
[ -f "$tmp/prefix/share/cmake/dtrain/dtrainConfig.cmake" ] || fail "no dtrainConfig.cmake installed"
[ -f "$tmp/prefix/include/dtrain/dtrain.hpp" ] || fail "headers not installed"
[ -x "$tmp/prefix/bin/dtrain-launch" ] || fail "dtrain-launch not installed"

for mode in find_package add_subdirectory FetchContent; do
  b="$tmp/$mode"
  cmake -S "$src/tests/consumer" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -DDTRAIN_CONSUMER_MODE=$mode -DCMAKE_PREFIX_PATH="$tmp/prefix" -DDTRAIN_SOURCE_DIR="$src" > "$tmp/log" 2>&1 ||
    fail "$mode: configure"
  if [ $mode = find_package ]; then  # the installed headers, not the source tree's
    grep -q "$tmp/prefix/include" "$b/build.ninja" || fail "find_package: the app does not use the installed headers"
    grep -q "$src/include" "$b/build.ninja" && fail "find_package: the app uses the source tree's headers"
  fi
  cmake --build "$b" --target app > "$tmp/log" 2>&1 || fail "$mode: build"
  "$b/app" > "$tmp/log" 2>&1 || fail "$mode: the app failed"
  echo "$mode: $(cat "$tmp/log")"
done

# Conan's test_package builds against the installed tree too (its CMakeLists.txt asks for the same
# package and target that the recipe's CMakeDeps generates); the recipe's version is the project's.
b="$tmp/test_package"
cmake -S "$src/test_package" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  > "$tmp/log" 2>&1 || fail "test_package: configure"
cmake --build "$b" > "$tmp/log" 2>&1 || fail "test_package: build"
"$b/test_package" > "$tmp/log" 2>&1 || fail "test_package: run"
echo "test_package: $(cat "$tmp/log")"
version=$(sed -n 's/^project(dtrain VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
grep -q "^    version = \"$version\"$" "$src/conanfile.py" || fail "conanfile.py's version is not the project's ($version)"
grep -q "version = \"$version\";" "$src/include/dtrain/version.hpp" || fail "version.hpp is not the project's version ($version)"

# Asking for a component that does not exist fails at configure time, naming it.
mkdir -p "$tmp/bad"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(bad LANGUAGES CXX)\nfind_package(dtrain CONFIG REQUIRED COMPONENTS nonesuch)\n' > "$tmp/bad/CMakeLists.txt"
cmake -S "$tmp/bad" -B "$tmp/bad/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/log" 2>&1 && fail "an unknown component was accepted"
grep -q "nonesuch" "$tmp/log" || fail "the unknown component is not named"
echo "PASS: consumer"
