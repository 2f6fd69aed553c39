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
};

class sgd : public basic_optimizer<sgd, sgd_options> {
 public:
  sgd(sgd_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.momentum >= 0.0f && options.momentum <= 1.0f))
      throw value_error("sgd: momentum must be in [0, 1], got " + std::to_string(options.momentum));
  }
  std::string name() const { return "SGD"; }
  std::size_t slots() const { return options.momentum > 0.0f ? 1 : 0; }

  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t) const {
    const std::size_t n = p.size();
    const float mu = options.momentum;
    if (mu == 0.0f) {
      for (std::size_t i = 0; i < n; ++i) p[i] -= lr * g[i];
    } else if (options.nesterov) {
      for (std::size_t i = 0; i < n; ++i) {
        const float m = s[i] = mu * s[i] - lr * g[i];
        p[i] += mu * m - lr * g[i];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) p[i] += (s[i] = mu * s[i] - lr * g[i]);
    }
  }
};

}  // namespace dtrain
