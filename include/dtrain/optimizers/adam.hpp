#pragma once
/// \file
/// Keras `optimizers.Adam` and `optimizers.AdamW`. Keras' form of the update:
/// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
/// p -= alpha * m / (sqrt(v) + epsilon). AdamW first decays p by lr * weight_decay * p.

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
/// Step t of Adam (AdamW: with the weight multiplier `decay`), bias correction folded into alpha.
template <class O>
op::adam adam_step(const O& o, float lr, std::int64_t t, float decay = 1.0f) {
  const double tt = static_cast<double>(t);
  const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double(o.beta_2), tt)) /
                                         (1.0 - std::pow(double(o.beta_1), tt)));
  return {alpha, 1.0f - o.beta_1, 1.0f - o.beta_2, o.epsilon, decay, o.amsgrad};
}
}  // namespace detail

class adam : public basic_optimizer<adam, adam_options> {
 public:
  adam(adam_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("adam", options); }
  std::string name() const { return "adam"; }
  std::size_t slots() const { return options.amsgrad ? 3 : 2; }
  op::adam step(float lr, std::int64_t t) const { return detail::adam_step(options, lr, t); }
};

class adamw : public basic_optimizer<adamw, adamw_options> {
 public:
  adamw(adamw_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("adamw", options); }
  std::string name() const { return "adamw"; }
  std::size_t slots() const { return options.amsgrad ? 3 : 2; }
  op::adam step(float lr, std::int64_t t) const {
    return detail::adam_step(options, lr, t, 1.0f - lr * options.weight_decay);
  }
};

}  // namespace dtrain
