#pragma once
/// \file
/// The CUDA backend's embedding kernels (rows of a table by index; the table's gradient by index in a
/// host-sorted order, a gather: no atomics): source and launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(embedding,

// ---- embedding: rows of a table by index; the table's gradient by index in a host-sorted order ------------
DTRAIN_KERNEL void dtrain_embedding_forward(long long rows, long long dim, long long vocab, const float* x,
                                            const float* table, float* y) {
  for (long long e = first_index(); e < rows * dim; e += grid_stride()) {
    const long long r = quot(e, dim), d = e - r * dim;
    const float v = x[r];
    y[e] = v >= 0.0f && v < (float)vocab ? table[(long long)v * dim + d] : 0.0f;
  }
}
DTRAIN_KERNEL void dtrain_embedding_backward(long long vocab, long long dim, const unsigned int* order,
                                             const unsigned int* starts, const float* dy, float* grad) {
  for (long long e = first_index(); e < vocab * dim; e += grid_stride()) {
    const long long v = quot(e, dim), d = e - v * dim;
    float s = 0.0f;
    for (unsigned int k = starts[v]; k < starts[v + 1]; ++k) s += dy[(long long)order[k] * dim + d];
    grad[e] = s;
  }
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_EMBEDDING_KERNELS(X)                                                                      \
  X(dtrain_embedding_forward) X(dtrain_embedding_backward)

namespace dtrain::cuda_detail {

template <class D>
class cuda_embedding_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, pointer<const float> x,
                         pointer<const float> table, pointer<float> y) const {
    self().template run<&kernels::dtrain_embedding_forward>(rows * dim, rows, dim, vocab, x, table, y);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, pointer<const std::uint32_t> order,
                          pointer<const std::uint32_t> starts, pointer<const float> dy, pointer<float> grad) const {
    self().template run<&kernels::dtrain_embedding_backward>(vocab * dim, vocab, dim, order, starts, dy, grad);
  }
};

}  // namespace dtrain::cuda_detail
