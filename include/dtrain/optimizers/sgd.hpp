#pragma once
/// \file
/// Keras `optimizers.SGD`: plain, with momentum, or Nesterov momentum (Keras' update rule:
/// m = momentum * m - lr * g; p += m, or p += momentum * m - lr * g with Nesterov).

#include "dtrain/core/threads.hpp"
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

  /// Split over the thread budget; the loops vectorize as they are.
  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t) const {
    const float mu = options.momentum;
    float* pp = p.data();
    const float* gg = g.data();
    float* ss = s.data();
    if (mu == 0.0f) {
      detail::parallel_for(p.size(), detail::update_grain, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) pp[i] -= lr * gg[i];
      });
    } else if (options.nesterov) {
      detail::parallel_for(p.size(), detail::update_grain, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
          const float m = ss[i] = mu * ss[i] - lr * gg[i];
          pp[i] += mu * m - lr * gg[i];
        }
      });
    } else {
      detail::parallel_for(p.size(), detail::update_grain, [=](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) pp[i] += (ss[i] = mu * ss[i] - lr * gg[i]);
      });
    }
  }
};

}  // namespace dtrain
