#pragma once
/// \file
/// Keras `optimizers.RMSprop`: v = rho v + (1 - rho) g^2; step = lr g / sqrt(v + epsilon)
/// (centered: v - mean_g^2 + epsilon); with momentum the step is accumulated into a velocity.

#include <cmath>

#include "dtrain/core/simd.hpp"
#include "dtrain/core/threads.hpp"
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
  /// Vectorized (core/simd.hpp) and split over the thread budget; each element as the formula says.
  void update(std::span<float> p, std::span<const float> g, std::span<float> s, float lr, std::int64_t) const {
    const std::size_t n = p.size();
    float* vel = s.data();
    float* mom = options.momentum > 0.0f ? vel + n : nullptr;
    float* avg = options.centered ? vel + n * (mom ? 2 : 1) : nullptr;
    if (mom && avg)
      kernel<true, true>(p.data(), g.data(), vel, mom, avg, n, lr);
    else if (mom)
      kernel<true, false>(p.data(), g.data(), vel, mom, avg, n, lr);
    else if (avg)
      kernel<false, true>(p.data(), g.data(), vel, mom, avg, n, lr);
    else
      kernel<false, false>(p.data(), g.data(), vel, mom, avg, n, lr);
  }

 private:
  template <bool Momentum, bool Centered>
  void kernel(float* p, const float* g, float* vel, float* mom, float* avg, std::size_t n, float lr) const {
    const float rho = options.rho, eps = options.epsilon, mu = options.momentum, one_minus_rho = 1.0f - rho;
    detail::parallel_for(n, detail::update_grain, [=](std::size_t begin, std::size_t end) {
      detail::simd::for_each_lane(begin, end, [=]<class V>(std::size_t i) {
        namespace simd = detail::simd;
        const V gi = simd::load<V>(g + i);
        const V vi = rho * simd::load<V>(vel + i) + one_minus_rho * gi * gi;
        simd::store(vel + i, vi);
        V denom = vi;
        if constexpr (Centered) {
          const V ai = rho * simd::load<V>(avg + i) + one_minus_rho * gi;
          simd::store(avg + i, ai);
          denom -= ai * ai;
        }
        const V inc = lr * gi / simd::sqrt(denom + eps);
        if constexpr (Momentum) {
          const V mi = mu * simd::load<V>(mom + i) + inc;
          simd::store(mom + i, mi);
          simd::store(p + i, simd::load<V>(p + i) - mi);
        } else {
          simd::store(p + i, simd::load<V>(p + i) - inc);
        }
      });
    });
  }
};

}  // namespace dtrain
