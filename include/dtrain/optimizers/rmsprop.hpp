#pragma once
/// \file
/// Keras `optimizers.RMSprop`: v = rho v + (1 - rho) g^2; step = lr g / sqrt(v + epsilon)
/// (centered: v - mean_g^2 + epsilon); with momentum the step is accumulated into a velocity.

#include <cmath>

#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct rmsprop_options {
  learning_rate_schedule learning_rate = 0.001f;
  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;
  bool centered = false;
};

class rmsprop : public basic_optimizer<rmsprop, rmsprop_options> {
 public:
  rmsprop(rmsprop_options o = {}) : basic_optimizer(std::move(o)) {
    if (!(options.rho >= 0.0f && options.rho < 1.0f) || !(options.momentum >= 0.0f) || !(options.epsilon >= 0.0f))
      throw value_error("rmsprop: rho must be in [0, 1), momentum and epsilon non-negative");
  }
  std::string name() const { return "rmsprop"; }
  std::size_t slots() const { return 1 + (options.momentum > 0.0f) + options.centered; }

  /// Slots, block by block: velocity, then momentum (if > 0), then the mean gradient (if centered).
  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t) const {
    const std::size_t n = p.size();
    const float rho = options.rho, eps = options.epsilon, mu = options.momentum;
    float* vel = s.data();
    float* mom = mu > 0.0f ? vel + n : nullptr;
    float* avg = options.centered ? vel + n * (mom ? 2 : 1) : nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      vel[i] = rho * vel[i] + (1.0f - rho) * g[i] * g[i];
      float denom = vel[i];
      if (avg) {
        avg[i] = rho * avg[i] + (1.0f - rho) * g[i];
        denom -= avg[i] * avg[i];
      }
      const float inc = lr * g[i] / std::sqrt(denom + eps);
      if (mom)
        p[i] -= (mom[i] = mu * mom[i] + inc);
      else
        p[i] -= inc;
    }
  }
};

}  // namespace dtrain
