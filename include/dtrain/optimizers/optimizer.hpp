#pragma once
/// \file
/// The optimizer seam. An optimizer updates ONE contiguous parameter buffer from the matching
/// gradient buffer (the model's), so a step is a few tight loops, and its state is explicit:
/// `iterations` plus `slots() x n` floats (e.g. Adam's m then v), saved and restored as they are.
///
/// Algorithm contract (`optimizer_algorithm`): `name()` (Keras' name), `slots()` (state floats per
/// parameter), and `update(params, grads, slots, lr, t)` applying step `t` (1 on the first step) with
/// learning rate `lr`, where `slots` holds `slots() * params.size()` floats that start at zero.

#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/optimizers/schedules.hpp"

namespace dtrain {

namespace detail {
/// Parameters per thread below which an optimizer's update stays on the calling thread (waking a
/// worker costs tens of microseconds; an update moves ~1 ns of memory traffic per parameter).
inline constexpr std::size_t update_grain = 65536;
}  // namespace detail

/// Everything an optimizer carries from step to step.
struct optimizer_state {
  std::int64_t iterations = 0;
  std::vector<float> slots;
  friend bool operator==(const optimizer_state&, const optimizer_state&) = default;
};

template <class O>
concept optimizer_algorithm =
    requires(const O& o, std::span<float> p, std::span<const float> g, float lr, std::int64_t t) {
      { o.name() } -> std::convertible_to<std::string>;
      { o.slots() } -> std::convertible_to<std::size_t>;
      o.update(p, g, p, lr, t);
    };

/// Options, state and `apply_gradients` shared by every optimizer (CRTP over the update rule).
template <class Derived, class Options>
class basic_optimizer {
 public:
  basic_optimizer(Options o = {}) : options(std::move(o)) {}

  Options options;

  /// The learning rate the next step will use.
  float learning_rate() const { return options.learning_rate(state_.iterations); }
  /// Replaces the learning rate (or schedule) with a constant, as ReduceLROnPlateau does.
  void set_learning_rate(float lr) { options.learning_rate = lr; }
  /// A constant learning rate is state (a callback may have changed it) and is saved and restored with
  /// the slots; a schedule follows from the iterations.
  bool learning_rate_is_constant() const { return options.learning_rate.is_constant(); }
  std::int64_t iterations() const { return state_.iterations; }
  const optimizer_state& state() const { return state_; }
  /// Restores a saved state; its slots must match this optimizer (checked on the next step).
  void set_state(optimizer_state s) { state_ = std::move(s); }

  /// Keras `apply_gradients`: one step over the whole parameter buffer.
  void apply_gradients(std::span<const float> grads, std::span<float> params) {
    const Derived& self = static_cast<const Derived&>(*this);
    if (grads.size() != params.size())
      throw shape_error(self.name() + ".apply_gradients: " + std::to_string(grads.size()) + " gradients for " +
                        std::to_string(params.size()) + " parameters");
    const std::size_t need = self.slots() * params.size();
    if (state_.slots.size() != need) {
      if (!state_.slots.empty() || state_.iterations != 0)
        throw value_error(self.name() + ": the restored optimizer state has " + std::to_string(state_.slots.size()) +
                          " slot values but this model needs " + std::to_string(need));
      state_.slots.assign(need, 0.0f);
    }
    const float lr = learning_rate();
    ++state_.iterations;
    self.update(params, grads, state_.slots, lr, state_.iterations);
  }

 private:
  optimizer_state state_;
};

/// An optimizer of any type, held by value (what `compile` stores).
class any_optimizer {
 public:
  any_optimizer() = default;
  template <class O>
    requires optimizer_algorithm<O> && (!std::same_as<std::remove_cvref_t<O>, any_optimizer>)
  any_optimizer(O o) : self_(std::make_unique<model_t<O>>(std::move(o))) {}
  any_optimizer(const any_optimizer& o) : self_(o.self_ ? o.self_->clone() : nullptr) {}
  any_optimizer& operator=(const any_optimizer& o) {
    if (this != &o) self_ = o.self_ ? o.self_->clone() : nullptr;
    return *this;
  }
  any_optimizer(any_optimizer&&) noexcept = default;
  any_optimizer& operator=(any_optimizer&&) noexcept = default;

  explicit operator bool() const { return self_ != nullptr; }
  std::string name() const { return self_->name(); }
  void apply_gradients(std::span<const float> g, std::span<float> p) { self_->apply_gradients(g, p); }
  float learning_rate() const { return self_->learning_rate(); }
  void set_learning_rate(float lr) { self_->set_learning_rate(lr); }
  bool learning_rate_is_constant() const { return self_->learning_rate_is_constant(); }
  std::int64_t iterations() const { return self_->state().iterations; }
  const optimizer_state& state() const { return self_->state(); }
  void set_state(optimizer_state s) { self_->set_state(std::move(s)); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual void apply_gradients(std::span<const float>, std::span<float>) = 0;
    virtual float learning_rate() const = 0;
    virtual void set_learning_rate(float) = 0;
    virtual bool learning_rate_is_constant() const = 0;
    virtual const optimizer_state& state() const = 0;
    virtual void set_state(optimizer_state) = 0;
    virtual std::unique_ptr<concept_t> clone() const = 0;
  };
  template <class O>
  struct model_t final : concept_t {
    explicit model_t(O o) : o_(std::move(o)) {}
    std::string name() const override { return o_.name(); }
    void apply_gradients(std::span<const float> g, std::span<float> p) override { o_.apply_gradients(g, p); }
    float learning_rate() const override { return o_.learning_rate(); }
    void set_learning_rate(float lr) override { o_.set_learning_rate(lr); }
    bool learning_rate_is_constant() const override { return o_.learning_rate_is_constant(); }
    const optimizer_state& state() const override { return o_.state(); }
    void set_state(optimizer_state s) override { o_.set_state(std::move(s)); }
    std::unique_ptr<concept_t> clone() const override { return std::make_unique<model_t>(o_); }
    O o_;
  };
  std::unique_ptr<concept_t> self_;
};

}  // namespace dtrain
