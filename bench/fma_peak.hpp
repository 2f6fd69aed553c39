#pragma once
// The benchmarks' FMA peak: what "% of peak" is measured against.
#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/// One core's FP32 FMA peak, measured: 12 independent chains of vector FMAs (enough to cover the FMA
/// latency on both pipes), the fastest of three 0.1 s runs. Measured rather than taken from a table: a
/// core that splits a 512-bit FMA in two halves (AMD Zen 4) has no more AVX-512 peak than AVX2 peak.
#if defined(__x86_64__)
/// `n` rounds of one FMA on each of 12 independent register chains; returns the FLOPs done.
inline __attribute__((target("avx512f"))) double fma_chains_avx512(long n) {
  __m512 a[12];
  for (auto& v : a) v = _mm512_set1_ps(1.0f);
  const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (auto& v : a) {
      v = _mm512_fmadd_ps(v, b, c);
      asm("" : "+v"(v));  // keeps every chain in a register
    }
  for (auto& v : a) asm volatile("" ::"v"(v));  // the results are used: the loop stays
  return double(n) * 12 * 16 * 2;
}
inline __attribute__((target("avx2,fma"))) double fma_chains_avx2(long n) {
  __m256 a[12];
  for (auto& v : a) v = _mm256_set1_ps(1.0f);
  const __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (auto& v : a) {
      v = _mm256_fmadd_ps(v, b, c);
      asm("" : "+v"(v));
    }
  for (auto& v : a) asm volatile("" ::"v"(v));
  return double(n) * 12 * 8 * 2;
}
inline double fma_gflops(double (*chains)(long)) {
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flop = chains(2'000'000);
    best = std::max(best, flop / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
  }
  return best;
}
inline double fma_peak_gflops() {
  if (__builtin_cpu_supports("avx512f")) return std::max(fma_gflops(fma_chains_avx512), fma_gflops(fma_chains_avx2));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_gflops(fma_chains_avx2);
  return 0;
}
#else
inline double fma_peak_gflops() { return 0; }
#endif
