#pragma once
/// \file
/// Keras `optimizers.Adam` and `optimizers.AdamW`, and the Adam family's `Adamax` and `Nadam`. Keras'
/// form of Adam's update: alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
/// v += (g^2 - v)(1 - beta_2); p -= alpha * m / (sqrt(v) + epsilon). AdamW first decays p by
/// lr * weight_decay * p.

#include <cmath>

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct adam_options {
  learning_rate_schedule learning_rate = 0.001f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};

struct adamw_options {
  learning_rate_schedule learning_rate = 0.001f;
  float weight_decay = 0.004f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
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

struct adamax_options {
  learning_rate_schedule learning_rate = 0.001f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};
using nadam_options = adamax_options;

/// Keras `optimizers.Adamax`: Adam with the infinity norm, u = max(beta_2 u, |g|);
/// p -= lr / (1 - beta_1^t) * m / (u + epsilon).
class adamax : public basic_optimizer<adamax, adamax_options> {
 public:
  adamax(adamax_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("adamax", options); }
  std::string name() const { return "adamax"; }
  std::size_t slots() const { return 2; }
  op::adamax step(float lr, std::int64_t t) const {
    const float alpha = static_cast<float>(lr / (1.0 - std::pow(double(options.beta_1), double(t))));
    return {alpha, 1.0f - options.beta_1, options.beta_2, options.epsilon};
  }
};

/// Keras 3 `optimizers.Nadam`: Adam with Nesterov momentum under the momentum schedule
/// u_k = beta_1 (1 - 0.96^k / 2): m_hat = u_(t+1) m / (1 - u_1...u_(t+1)) + (1 - u_t) g / (1 - u_1...u_t),
/// v_hat = v / (1 - beta_2^t), p -= lr m_hat / (sqrt(v_hat) + epsilon). The products follow from the step
/// number (Keras keeps them as a variable), so a restored optimizer goes on exactly.
class nadam : public basic_optimizer<nadam, nadam_options> {
 public:
  nadam(nadam_options o = {}) : basic_optimizer(std::move(o)) { detail::check_adam("nadam", options); }
  std::string name() const { return "nadam"; }
  std::size_t slots() const { return 2; }
  op::nadam step(float lr, std::int64_t t) const {
    const double b1 = options.beta_1;
    auto u = [&](std::int64_t k) { return b1 * (1.0 - 0.5 * std::pow(0.96, double(k))); };
    // u_1...u_t: once 0.96^k is far below float precision every further factor is beta_1
    const std::int64_t exact_terms = std::min<std::int64_t>(t, 2000);
    double product = 1.0, power = 1.0;
    for (std::int64_t k = 1; k <= exact_terms; ++k) power *= 0.96, product *= b1 * (1.0 - 0.5 * power);
    if (t > exact_terms) product *= std::pow(b1, double(t - exact_terms));
    const double next = product * u(t + 1);
    return {lr,
            1.0f - options.beta_1,
            1.0f - options.beta_2,
            options.epsilon,
            static_cast<float>(u(t + 1) / (1.0 - next)),
            static_cast<float>((1.0 - u(t)) / (1.0 - product)),
            static_cast<float>(1.0 / (1.0 - std::pow(double(options.beta_2), double(t))))};
  }
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
