#pragma once
/// \file
/// Keras `optimizers.Lion` (evolved sign momentum): p -= lr sign(beta_1 m + (1 - beta_1) g);
/// m = beta_2 m + (1 - beta_2) g. Every step moves each weight by exactly lr (or not at all), so it is
/// usually run with a learning rate 3-10 times smaller than Adam's.

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct lion_options {
  learning_rate_schedule learning_rate = 0.001f;
  float beta_1 = 0.9f;
  float beta_2 = 0.99f;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};

class lion : public basic_optimizer<lion, lion_options> {
 public:
  lion(lion_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.beta_1 >= 0.0f && options.beta_1 <= 1.0f) || !(options.beta_2 >= 0.0f && options.beta_2 <= 1.0f))
      throw value_error("lion: beta_1 and beta_2 must be in [0, 1]");
  }
  std::string name() const { return "lion"; }
  std::size_t slots() const { return 1; }
  op::lion step(float lr, std::int64_t) const { return {lr, options.beta_1, options.beta_2}; }
};

}  // namespace dtrain
