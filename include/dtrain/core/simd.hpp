#pragma once
/// \file
/// Four-float vectors for the element-wise loops the compiler leaves scalar. Under the default
/// `-fmath-errno`, `std::sqrt` may set `errno`, so GCC and Clang keep every loop that calls it scalar
/// (and GCC 12 ignores `optimize("no-math-errno")` on a function). The optimizers' updates are such
/// loops: `f32x4` (SSE2 on x86-64, NEON on AArch64; arithmetic with a float operand broadcasts it) is
/// the cpu backend's baseline vector, wider ones are chosen at run time (backend/cpu/isa.hpp). Every
/// operation is IEEE (correctly rounded `sqrt` and division), so a vector lane computes what the scalar
/// loop computes.

#include <cmath>
#include <cstring>

#if defined(__GNUC__) && defined(__SSE2__)
#include <emmintrin.h>
#define DTRAIN_SIMD_SSE2 1
#elif defined(__GNUC__) && defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define DTRAIN_SIMD_NEON 1
#endif

namespace dtrain::detail::simd {

inline float sqrt(float x) { return std::sqrt(x); }
/// `std::max(a, b)`: `a` unless `a < b` (NaN compares false, as there).
inline float max(float a, float b) { return a < b ? b : a; }

template <class V>
inline V load(const float* p) {
  return *p;
}
inline void store(float* p, float v) { *p = v; }

#if defined(DTRAIN_SIMD_SSE2) || defined(DTRAIN_SIMD_NEON)
inline constexpr bool enabled = true;

/// Four floats (GCC / Clang vector extension: + - * / and comparisons work lane by lane).
typedef float f32x4 __attribute__((vector_size(16)));

template <>
inline f32x4 load<f32x4>(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }
inline f32x4 sqrt(f32x4 x) {
#if defined(DTRAIN_SIMD_SSE2)
  return _mm_sqrt_ps(x);
#else
  return vsqrtq_f32(x);
#endif
}
inline f32x4 max(f32x4 a, f32x4 b) { return a < b ? b : a; }
#else
inline constexpr bool enabled = false;
using f32x4 = float;
#endif

/// While alive, this thread's float operations treat subnormal inputs and results as zero (x86's MXCSR
/// DAZ and FTZ, AArch64's FPCR FZ; elsewhere nothing changes), as TensorFlow does on every thread that
/// runs its kernels (`ScopedFlushDenormal`). Where a gradient stays zero (the weights of a pixel that is
/// black in every image), an optimizer's moments decay geometrically into the subnormal range after
/// ~800 steps, and every operation on them then takes a microcode assist: Adam's update ran 2.5x slower.
class flush_denormals {
 public:
#if defined(DTRAIN_SIMD_SSE2)
  flush_denormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | flush_to_zero | denormals_are_zero); }
  ~flush_denormals() { _mm_setcsr(saved_); }
#elif defined(DTRAIN_SIMD_NEON)
  flush_denormals() {
    asm volatile("mrs %0, fpcr" : "=r"(saved_));
    asm volatile("msr fpcr, %0" : : "r"(saved_ | flush_to_zero));
  }
  ~flush_denormals() { asm volatile("msr fpcr, %0" : : "r"(saved_)); }
#else
  flush_denormals() {}
#endif
  flush_denormals(const flush_denormals&) = delete;
  flush_denormals& operator=(const flush_denormals&) = delete;

 private:
#if defined(DTRAIN_SIMD_SSE2)
  static constexpr unsigned flush_to_zero = 1u << 15, denormals_are_zero = 1u << 6;
  unsigned saved_;
#elif defined(DTRAIN_SIMD_NEON)
  static constexpr unsigned long long flush_to_zero = 1ull << 24;
  unsigned long long saved_;
#endif
};

}  // namespace dtrain::detail::simd
