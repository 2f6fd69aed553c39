#pragma once
/// \file
/// The CUDA backend's kernels, all families together: the list of every kernel (an id, its name in the
/// compiled program, its host copy), and the program NVRTC compiles (the preamble, the common source, then
/// each family's, in this order). A kernel is written, listed and launched in its family's header
/// (cuda/<family>.hpp, on kernel_source.hpp's rules); a family is added here, once.

#include <string>

#include "dtrain/backend/cuda/activations.hpp"
#include "dtrain/backend/cuda/blas.hpp"
#include "dtrain/backend/cuda/embedding.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"
#include "dtrain/backend/cuda/losses.hpp"
#include "dtrain/backend/cuda/normalization.hpp"
#include "dtrain/backend/cuda/regularization.hpp"
#include "dtrain/backend/cuda/updates.hpp"
#include "dtrain/backend/cuda/window.hpp"

namespace dtrain::cuda_kernels {

/// Every kernel, by name: X(name) for each, family by family.
#define DTRAIN_CUDA_KERNEL_LIST(X)                                                                           \
  DTRAIN_CUDA_BLAS_KERNELS(X)                                                                                \
  DTRAIN_CUDA_ACTIVATION_KERNELS(X)                                                                          \
  DTRAIN_CUDA_WINDOW_KERNELS(X)                                                                              \
  DTRAIN_CUDA_NORMALIZATION_KERNELS(X)                                                                       \
  DTRAIN_CUDA_EMBEDDING_KERNELS(X)                                                                           \
  DTRAIN_CUDA_REGULARIZATION_KERNELS(X)                                                                      \
  DTRAIN_CUDA_LOSS_KERNELS(X)                                                                                \
  DTRAIN_CUDA_UPDATE_KERNELS(X)

/// The program's source, family by family (a family's kernels may use the helpers of those before it).
inline std::string source() {
  std::string s = preamble;
  for (const char* part : {common_source, blas_source, activations_source, window_source, normalization_source,
                           embedding_source, regularization_source, losses_source, updates_source})
    s += part, s += '\n';
  return s;
}

enum class kernel : int {
#define DTRAIN_CUDA_ENUM_(k) k,
  DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_ENUM_)
#undef DTRAIN_CUDA_ENUM_
  count_
};
inline constexpr int kernel_count = static_cast<int>(kernel::count_);

inline constexpr const char* kernel_names[] = {
#define DTRAIN_CUDA_NAME_(k) #k,
    DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_NAME_)
#undef DTRAIN_CUDA_NAME_
};

/// The host copy of kernel K (its signature is every launch's argument list).
template <kernel K>
inline constexpr auto host_function = nullptr;
#define DTRAIN_CUDA_HOST_(k) \
  template <>                \
  inline constexpr auto host_function<kernel::k> = &host::k;
DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_HOST_)
#undef DTRAIN_CUDA_HOST_

/// The kernel whose host copy is F (`kernel::count_` for a function missing from the list).
template <auto F>
inline constexpr kernel id_of = kernel::count_;
#define DTRAIN_CUDA_ID_(k) \
  template <>              \
  inline constexpr kernel id_of<&host::k> = kernel::k;
DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_ID_)
#undef DTRAIN_CUDA_ID_

}  // namespace dtrain::cuda_kernels
