#pragma once
/// \file
/// Learning-rate schedules (Keras `optimizers.schedules`). A schedule maps the optimizer's
/// `iterations` (0 on the first step) to a learning rate; a plain float is a constant schedule.

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// Keras `ExponentialDecay`: `initial * decay_rate ^ (step / decay_steps)` (floored when staircase).
struct exponential_decay {
  float initial_learning_rate = 0.01f;
  std::int64_t decay_steps = 1;
  float decay_rate = 0.96f;
  bool staircase = false;

  void validate() const {
    if (decay_steps <= 0) throw value_error("exponential_decay: decay_steps must be positive");
  }
  float operator()(std::int64_t step) const {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return static_cast<float>(initial_learning_rate * std::pow(static_cast<double>(decay_rate), p));
  }
};

/// Keras `PiecewiseConstantDecay`: `values[0]` while step <= boundaries[0], `values[1]` while
/// step <= boundaries[1], ..., `values.back()` after the last boundary.
struct piecewise_constant_decay {
  std::vector<std::int64_t> boundaries;
  std::vector<float> values;

  void validate() const {
    if (values.size() != boundaries.size() + 1)
      throw value_error("piecewise_constant_decay: needs one more value than boundaries (got " +
                        std::to_string(values.size()) + " values, " + std::to_string(boundaries.size()) +
                        " boundaries)");
    for (std::size_t i = 1; i < boundaries.size(); ++i)
      if (boundaries[i] <= boundaries[i - 1])
        throw value_error("piecewise_constant_decay: boundaries must increase");
  }
  float operator()(std::int64_t step) const {
    for (std::size_t i = 0; i < boundaries.size(); ++i)
      if (step <= boundaries[i]) return values[i];
    return values.back();
  }
};

/// Keras `PolynomialDecay`: from `initial_learning_rate` to `end_learning_rate` over `decay_steps` steps
/// along (1 - step / decay_steps)^power, then constant; with `cycle` it decays again over each further
/// multiple of decay_steps.
struct polynomial_decay {
  float initial_learning_rate = 0.01f;
  std::int64_t decay_steps = 1;
  float end_learning_rate = 0.0001f;
  float power = 1.0f;
  bool cycle = false;

  void validate() const {
    if (decay_steps <= 0) throw value_error("polynomial_decay: decay_steps must be positive");
  }
  float operator()(std::int64_t step) const {
    double s = static_cast<double>(step), d = static_cast<double>(decay_steps);
    if (cycle) d *= step == 0 ? 1.0 : std::ceil(s / d);
    else s = std::min(s, d);
    return static_cast<float>((initial_learning_rate - end_learning_rate) * std::pow(1.0 - s / d, double(power)) +
                              end_learning_rate);
  }
};

/// Keras `InverseTimeDecay`: `initial / (1 + decay_rate * step / decay_steps)` (the ratio floored when
/// staircase).
struct inverse_time_decay {
  float initial_learning_rate = 0.01f;
  std::int64_t decay_steps = 1;
  float decay_rate = 0.5f;
  bool staircase = false;

  void validate() const {
    if (decay_steps <= 0) throw value_error("inverse_time_decay: decay_steps must be positive");
  }
  float operator()(std::int64_t step) const {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return static_cast<float>(initial_learning_rate / (1.0 + double(decay_rate) * p));
  }
};

/// Keras `CosineDecay`: from the initial rate (or, after `warmup_steps` of linear warmup, from
/// `warmup_target`) down to `alpha` times it along half a cosine over `decay_steps`, then constant.
struct cosine_decay {
  float initial_learning_rate = 0.01f;
  std::int64_t decay_steps = 1;
  float alpha = 0.0f;
  std::optional<float> warmup_target{};
  std::int64_t warmup_steps = 0;

  void validate() const {
    if (decay_steps <= 0) throw value_error("cosine_decay: decay_steps must be positive");
    if (warmup_steps < 0) throw value_error("cosine_decay: warmup_steps must not be negative");
  }
  float operator()(std::int64_t step) const {
    const double d = static_cast<double>(decay_steps), w = static_cast<double>(warmup_steps);
    auto decay = [&](double s, double from) {
      const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * s / d));
      return from * ((1.0 - alpha) * cosine + alpha);
    };
    if (!warmup_target) return static_cast<float>(decay(std::min(double(step), d), initial_learning_rate));
    const double s = std::min(double(step), d + w);
    if (s < w) return static_cast<float>((*warmup_target - initial_learning_rate) * (s / w) + initial_learning_rate);
    return static_cast<float>(decay(s - w, *warmup_target));
  }
};

/// A learning rate: a constant or any schedule `float(std::int64_t step)`.
class learning_rate_schedule {
 public:
  learning_rate_schedule(float constant) : constant_(constant) { check(constant); }
  learning_rate_schedule(double constant) : learning_rate_schedule(static_cast<float>(constant)) {}
  template <class F>
    requires std::is_invocable_r_v<float, const F&, std::int64_t> && (!std::is_arithmetic_v<F>)
  learning_rate_schedule(F f) {
    if constexpr (requires { f.validate(); }) f.validate();
    schedule_ = std::move(f);
  }

  float operator()(std::int64_t step) const { return schedule_ ? schedule_(step) : constant_; }
  bool is_constant() const { return !schedule_; }
  /// The schedule held, if it is an `F` (as `std::function::target`).
  template <class F>
  const F* target() const {
    return schedule_.template target<F>();
  }

 private:
  static void check(float lr) {
    if (!(lr >= 0.0f) || !std::isfinite(lr))
      throw value_error("learning_rate must be a finite non-negative number, got " + std::to_string(lr));
  }
  float constant_ = 0.0f;
  std::function<float(std::int64_t)> schedule_;
};

}  // namespace dtrain
