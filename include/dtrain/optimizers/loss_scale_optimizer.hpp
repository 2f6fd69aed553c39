#pragma once
/// \file
/// `loss_scale_optimizer`: Keras' `LossScaleOptimizer`, dynamic loss scaling for float16 training. Small
/// gradients underflow in float16 (below 2^-24 they are zero); multiplying the loss, hence every gradient,
/// by a large scale keeps them representable, and the gradients are divided by it again before the step.
/// The scale follows Keras' rule: a step whose gradients are all finite counts towards
/// `dynamic_growth_steps`, after which the scale doubles; a step with an inf or a NaN is skipped (the
/// inner optimizer does not step, its iterations do not advance) and halves the scale.
///
/// A compiled model does the scaling: its training step multiplies the loss's gradient (and the
/// penalties') by `dynamic_scale()`, sums the replicas' scaled gradients, and then `apply`s: the sum of
/// the summed gradients says whether all are finite (every worker sees the same bits, so all agree), and
/// the gradients are divided by the scale in place before the inner optimizer's step. The loss it
/// reports is unscaled. `compile` wraps the optimizer in one under a `mixed_float16` policy (Keras'
/// `auto_scale_loss`). Applied to gradients from outside a model's step (`value_and_gradients`, a custom
/// loop), it is a usage_error: those gradients were not scaled.
///
/// Its state (`state()`) is the inner optimizer's with the step counter and the scale in `extra`, so
/// backups and saved models keep them and a resumed run continues bitwise.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

struct loss_scale_options {
  float initial_scale = 32768.0f;  // 2^15, Keras' default
  std::int64_t dynamic_growth_steps = 2000;
};

class loss_scale_optimizer {
 public:
  explicit loss_scale_optimizer(any_optimizer inner, loss_scale_options o = {})
      : options(o), inner_(std::move(inner)), scale_(o.initial_scale) {
    if (!inner_) throw usage_error("loss_scale_optimizer: the optimizer to wrap holds none");
    if (inner_.target<loss_scale_optimizer>())
      throw usage_error("loss_scale_optimizer: the optimizer to wrap already scales the loss");
    if (!(std::isfinite(o.initial_scale) && o.initial_scale > 0.0f))
      throw value_error("loss_scale_optimizer: initial_scale must be positive and finite, not " +
                        std::to_string(o.initial_scale));
    if (o.dynamic_growth_steps < 1 || o.dynamic_growth_steps > (std::int64_t(1) << 24))
      throw value_error("loss_scale_optimizer: dynamic_growth_steps must be in [1, 2^24], not " +
                        std::to_string(o.dynamic_growth_steps));
  }

  loss_scale_options options;

  std::string name() const { return "loss_scale_optimizer"; }
  /// The scale the next step's loss is multiplied by (Keras' `dynamic_scale`).
  float dynamic_scale() const { return scale_; }
  /// Finite steps since the scale last changed (Keras' `step_counter`).
  std::int64_t step_counter() const { return counter_; }
  /// Keras' `scale_loss(loss)`.
  float scale_loss(float loss) const { return loss * scale_; }
  any_optimizer& inner_optimizer() { return inner_; }
  const any_optimizer& inner_optimizer() const { return inner_; }

  /// After a step's scaled gradients: the scale's update, and whether the inner optimizer takes the
  /// step (whether they were all finite). Read the scale to divide by before calling this.
  bool update_scale(bool finite) {
    if (!finite) {
      scale_ /= 2.0f;
      counter_ = 0;
      return false;
    }
    if (counter_ == options.dynamic_growth_steps - 1) {
      scale_ *= 2.0f;
      counter_ = 0;
    } else {
      ++counter_;
    }
    return true;
  }

  // ---- the optimizer's interface: the inner optimizer's, with the scale's state after its own ------------
  std::size_t slots() const { return inner_.slots(); }
  optimizer_op step(float, std::int64_t) const { throw unscaled(); }
  optimizer_op begin_step(std::size_t, optimizer_variables&) const { throw unscaled(); }
  optimizer_variables& variables() { return inner_.variables(); }
  bool use_ema() const { return inner_.use_ema(); }
  std::optional<op::ema> ema_step(std::int64_t t) const { return inner_.ema_step(t); }
  gradient_clipping clipping() const { return inner_.clipping(); }
  std::int64_t gradient_accumulation_steps() const { return inner_.gradient_accumulation_steps(); }
  float learning_rate() const { return inner_.learning_rate(); }
  void set_learning_rate(float lr) { inner_.set_learning_rate(lr); }
  bool learning_rate_is_constant() const { return inner_.learning_rate_is_constant(); }
  std::int64_t iterations() const { return inner_.iterations(); }
  optimizer_state state() const {
    optimizer_state s = inner_.state();
    s.extra = {static_cast<float>(counter_), scale_};  // (the counter is exact: it stays below 2^24)
    return s;
  }
  void set_state(optimizer_state s) {
    const std::vector<float>& e = s.extra;
    if (e.size() != 2 || !(e[0] >= 0.0f && e[0] < static_cast<float>(options.dynamic_growth_steps)) ||
        e[0] != std::floor(e[0]) || !(e[1] > 0.0f) || !std::isfinite(e[1]))
      throw value_error("loss_scale_optimizer: the restored state has no step counter in [0, " +
                        std::to_string(options.dynamic_growth_steps) + ") and positive scale after the inner "
                        "optimizer's (a state saved without loss scaling?)");
    counter_ = static_cast<std::int64_t>(e[0]);
    scale_ = e[1];
    s.extra.clear();
    inner_.set_state(std::move(s));
  }

 private:
  static usage_error unscaled() {
    return usage_error("loss_scale_optimizer: it applies the scaled gradients of a compiled model's own step "
                       "(fit, train_step); gradients from elsewhere were not scaled: apply them with the inner "
                       "optimizer");
  }

  any_optimizer inner_;
  float scale_;
  std::int64_t counter_ = 0;
};

}  // namespace dtrain
