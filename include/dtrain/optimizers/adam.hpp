#pragma once
/// \file
/// Keras `optimizers.Adam` and `optimizers.AdamW`. Keras' form of the update:
/// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
/// p -= alpha * m / (sqrt(v) + epsilon). AdamW first decays p by lr * weight_decay * p.

#include <algorithm>
#include <cmath>

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
/// The Adam step shared by adam and adamw; slots are m, v (and v_hat with amsgrad), block by block.
template <class O>
void adam_step(const O& o, std::span<float> p, std::span<const float> g, std::span<float> s, float lr,
               std::int64_t t) {
  const std::size_t n = p.size();
  const double tt = static_cast<double>(t);
  const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double(o.beta_2), tt)) /
                                         (1.0 - std::pow(double(o.beta_1), tt)));
  const float b1 = 1.0f - o.beta_1, b2 = 1.0f - o.beta_2, eps = o.epsilon;
  float* m = s.data();
  float* v = m + n;
  float* vh = o.amsgrad ? v + n : nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    m[i] += (g[i] - m[i]) * b1;
    v[i] += (g[i] * g[i] - v[i]) * b2;
    float vv = v[i];
    if (vh) vv = vh[i] = std::max(vh[i], vv);
    p[i] -= alpha * m[i] / (std::sqrt(vv) + eps);
  }
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
    const float decay = 1.0f - lr * options.weight_decay;
    for (auto& v : p) v *= decay;
    detail::adam_step(options, p, g, s, lr, t);
  }
};

}  // namespace dtrain
