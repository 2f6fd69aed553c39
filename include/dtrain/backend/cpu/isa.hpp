#pragma once
/// \file
/// The instruction sets the cpu backend has kernels for, and each one's vector operations. Users build
/// dtrain without -march=native, so the wide kernels are compiled under a target attribute and chosen at
/// run time (`best_cpu_isa()`; `DTRAIN_CPU_ISA` picks a lower one). A kernel body is written once in a file that a header includes once per
/// set, with `DTRAIN_ISA` naming the set's namespace here and `DTRAIN_ISA_TARGET` its attribute
/// (cpu/direct_gemm_isa.hpp, cpu/updates_isa.hpp). Every namespace has `vec`, `lanes`, `load`, `store`,
/// `sqrt` (correctly rounded), `max` (`a < b ? b : a`) and `exact`; the AVX ones also the GEMM's
/// `zero`, `broadcast`, `add`, `fma`, `load_part`, `store_part` and `transpose`.
///
/// `exact(a * b)` keeps a product rounded on its own: compilers contract `a * b + c` into one FMA where
/// the target has FMA (GCC does by default in C++), which the baseline cannot, and an element must come
/// out with the same bits whichever set computed it (workers on different CPUs hold identical weights).

#include <cstddef>
#include <cstdlib>
#include <string>

#include "dtrain/core/environment.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DTRAIN_CPU_AVX 1
#else
#define DTRAIN_CPU_AVX 0
#endif

#define DTRAIN_ISA_OP __attribute__((always_inline)) inline

namespace dtrain::detail {

/// The instruction sets with kernels of their own: `baseline` is what every build of dtrain runs
/// (core/simd.hpp's four-float vectors; no direct GEMM).
enum class cpu_isa { baseline, avx2, avx512 };

/// The best set this CPU has (asked once): AVX-512F, else AVX2 with FMA, else the baseline.
inline cpu_isa detected_cpu_isa() {
#if DTRAIN_CPU_AVX
  static const cpu_isa isa = __builtin_cpu_supports("avx512f")                                   ? cpu_isa::avx512
                             : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? cpu_isa::avx2
                                                                                                : cpu_isa::baseline;
  return isa;
#else
  return cpu_isa::baseline;
#endif
}

inline const char* name_of(cpu_isa isa) {
  return isa == cpu_isa::avx512 ? "avx512" : isa == cpu_isa::avx2 ? "avx2" : "baseline";
}

/// The set `DTRAIN_CPU_ISA` (baseline, avx2, avx512) names; unset or empty: the detected one. A set above
/// the CPU's, or another word, is a `config_error`. For comparing kernels, and for testing every set's
/// kernels on one machine.
inline cpu_isa cpu_isa_from_env(const char* value, cpu_isa detected) {
  if (!value || !*value) return detected;
  const std::string v(value);
  for (cpu_isa isa : {cpu_isa::baseline, cpu_isa::avx2, cpu_isa::avx512})
    if (v == name_of(isa)) {
      if (int(isa) > int(detected))
        throw config_error("DTRAIN_CPU_ISA=" + v + ": this CPU has only " + name_of(detected));
      return isa;
    }
  throw config_error("DTRAIN_CPU_ISA=\"" + v + "\": expected baseline, avx2 or avx512");
}

/// The set the cpu backend's kernels run (asked once): the detected one, or `DTRAIN_CPU_ISA`'s.
inline cpu_isa best_cpu_isa() {
  static const cpu_isa isa = cpu_isa_from_env(environment::get(environment::cpu_isa).c_str(), detected_cpu_isa());
  return isa;
}

namespace baseline {
using vec = simd::f32x4;
inline constexpr int lanes = simd::enabled ? 4 : 1;
DTRAIN_ISA_OP vec load(const float* p) { return simd::load<vec>(p); }
DTRAIN_ISA_OP void store(float* p, vec v) { simd::store(p, v); }
DTRAIN_ISA_OP vec sqrt(vec a) { return simd::sqrt(a); }
DTRAIN_ISA_OP vec max(vec a, vec b) { return simd::max(a, b); }
template <class V>
DTRAIN_ISA_OP V exact(V x) {
#if defined(DTRAIN_SIMD_SSE2)
  asm("" : "+x"(x));
#elif defined(DTRAIN_SIMD_NEON)
  asm("" : "+w"(x));
#endif
  return x;
}
}  // namespace baseline

}  // namespace dtrain::detail

#if DTRAIN_CPU_AVX
#define DTRAIN_AVX512 __attribute__((target("avx512f")))
#define DTRAIN_AVX2 __attribute__((target("avx2,fma")))

namespace dtrain::detail::avx512 {
using vec = __m512;
inline constexpr int lanes = 16;
DTRAIN_AVX512 DTRAIN_ISA_OP vec zero() { return _mm512_setzero_ps(); }
DTRAIN_AVX512 DTRAIN_ISA_OP vec load(const float* p) { return _mm512_loadu_ps(p); }
DTRAIN_AVX512 DTRAIN_ISA_OP void store(float* p, vec v) { _mm512_storeu_ps(p, v); }
DTRAIN_AVX512 DTRAIN_ISA_OP __mmask16 first(std::size_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}
/// The first `n` lanes from p (none read beyond), the rest zero.
DTRAIN_AVX512 DTRAIN_ISA_OP vec load_part(const float* p, std::size_t n) {
  return _mm512_maskz_loadu_ps(first(n), p);
}
DTRAIN_AVX512 DTRAIN_ISA_OP void store_part(float* p, vec v, std::size_t n) {
  _mm512_mask_storeu_ps(p, first(n), v);
}
DTRAIN_AVX512 DTRAIN_ISA_OP vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
DTRAIN_AVX512 DTRAIN_ISA_OP vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
DTRAIN_AVX512 DTRAIN_ISA_OP vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
/// (The zero-masking forms with every lane selected: see `transpose` below.)
DTRAIN_AVX512 DTRAIN_ISA_OP vec sqrt(vec a) { return _mm512_maskz_sqrt_ps(0xffff, a); }
/// `a < b ? b : a` (maxps returns its second operand where either is NaN).
DTRAIN_AVX512 DTRAIN_ISA_OP vec max(vec a, vec b) { return _mm512_maskz_max_ps(0xffff, b, a); }
template <class V>
DTRAIN_AVX512 DTRAIN_ISA_OP V exact(V x) {
  asm("" : "+v"(x));
  return x;
}
/// 16 x 16 in place: 4 x 4 blocks within each 128-bit lane (unpack, shuffle), then the lanes. (The
/// zero-masking forms with every lane selected are the plain instructions; GCC 12's plain intrinsics
/// start from `_mm512_undefined_ps()`, which -Wmaybe-uninitialized reports.)
DTRAIN_AVX512 DTRAIN_ISA_OP void transpose(vec (&r)[16]) {
  constexpr __mmask16 all = 0xffff;
  vec t[16], u[16];
  for (int i = 0; i < 16; i += 2)
    t[i] = _mm512_maskz_unpacklo_ps(all, r[i], r[i + 1]), t[i + 1] = _mm512_maskz_unpackhi_ps(all, r[i], r[i + 1]);
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_shuffle_ps(all, t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_maskz_shuffle_ps(all, t[i], t[i + 2], 0xee);
    u[i + 2] = _mm512_maskz_shuffle_ps(all, t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_maskz_shuffle_ps(all, t[i + 1], t[i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {  // u[4g + j], lane l: column 4l + j of rows 4g..4g+3
    const vec w0 = _mm512_maskz_shuffle_f32x4(all, u[j], u[4 + j], 0x88);
    const vec w1 = _mm512_maskz_shuffle_f32x4(all, u[j], u[4 + j], 0xdd);
    const vec w2 = _mm512_maskz_shuffle_f32x4(all, u[8 + j], u[12 + j], 0x88);
    const vec w3 = _mm512_maskz_shuffle_f32x4(all, u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_maskz_shuffle_f32x4(all, w0, w2, 0x88), r[8 + j] = _mm512_maskz_shuffle_f32x4(all, w0, w2, 0xdd);
    r[4 + j] = _mm512_maskz_shuffle_f32x4(all, w1, w3, 0x88), r[12 + j] = _mm512_maskz_shuffle_f32x4(all, w1, w3, 0xdd);
  }
}
}  // namespace dtrain::detail::avx512

namespace dtrain::detail::avx2 {
using vec = __m256;
inline constexpr int lanes = 8;
DTRAIN_AVX2 DTRAIN_ISA_OP vec zero() { return _mm256_setzero_ps(); }
DTRAIN_AVX2 DTRAIN_ISA_OP vec load(const float* p) { return _mm256_loadu_ps(p); }
DTRAIN_AVX2 DTRAIN_ISA_OP void store(float* p, vec v) { _mm256_storeu_ps(p, v); }
DTRAIN_AVX2 DTRAIN_ISA_OP __m256i first(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<std::size_t>(n, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
DTRAIN_AVX2 DTRAIN_ISA_OP vec load_part(const float* p, std::size_t n) {
  return _mm256_maskload_ps(p, first(n));
}
DTRAIN_AVX2 DTRAIN_ISA_OP void store_part(float* p, vec v, std::size_t n) {
  _mm256_maskstore_ps(p, first(n), v);
}
DTRAIN_AVX2 DTRAIN_ISA_OP vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
DTRAIN_AVX2 DTRAIN_ISA_OP vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
DTRAIN_AVX2 DTRAIN_ISA_OP vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
DTRAIN_AVX2 DTRAIN_ISA_OP vec sqrt(vec a) { return _mm256_sqrt_ps(a); }
DTRAIN_AVX2 DTRAIN_ISA_OP vec max(vec a, vec b) { return _mm256_max_ps(b, a); }
template <class V>
DTRAIN_AVX2 DTRAIN_ISA_OP V exact(V x) {
  asm("" : "+x"(x));
  return x;
}
/// 8 x 8 in place: 4 x 4 blocks within each 128-bit lane, then the two lanes.
DTRAIN_AVX2 DTRAIN_ISA_OP void transpose(vec (&r)[8]) {
  vec t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j)
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20), r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
}
}  // namespace dtrain::detail::avx2
#endif
