#pragma once
/// \file
/// Four-float vectors for the element-wise loops the compiler leaves scalar. Under the default
/// `-fmath-errno`, `std::sqrt` may set `errno`, so GCC and Clang keep every loop that calls it scalar
/// (and GCC 12 ignores `optimize("no-math-errno")` on a function). The optimizers' updates are such
/// loops; written once as a generic body, they run on `f32x4` (SSE2 on x86-64, NEON on AArch64) and
/// finish the tail on plain floats. Every operation is IEEE (correctly rounded `sqrt` and division), so a
/// vector lane computes what the scalar loop computes.
///
/// `for_each_lane(begin, end, body)` calls `body.template operator()<V>(i)` with `V = f32x4` for the blocks
/// of four and `V = float` for the rest; the body uses `load<V>`, `store`, arithmetic (a float operand is
/// broadcast), `sqrt` and `max` from this namespace.

#include <algorithm>
#include <cmath>
#include <cstddef>
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

/// Runs `body<f32x4>(i)` on blocks of four from `begin`, then `body<float>(i)` on what is left before `end`.
template <class F>
inline void for_each_lane(std::size_t begin, std::size_t end, F&& body) {
  std::size_t i = begin;
  if constexpr (enabled)
    for (; i + 4 <= end; i += 4) body.template operator()<f32x4>(i);
  for (; i < end; ++i) body.template operator()<float>(i);
}

}  // namespace dtrain::detail::simd
