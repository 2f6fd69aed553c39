#pragma once
/// \file
/// The CUDA backend's optimizer steps, one fused pass over parameters, gradients and slots (the slot
/// layout of each `op::`): source and launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(updates,

// ---- optimizer steps: one fused pass over parameters, gradients and slots --------------------------------
DTRAIN_KERNEL void dtrain_sgd(long long n, float lr, float mu, int nesterov, const float* g, float* m, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    if (mu == 0.0f) {
      p[i] -= lr * g[i];
    } else {
      const float mi = m[i] = mu * m[i] - lr * g[i];
      p[i] += nesterov ? mu * mi - lr * g[i] : mi;
    }
  }
}
DTRAIN_KERNEL void dtrain_adam(long long n, float alpha, float b1, float b2, float eps, float decay, int amsgrad,
                               const float* g, float* m, float* v, float* vh, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    float mi = m[i], vi = v[i], pi = p[i];
    if (decay != 1.0f) pi = pi * decay;
    mi += (gi - mi) * b1;
    vi += (gi * gi - vi) * b2;
    m[i] = mi;
    v[i] = vi;
    if (amsgrad) {
      vi = vh[i] > vi ? vh[i] : vi;
      vh[i] = vi;
    }
    p[i] = pi - alpha * mi / (sqrtf(vi) + eps);
  }
}
DTRAIN_KERNEL void dtrain_rmsprop(long long n, float lr, float rho, float mu, float eps, int centered,
                                  const float* g, float* vel, float* mom, float* avg, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float vi = vel[i] = rho * vel[i] + (1.0f - rho) * gi * gi;
    float denom = vi;
    if (centered) {
      const float ai = avg[i] = rho * avg[i] + (1.0f - rho) * gi;
      denom -= ai * ai;
    }
    const float inc = lr * gi / sqrtf(denom + eps);
    if (mu > 0.0f) p[i] -= (mom[i] = mu * mom[i] + inc);
    else p[i] -= inc;
  }
}
DTRAIN_KERNEL void dtrain_adagrad(long long n, float lr, float initial, float eps, const float* g, float* a, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float ai = a[i] = a[i] + gi * gi;
    p[i] -= gi * lr / sqrtf(ai + initial + eps);
  }
}
DTRAIN_KERNEL void dtrain_adamax(long long n, float alpha, float b1, float b2, float eps, const float* g, float* m,
                                 float* u, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = m[i] = m[i] + (gi - m[i]) * b1;
    const float decayed = u[i] * b2, a = fabsf(gi);
    const float ui = u[i] = decayed > a ? decayed : a;
    p[i] -= mi * alpha / (ui + eps);
  }
}
DTRAIN_KERNEL void dtrain_nadam(long long n, float lr, float b1, float b2, float eps, float mf, float gf, float vf,
                                const float* g, float* m, float* v, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = m[i] = m[i] + (gi - m[i]) * b1;
    const float vi = v[i] = v[i] + (gi * gi - v[i]) * b2;
    p[i] -= (mi * mf + gi * gf) * lr / (sqrtf(vi * vf) + eps);
  }
}
DTRAIN_KERNEL void dtrain_ema(long long n, float momentum, int overwrite, const float* g, float* a, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float ai = a[i] = a[i] * momentum + g[i] * (1.0f - momentum);
    if (overwrite) p[i] = ai;
  }
}
DTRAIN_KERNEL void dtrain_lion(long long n, float lr, float b1, float b2, const float* g, float* m, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float c = m[i] * b1 + g[i] * (1.0f - b1);
    p[i] -= c > 0.0f ? lr : (c < 0.0f ? -lr : 0.0f);
    m[i] = m[i] * b2 + g[i] * (1.0f - b2);
  }
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_UPDATE_KERNELS(X)                                                                         \
  X(dtrain_sgd) X(dtrain_adam) X(dtrain_rmsprop) X(dtrain_adagrad) X(dtrain_adamax) X(dtrain_nadam) X(dtrain_lion) X(dtrain_ema)

namespace dtrain::cuda_detail {

template <class D>
class cuda_update_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  void update(const op::sgd& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_sgd>(n, n, o.learning_rate, o.momentum, o.nesterov ? 1 : 0, g,
                                               o.momentum > 0 ? s : nullptr, p);
  }
  void update(const op::adam& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_adam>(n, n, o.alpha, o.one_minus_beta_1, o.one_minus_beta_2, o.epsilon,
                                                o.decay, o.amsgrad ? 1 : 0, g, s, s + n,
                                                o.amsgrad ? s + 2 * n : nullptr, p);
  }
  void update(const op::rmsprop& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    const bool momentum = o.momentum > 0.0f;
    self().template run<&kernels::dtrain_rmsprop>(n, n, o.learning_rate, o.rho, o.momentum, o.epsilon,
                                                   o.centered ? 1 : 0, g, s, momentum ? s + n : nullptr,
                                                   o.centered ? s + n * (momentum ? 2 : 1) : nullptr, p);
  }
  void update(const op::adagrad& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_adagrad>(n, n, o.learning_rate, o.initial_accumulator_value, o.epsilon, g, s, p);
  }
  void update(const op::adamax& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_adamax>(n, n, o.alpha, o.one_minus_beta_1, o.beta_2, o.epsilon, g, s, s + n, p);
  }
  void update(const op::nadam& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_nadam>(n, n, o.learning_rate, o.one_minus_beta_1, o.one_minus_beta_2, o.epsilon,
                                                 o.m_factor, o.g_factor, o.v_factor, g, s, s + n, p);
  }
  void update(const op::ema& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_ema>(n, n, o.momentum, o.overwrite ? 1 : 0, g, s, p);
  }
  void update(const op::lion& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    self().template run<&kernels::dtrain_lion>(n, n, o.learning_rate, o.beta_1, o.beta_2, g, s, p);
  }
};

}  // namespace dtrain::cuda_detail
