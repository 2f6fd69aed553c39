#pragma once
/// \file
/// Keras `optimizers.Adagrad`: a += g^2 (a starting at `initial_accumulator_value`);
/// p -= lr g / sqrt(a + epsilon). The slot holds a less its initial value, so the state starts at zero
/// as every optimizer's does (docs/keras-names.md).

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct adagrad_options {
  learning_rate_schedule learning_rate = 0.001f;
  float initial_accumulator_value = 0.1f;
  float epsilon = 1e-7f;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};

class adagrad : public basic_optimizer<adagrad, adagrad_options> {
 public:
  adagrad(adagrad_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.initial_accumulator_value >= 0.0f) || !(options.epsilon >= 0.0f))
      throw value_error("adagrad: initial_accumulator_value and epsilon must be non-negative");
  }
  std::string name() const { return "adagrad"; }
  std::size_t slots() const { return 1; }
  op::adagrad step(float lr, std::int64_t) const { return {lr, options.initial_accumulator_value, options.epsilon}; }
};

}  // namespace dtrain
