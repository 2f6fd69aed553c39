#!/bin/bash
# Installs dtrain into a temporary prefix with docs/packaging.md's commands, then configures, builds and
# runs the tiny project in tests/consumer against it with find_package, and against the sources with
# add_subdirectory and FetchContent.
# usage: consumer.sh <dtrain source dir>
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/log" ] && tail -40 "$tmp/log"; exit 1; }
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# docs/packaging.md's commands, as written: configure without tests, examples and benchmarks, install
# without a build step (headers and package), then build the launcher and install again (with it)
cmake -S "$src" -B "$tmp/dtrain-build" -G Ninja -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_BUILD_EXAMPLES=OFF \
  -DDTRAIN_BUILD_BENCHMARKS=OFF "${launcher[@]}" > "$tmp/log" 2>&1 || fail "configure dtrain as docs/packaging.md does"
cmake --install "$tmp/dtrain-build" --prefix "$tmp/prefix" > "$tmp/log" 2>&1 || fail "cmake --install without a build step"
[ -f "$tmp/prefix/share/cmake/dtrain/dtrainConfig.cmake" ] || fail "no dtrainConfig.cmake installed"
[ -f "$tmp/prefix/include/dtrain/dtrain.hpp" ] || fail "headers not installed"
[ -e "$tmp/prefix/bin/dtrain-launch" ] && fail "dtrain-launch installed although it was not built"
cmake --build "$tmp/dtrain-build" --target dtrain-launch > "$tmp/log" 2>&1 || fail "build dtrain-launch"
cmake --install "$tmp/dtrain-build" --prefix "$tmp/prefix" > "$tmp/log" 2>&1 || fail "cmake --install after the build"
[ -x "$tmp/prefix/bin/dtrain-launch" ] || fail "dtrain-launch not installed after it was built"

# The apps are built unoptimised (build type None: no flags): this checks packaging, not speed, and -O3
# would double the test's time.
for mode in find_package add_subdirectory FetchContent; do
  b="$tmp/$mode"
  cmake -S "$src/tests/consumer" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=None "${launcher[@]}" \
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
cmake -S "$src/test_package" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=None "${launcher[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
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
# COMPONENTS mpi: found with its target where an MPI is installed (dtrain was configured with one)
if command -v mpicxx > /dev/null; then
  mkdir -p "$tmp/mpi"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(m LANGUAGES CXX)\nfind_package(dtrain CONFIG REQUIRED COMPONENTS mpi)\nif(NOT TARGET dtrain::mpi)\n  message(FATAL_ERROR "no dtrain::mpi")\nendif()\n' > "$tmp/mpi/CMakeLists.txt"
  cmake -S "$tmp/mpi" -B "$tmp/mpi/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/log" 2>&1 || fail "find_package(dtrain COMPONENTS mpi)"
  echo "find_package(dtrain COMPONENTS mpi): dtrain::mpi"
fi
# component_program <component> <header> <what main prints (printf arguments)>: a program on
# dtrain::<component> builds against the installed package with the C++ compiler alone and runs
component_program() {
  local c=$1 d="$tmp/$1"
  mkdir -p "$d"
  printf '#include <cstdio>\n#include <%s>\nint main() { std::printf(%s); }\n' "$2" "$3" > "$d/main.cpp"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(p LANGUAGES CXX)\nfind_package(dtrain CONFIG REQUIRED COMPONENTS %s)\nadd_executable(p main.cpp)\ntarget_link_libraries(p PRIVATE dtrain::%s)\n' "$c" "$c" > "$d/CMakeLists.txt"
  cmake -S "$d" -B "$d/b" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" "${launcher[@]}" > "$tmp/log" 2>&1 ||
    fail "find_package(dtrain COMPONENTS $c)"
  cmake --build "$d/b" > "$tmp/log" 2>&1 || fail "build a program on dtrain::$c"
  "$d/b/p" > "$tmp/log" 2>&1 || fail "run a program on dtrain::$c"
  echo "find_package(dtrain COMPONENTS $c): $(cat "$tmp/log")"
}
# COMPONENTS blas: a BLAS, and DTRAIN_BLAS defined (the program on dtrain::blas sees has_blas)
component_program blas dtrain/backend/cpu/blas.hpp '"dtrain::detail::has_blas: %d\n", int(dtrain::detail::has_blas)'
grep -q "has_blas: 1" "$tmp/log" || fail "dtrain::blas does not define DTRAIN_BLAS"
# COMPONENTS keras: where dtrain was installed with it, HDF5 found and linked
if grep -q "dtrain::keras" "$tmp/prefix/share/cmake/dtrain/dtrainTargets.cmake" 2> /dev/null; then
  component_program keras dtrain/checkpoint/keras_file.hpp '"HDF5 open: %d\n", int(H5open() >= 0)'
fi
# COMPONENTS onnx: where dtrain was installed with it, ONNX's protobuf classes found and linked
if grep -q "dtrain::onnx" "$tmp/prefix/share/cmake/dtrain/dtrainTargets.cmake" 2> /dev/null; then
  component_program onnx dtrain/checkpoint/onnx_export.hpp '"onnx opset domain: \"%s\"\n", onnx::OperatorSetIdProto().domain().c_str()'
fi
# COMPONENTS cuda: where the CUDA Toolkit is, the cuda backend (no nvcc; 0 devices is an answer, not an
# error); COMPONENTS nccl: where NCCL is too, comm::nccl
if [ -f /usr/local/cuda/include/nvrtc.h ]; then
  component_program cuda dtrain/backend/cuda.hpp '"cuda devices: %d\n", dtrain::cuda_device_count()'
fi
if [ -f /usr/local/cuda/include/nccl.h ]; then
  component_program nccl dtrain/distribute/comm/nccl.hpp '"%s, cuda devices: %d\n", dtrain::comm::nccl_library::name, dtrain::cuda_device_count()'
fi
echo "PASS: consumer"
