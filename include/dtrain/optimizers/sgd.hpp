#pragma once
/// \file
/// Keras `optimizers.SGD`: plain, with momentum, or Nesterov momentum (Keras' update rule:
/// m = momentum * m - lr * g; p += m, or p += momentum * m - lr * g with Nesterov).

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct sgd_options {
  learning_rate_schedule learning_rate = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;
  float clipnorm = 0.0f;                    // Keras' gradient clipping (optimizer.hpp; 0: not set)
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool use_ema = false;                     // Keras' moving average of the weights (optimizer.hpp)
  float ema_momentum = 0.99f;
  std::int64_t ema_overwrite_frequency = 0;  // 0: None (the average replaces the weights when fit ends)
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (optimizer.hpp)
};

class sgd : public basic_optimizer<sgd, sgd_options> {
 public:
  sgd(sgd_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.momentum >= 0.0f && options.momentum <= 1.0f))
      throw value_error("sgd: momentum must be in [0, 1], got " + std::to_string(options.momentum));
  }
  std::string name() const { return "SGD"; }
  std::size_t slots() const { return options.momentum > 0.0f ? 1 : 0; }
  op::sgd step(float lr, std::int64_t) const { return {lr, options.momentum, options.nesterov}; }
};

}  // namespace dtrain
