#pragma once
/// \file
/// How the CUDA backend's kernels are written: once, and used twice. Each family's header
/// (cuda/<family>.hpp) holds its kernels as the argument of `DTRAIN_CUDA_SOURCE(family, ...)`, which turns
/// it into (1) `cuda_kernels::family_source`, CUDA C++ text that NVRTC compiles at run time (after the
/// preamble and the common source below, every family in one program), and (2) the same functions
/// compiled for the host in `cuda_kernels::host`, which the emulated runtime (cuda/emulator.hpp) runs
/// thread by thread and from whose signatures every launch takes its argument types. So a kernel's
/// indexing is tested on any machine, and a launch can never pass an argument of the wrong type or in the
/// wrong place. A kernel is `DTRAIN_KERNEL` (`extern "C" __global__` on the device), a helper
/// `DTRAIN_DEVICE`.
///
/// Rules the source keeps so that a sequential emulation is exact: no shared memory, no
/// `__syncthreads`, no atomics, no warp intrinsics: each thread writes its own outputs. Reductions run
/// as trees of fixed shape (each level's threads add a few dozen values of the level below in a fixed
/// order into scratch), so every result is deterministic: the same bits on every run and graph replay.
/// Sizes are `long long`; a 2-D window is the `window` struct (the host's `window_geometry` as ints).

#include <bit>
#include <cmath>
#include <cstdint>

namespace dtrain::cuda_kernels {

/// What NVRTC sees before the kernels: the macros the host copy defines its own way.
inline constexpr const char* preamble =
    "#define DTRAIN_KERNEL extern \"C\" __global__\n"
    "#define DTRAIN_DEVICE __device__ __forceinline__\n";

/// The thread indices of the emulation (the emulated runtime sets them before each thread runs).
struct dim3_ {
  unsigned int x = 0, y = 0, z = 0;
};
namespace host {
inline thread_local dim3_ threadIdx, blockIdx, blockDim, gridDim;
}  // namespace host

/// What the kernels' host copies see of CUDA: the thread indices and the intrinsics they use.
namespace host {
/// `__umulhi`: the high 32 bits of a 32 x 32 bit product.
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}
/// `__float_as_uint`, `__uint_as_float`: a float's bits and back.
inline unsigned int __float_as_uint(float f) { return std::bit_cast<unsigned int>(f); }
inline float __uint_as_float(unsigned int u) { return std::bit_cast<float>(u); }
}  // namespace host

}  // namespace dtrain::cuda_kernels

#define DTRAIN_CUDA_SOURCE(family, ...)                                                  \
  namespace dtrain::cuda_kernels {                                                       \
  inline constexpr const char* family##_source = #__VA_ARGS__;                           \
  namespace host {                                                                       \
  __VA_ARGS__                                                                            \
  }                                                                                      \
  }

#define DTRAIN_KERNEL inline
#define DTRAIN_DEVICE inline

// The helpers every family uses.
// clang-format off
DTRAIN_CUDA_SOURCE(common,

struct window { int h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, f, dh, dw, groups; };

DTRAIN_DEVICE long long first_index() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
DTRAIN_DEVICE long long grid_stride() { return (long long)gridDim.x * blockDim.x; }
// a / b and a % b for non-negative a, b: in 32 bits where both fit (a 64-bit division is a long
// instruction sequence on a GPU; index arithmetic is most of a gather's work).
DTRAIN_DEVICE long long quot(long long a, long long b) {
  return (a | b) < 2147483648LL ? (long long)((unsigned int)a / (unsigned int)b) : a / b;
}
DTRAIN_DEVICE long long rem(long long a, long long b) {
  return (a | b) < 2147483648LL ? (long long)((unsigned int)a % (unsigned int)b) : a % b;
}


)
// clang-format on

namespace dtrain::cuda_kernels {
using window = host::window;
}  // namespace dtrain::cuda_kernels

namespace dtrain::cuda_detail {
/// The kernels' host copies, whose addresses name them in a launch (`run<&kernels::dtrain_fill>`).
namespace kernels = ::dtrain::cuda_kernels::host;
}  // namespace dtrain::cuda_detail
