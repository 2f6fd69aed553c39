#pragma once
/// \file
/// The two 16-bit floating-point formats of reduced-precision training (Keras' "bfloat16" and
/// "float16"): `bfloat16` (8 exponent bits, FP32's range, 8 significant bits) and `float16` (IEEE
/// binary16: 5 exponent bits, largest finite 65504, 11 significant bits), each a 2-byte value with
/// conversions to and from float.
///
/// Contract: float to 16 bits rounds to nearest, ties to even (IEEE's default; subnormal results too,
/// overflow to infinity), keeps the sign of zeros and infinities, and turns a NaN into a quiet NaN of the
/// same sign; 16 bits to float is exact. The conversions are integer and float operations without
/// branches, so that loops over spans vectorize, and give the same bits on every CPU (NaN payloads
/// aside) and under any flush-to-zero setting (the one float addition, for subnormal float16 results,
/// has a normal result).
/// They are always inlined: called out of line, a loop over a span does not vectorize.

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dtrain {

namespace detail {
/// All ones where `c`, else zero: selects without branches, which loops vectorize.
constexpr std::uint32_t all_ones_if(bool c) { return 0u - std::uint32_t(c); }
}  // namespace detail

/// bfloat16: the upper half of a float, rounded.
struct bfloat16 {
  std::uint16_t bits = 0;

  [[gnu::always_inline]] static constexpr bfloat16 from(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // ties to even; overflow carries to inf
    const std::uint32_t quiet_nan = (u >> 16) | 0x40u, nan = detail::all_ones_if((u & 0x7fffffffu) > 0x7f800000u);
    return {std::uint16_t((quiet_nan & nan) | (rounded & ~nan))};
  }
  [[gnu::always_inline]] constexpr explicit operator float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }
  friend constexpr bool operator==(bfloat16, bfloat16) = default;
};

/// IEEE binary16.
struct float16 {
  std::uint16_t bits = 0;

  [[gnu::always_inline]] static constexpr float16 from(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = u & 0x80000000u;
    u ^= sign;
    // a normal result: rebias the exponent, round the 13 dropped bits to even (a carry may reach inf)
    const std::uint32_t normal = (u + ((15u - 127u) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    // a subnormal one (|f| < 2^-14): adding 0.5 puts the result's bits at the bottom of the
    // significand, rounded by the float addition itself (to nearest even)
    const std::uint32_t tiny = detail::all_ones_if(u < (113u << 23)), half = 126u << 23;
    const std::uint32_t subnormal =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(u & tiny) + std::bit_cast<float>(half)) - half;
    const std::uint32_t finite = (subnormal & tiny) | (normal & ~tiny);
    const std::uint32_t special = 0x7c00u | (detail::all_ones_if(u > 0x7f800000u) & 0x0200u);  // inf, or a quiet NaN
    const std::uint32_t big = detail::all_ones_if(u >= (143u << 23));                          // |f| >= 65536
    return {std::uint16_t((special & big) | (finite & ~big) | (sign >> 16))};
  }
  [[gnu::always_inline]] constexpr explicit operator float() const {
    const std::uint32_t em = std::uint32_t(bits & 0x7fffu) << 13, exponent = em & (0x1fu << 23);
    // rebias the exponent; for inf and NaN once more, to FP32's all-ones exponent
    const std::uint32_t o = em + ((127u - 15u) << 23) + (detail::all_ones_if(exponent == (0x1fu << 23)) & ((128u - 16u) << 23));
    // a subnormal (or zero): the significand as a normal float, less the implicit 2^-14
    const std::uint32_t sub =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(o + (1u << 23)) - std::bit_cast<float>(113u << 23));
    const std::uint32_t small = detail::all_ones_if(exponent == 0);
    return std::bit_cast<float>((sub & small) | (o & ~small) | (std::uint32_t(bits & 0x8000u) << 16));
  }
  friend constexpr bool operator==(float16, float16) = default;
};

/// A 16-bit float type: `bfloat16` or `float16`.
template <class T>
concept half_float = std::same_as<T, bfloat16> || std::same_as<T, float16>;

/// The floating-point types a model computes in, by Keras' names ("float32", "bfloat16", "float16").
enum class dtype { float32, bfloat16, float16 };

constexpr const char* name_of(dtype d) {
  return d == dtype::bfloat16 ? "bfloat16" : d == dtype::float16 ? "float16" : "float32";
}

namespace detail {
/// float(bfloat16::from(f)) in 32-bit operations alone, which a loop vectorizes (to a dozen instructions
/// per 16 values on AVX-512; the 16-bit round trip does not).
[[gnu::always_inline]] constexpr float round_through_bfloat16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const std::uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u, nan = all_ones_if((u & 0x7fffffffu) > 0x7f800000u);
  return std::bit_cast<float>((quiet_nan & nan) | (rounded & ~nan));
}
}  // namespace detail

/// x rounded to the nearest value of type `d` (x itself for float32), as a float.
[[gnu::always_inline]] constexpr float round_as(dtype d, float x) {
  if (d == dtype::bfloat16) return float(bfloat16::from(x));
  if (d == dtype::float16) return float(float16::from(x));
  return x;
}

namespace detail {
#if defined(__GNUC__) && defined(__x86_64__)
/// F16C's conversions (x86-64 CPUs with AVX have them): IEEE's, so the same bits as float16's own,
/// NaN payloads aside (F16C keeps their top bits). Eight times fewer instructions than the portable code
/// on SSE2, which is what a build for the x86-64 baseline would vectorize it to.
inline bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

[[gnu::target("avx,f16c")]] inline void round_to_f16c(const float* in, std::size_t n, float16* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float16::from(in[i]);
}
[[gnu::target("avx,f16c")]] inline void widen_f16c(const float16* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = float(in[i]);
}

/// bfloat16's conversions in AVX2's integers: bfloat16::from's operations eight at a time, so the same
/// bits (the compiler leaves the portable loop at SSE2 in a baseline build, where packing 32-bit lanes
/// into 16 bits costs a shuffle per lane).
inline bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
[[gnu::target("avx2")]] inline void round_to_avx2(const float* in, std::size_t n, bfloat16* out) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), magnitude = _mm256_set1_epi32(0x7fffffff),
                inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x40);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in + i)), top = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(top, one))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  for (; i < n; ++i) out[i] = bfloat16::from(in[i]);
}
[[gnu::target("avx2")]] inline void widen_avx2(const bfloat16* in, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) out[i] = float(in[i]);
}
#else
constexpr bool has_f16c() { return false; }
constexpr bool has_avx2() { return false; }
inline void round_to_f16c(const float*, std::size_t, float16*) {}
inline void widen_f16c(const float16*, std::size_t, float*) {}
inline void round_to_avx2(const float*, std::size_t, bfloat16*) {}
inline void widen_avx2(const bfloat16*, std::size_t, float*) {}
#endif
}  // namespace detail

/// out[i] = T::from(in[i]) for n values (F16C or AVX2 where the CPU has them).
template <half_float T>
void round_to(const float* in, std::size_t n, T* out) {
  if constexpr (std::same_as<T, float16>) {
    if (detail::has_f16c()) return detail::round_to_f16c(in, n, out);
  } else if (detail::has_avx2()) {
    return detail::round_to_avx2(in, n, out);
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = T::from(in[i]);
}
/// out[i] = float(in[i]) for n values (F16C or AVX2 where the CPU has them).
template <half_float T>
void widen(const T* in, std::size_t n, float* out) {
  if constexpr (std::same_as<T, float16>) {
    if (detail::has_f16c()) return detail::widen_f16c(in, n, out);
  } else if (detail::has_avx2()) {
    return detail::widen_avx2(in, n, out);
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = float(in[i]);
}

/// out[i] = float(T::from(in[i])) for n values: each rounded to T's nearest value (out may be in).
template <half_float T>
void round_through(const float* in, std::size_t n, float* out) {
  T block[256];
  for (std::size_t i = 0; i < n; i += 256) {
    const std::size_t m = n - i < 256 ? n - i : 256;
    round_to(in + i, m, block);
    widen(block, m, out + i);
  }
}
template <half_float T>
void round_through(float* x, std::size_t n) {
  round_through<T>(x, n, x);
}

}  // namespace dtrain
