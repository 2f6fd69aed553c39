#pragma once
/// \file
/// Keras `optimizers.Adam` and `optimizers.AdamW`. Keras' form of the update:
/// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
/// p -= alpha * m / (sqrt(v) + epsilon). AdamW first decays p by lr * weight_decay * p.

#include <algorithm>
#include <cmath>

#include "dtrain/core/simd.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct adam_options {
  learning_rate_schedule learning_rate = 0.001f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
};

struct adamw_options {
  learning_rate_schedule learning_rate = 0.001f;
  float weight_decay = 0.004f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
};

namespace detail {
template <class O>
void check_adam(const char* name, const O& o) {
  if (!(o.beta_1 >= 0.0f && o.beta_1 < 1.0f) || !(o.beta_2 >= 0.0f && o.beta_2 < 1.0f) || !(o.epsilon >= 0.0f))
    throw value_error(std::string(name) + ": beta_1 and beta_2 must be in [0, 1) and epsilon non-negative");
}
/// The Adam step shared by adam and adamw (which first decays p by `decay`, in the same pass); slots are
/// m, v (and v_hat with amsgrad), block by block. Vectorized (core/simd.hpp) and split over the thread
/// budget; every element is computed exactly as the scalar formula says.
template <bool Decay, bool Amsgrad>
void adam_kernel(float* p, const float* g, float* m, float* v, float* vh, std::size_t n, float decay, float alpha,
                 float b1, float b2, float eps) {
  parallel_for(n, update_grain, [=](std::size_t begin, std::size_t end) {
    simd::for_each_lane(begin, end, [=]<class V>(std::size_t i) {
      const V gi = simd::load<V>(g + i);
      V mi = simd::load<V>(m + i), vi = simd::load<V>(v + i), pi = simd::load<V>(p + i);
      if constexpr (Decay) pi = pi * decay;
      mi += (gi - mi) * b1;
      vi += (gi * gi - vi) * b2;
      simd::store(m + i, mi);
      simd::store(v + i, vi);
      if constexpr (Amsgrad) {
        vi = simd::max(simd::load<V>(vh + i), vi);
        simd::store(vh + i, vi);
      }
      simd::store(p + i, pi - alpha * mi / (simd::sqrt(vi) + eps));
    });
  });
}

template <class O>
void adam_step(const O& o, std::span<float> p, std::span<const float> g, std::span<float> s, float lr,
               std::int64_t t, float decay = 1.0f) {
  const std::size_t n = p.size();
  const double tt = static_cast<double>(t);
  const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double(o.beta_2), tt)) /
                                         (1.0 - std::pow(double(o.beta_1), tt)));
  const float b1 = 1.0f - o.beta_1, b2 = 1.0f - o.beta_2, eps = o.epsilon;
  float* m = s.data();
  float* v = m + n;
  float* vh = o.amsgrad ? v + n : nullptr;
  const bool dec = decay != 1.0f;
  if (dec && vh)
    adam_kernel<true, true>(p.data(), g.data(), m, v, vh, n, decay, alpha, b1, b2, eps);
  else if (dec)
    adam_kernel<true, false>(p.data(), g.data(), m, v, vh, n, decay, alpha, b1, b2, eps);
  else if (vh)
    adam_kernel<false, true>(p.data(), g.data(), m, v, vh, n, decay, alpha, b1, b2, eps);
  else
    adam_kernel<false, false>(p.data(), g.data(), m, v, vh, n, decay, alpha, b1, b2, eps);
}
}  // namespace detail

class adam : public basic_optimizer<adam, adam_options> {
 public:
  adam(adam_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("adam", options); }
  std::string name() const { return "adam"; }
  std::size_t slots() const { return options.amsgrad ? 3 : 2; }
  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t t) const {
    detail::adam_step(options, p, g, s, lr, t);
  }
};

class adamw : public basic_optimizer<adamw, adamw_options> {
 public:
  adamw(adamw_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("adamw", options); }
  std::string name() const { return "adamw"; }
  std::size_t slots() const { return options.amsgrad ? 3 : 2; }
  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t t) const {
    detail::adam_step(options, p, g, s, lr, t, 1.0f - lr * options.weight_decay);
  }
};

}  // namespace dtrain
