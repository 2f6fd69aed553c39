#pragma once
/// \file
/// Keras `optimizers.RMSprop`: v = rho v + (1 - rho) g^2; step = lr g / sqrt(v + epsilon)
/// (centered: v - mean_g^2 + epsilon); with momentum the step is accumulated into a velocity.

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct rmsprop_options {
  learning_rate_schedule learning_rate = 0.001f;
  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;
  bool centered = false;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};

class rmsprop : public basic_optimizer<rmsprop, rmsprop_options> {
 public:
  rmsprop(rmsprop_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.rho >= 0.0f && options.rho < 1.0f) || !(options.momentum >= 0.0f) || !(options.epsilon >= 0.0f))
      throw value_error("rmsprop: rho must be in [0, 1), momentum and epsilon non-negative");
  }
  std::string name() const { return "rmsprop"; }
  std::size_t slots() const { return 1 + (options.momentum > 0.0f) + options.centered; }
  op::rmsprop step(float lr, std::int64_t) const {
    return {lr, options.rho, options.momentum, options.epsilon, options.centered};
  }
};

}  // namespace dtrain
