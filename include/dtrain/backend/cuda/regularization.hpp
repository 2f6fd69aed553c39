#pragma once
/// \file
/// The CUDA backend's regularization kernels: dropout's mask (Philox4x32-10, as core/random.hpp's
/// counter_uniform4) and the l2 and l1 penalties (tree sums, cuda/blas.hpp): source and launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/blas.hpp"  // sum_of: the tree sums this family launches
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(regularization,

// ---- dropout: the mask from Philox4x32-10, as core/random.hpp's counter_uniform4 ------------------------
DTRAIN_KERNEL void dtrain_dropout(long long n, float rate, unsigned long long key, const float* x, float* y,
                                  float* mask) {
  const float keep = 1.0f / (1.0f - rate);
  for (long long b = first_index(); b * 4 < n; b += grid_stride()) {
    unsigned int c0 = (unsigned int)b, c1 = (unsigned int)((unsigned long long)b >> 32), c2 = 0u, c3 = 0u;
    unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
    for (int round = 0; round < 10; ++round) {
      const unsigned int h0 = __umulhi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
      const unsigned int h1 = __umulhi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
      c0 = h1 ^ c1 ^ k0; c1 = l1; c2 = h0 ^ c3 ^ k1; c3 = l0;
      k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    const unsigned int words[4] = {c0, c1, c2, c3};
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) {
      const long long i = b * 4 + j;
      const float u = (float)(words[j] >> 8) * 5.9604644775390625e-8f;  // 2^-24
      mask[i] = u >= rate ? keep : 0.0f;
      y[i] = x[i] * mask[i];
    }
  }
}

// ---- l1's gradient: g += a sign(w) ------------------------------------------------------------------------
DTRAIN_KERNEL void dtrain_l1_gradient(long long n, float a, const float* w, float* g) {
  for (long long i = first_index(); i < n; i += grid_stride()) g[i] += w[i] > 0.0f ? a : (w[i] < 0.0f ? -a : 0.0f);
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_REGULARIZATION_KERNELS(X)                                                                 \
  X(dtrain_dropout) X(dtrain_l1_gradient)

namespace dtrain::cuda_detail {

template <class D>
class cuda_regularization_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  void dropout(std::size_t n, float rate, std::uint64_t key, pointer<const float> x, pointer<float> y,
               pointer<float> mask) const {
    self().template run<&kernels::dtrain_dropout>((n + 3) / 4, n, rate, key, x, y, mask);
  }
  /// penalty[0] += factor sum(w^2) (in double); g += scale 2 factor w.
  void l2(std::size_t n, float factor, float scale, pointer<const float> w, pointer<float> g,
          pointer<float> penalty) const {
    self().reduce(n, w, sum_of::squares, 1.0, factor, true, penalty);
    if (g) self().axpy(n, scale * 2.0f * factor, w, g);
  }
  /// penalty[0] += factor sum(|w|) (in double); g += scale factor sign(w).
  void l1(std::size_t n, float factor, float scale, pointer<const float> w, pointer<float> g,
          pointer<float> penalty) const {
    self().reduce(n, w, sum_of::magnitudes, 1.0, factor, true, penalty);
    if (g) self().template run<&kernels::dtrain_l1_gradient>(n, n, scale * factor, w, g);
  }
};

}  // namespace dtrain::cuda_detail
