#pragma once
/// \file
/// The optimizer seam. An optimizer updates ONE contiguous parameter buffer from the matching
/// gradient buffer (the model's) in one fused backend kernel per step, and its state is explicit:
/// `iterations` plus `slots() x n` floats (e.g. Adam's m then v), which live on the backend of the
/// parameters they follow and are saved and restored through host copies (`state()`, `set_state()`).
///
/// Algorithm contract (`optimizer_algorithm`): `name()` (Keras' name), `slots()` (state floats per
/// parameter), and `step(lr, t)`: step `t` (1 on the first) with learning rate `lr` as the backend's
/// `optimizer_op` (backend/backend.hpp gives each one's formula and slot layout).
///
/// Every optimizer takes Keras' `use_ema`, `ema_momentum` and `ema_overwrite_frequency`: after each step
/// a moving average of the weights (`op::ema`, one more slot after the algorithm's; the first step's
/// average is the weights) replaces them every `ema_overwrite_frequency` steps, and at the end of `fit`
/// (`finalize_variable_values`, as Keras' fit calls it).
///
/// And Keras' gradient options, in Keras' order within a step: with `gradient_accumulation_steps` = k
/// (0: none, else at least 2) the gradients of k - 1 calls are summed in one more slot and the k-th call
/// updates with the mean of the k; the gradients the update uses are then clipped by at most one of
/// `clipnorm` (each variable's gradient scaled down to this L2 norm), `clipvalue` (each value clamped to
/// [-clipvalue, clipvalue]) and `global_clipnorm` (all of them scaled down together to this norm; 0: none).
/// Every replica clips the summed gradients it is handed, so all of them clip the same global gradient.
/// `iterations` counts every call, as Keras' does: a schedule reads it, the update's step number (Adam's
/// bias correction) and the moving average count updates.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/replica_group.hpp"
#include "dtrain/optimizers/schedules.hpp"

namespace dtrain {

/// Everything an optimizer carries from step to step, as host values (what checkpoints hold).
struct optimizer_state {
  std::int64_t iterations = 0;
  std::vector<float> slots;
  std::vector<float> extra;  // a wrapping optimizer's own values (loss_scale_optimizer: step counter, scale)
  friend bool operator==(const optimizer_state&, const optimizer_state&) = default;
};

template <class O>
concept optimizer_algorithm = requires(const O& o, float lr, std::int64_t t) {
  { o.name() } -> std::convertible_to<std::string>;
  { o.slots() } -> std::convertible_to<std::size_t>;
  { o.step(lr, t) } -> std::convertible_to<optimizer_op>;
};

/// An optimizer's slot values. They are made on the backend of the first parameters they follow (zeros,
/// or the values `assign` restored) and stay there; copies are deep.
class optimizer_slots {
 public:
  optimizer_slots() = default;
  optimizer_slots(const optimizer_slots& o) : store_(o.store_ ? o.store_->clone() : nullptr), host_(o.host_) {}
  optimizer_slots& operator=(const optimizer_slots& o) {
    if (this != &o) *this = optimizer_slots(o);
    return *this;
  }
  optimizer_slots(optimizer_slots&&) noexcept = default;
  optimizer_slots& operator=(optimizer_slots&&) noexcept = default;

  std::size_t size() const { return store_ ? store_->size() : host_.size(); }
  /// A host copy of the values.
  std::vector<float> values() const { return store_ ? store_->values() : host_; }
  /// Replaces the values (a restore); they reach the backend on the next step.
  void assign(std::vector<float> v) {
    store_.reset();
    host_ = std::move(v);
  }
  /// The `n` values on backend `b`, made there (from the restored values, else zeros) when they are not.
  template <blas_kernels B>
  pointer_t<B, float> on(const B& b, std::size_t n) {
    if (auto* s = dynamic_cast<store_on<B>*>(store_.get()); s && s->size() == n) return s->data();
    std::vector<float> init = values();
    auto s = std::make_unique<store_on<B>>(b, n);
    const pointer_t<B, float> data = s->data();
    if (init.size() == n) b.upload(n, init.data(), data);
    else b.fill(n, 0.0f, data);  // nothing restored (begin_step has checked): zeros
    store_ = std::move(s);
    host_.clear();
    return data;
  }
  /// The `n` values in host memory (the host path's), brought back from a backend, or made from the
  /// restored values, else zeros, when they are not there.
  float* host(std::size_t n) {
    if (store_) {
      host_ = store_->values();
      store_.reset();
    }
    if (host_.size() != n) host_.assign(n, 0.0f);  // nothing restored (begin_step has checked): zeros
    return host_.data();
  }

 private:
  struct store {
    virtual ~store() = default;
    virtual std::unique_ptr<store> clone() const = 0;
    virtual std::size_t size() const = 0;
    virtual std::vector<float> values() const = 0;
  };
  template <class B>
  struct store_on final : store {
    store_on(const B& b, std::size_t n) : device(b), buffer(b.template allocate<float>(n)), n(n) {}
    std::unique_ptr<store> clone() const override {
      auto c = std::make_unique<store_on>(device, n);
      device.copy(n, buffer.data(), c->data());
      return c;
    }
    std::size_t size() const override { return n; }
    std::vector<float> values() const override {
      std::vector<float> v(n);
      device.download(n, buffer.data(), v.data());
      return v;
    }
    pointer_t<B, float> data() const { return buffer.data(); }
    B device;
    buffer_t<B, float> buffer;
    std::size_t n;
  };
  std::unique_ptr<store> store_;
  std::vector<float> host_;
};

/// An optimizer's variables: its step count and its slot values (the algorithm's, then the moving
/// average's, then the accumulated gradients'), and room for the clipped gradients, which are not state.
struct optimizer_variables {
  std::int64_t iterations = 0;
  optimizer_slots slots;
  optimizer_slots scratch;
};

/// Keras' gradient clipping options (0: not set), as every optimizer's options carry them.
struct gradient_clipping {
  float clipnorm = 0.0f;
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;

  bool any() const { return clipnorm > 0.0f || clipvalue > 0.0f || global_clipnorm > 0.0f; }
  void validate(const std::string& who) const {
    for (float v : {clipnorm, clipvalue, global_clipnorm})
      if (!(v >= 0.0f) || !std::isfinite(v))
        throw value_error(who + ": clipnorm, clipvalue and global_clipnorm must be positive and finite (0: not set)");
    if ((clipnorm > 0.0f) + (clipvalue > 0.0f) + (global_clipnorm > 0.0f) > 1)
      throw value_error(who + ": only one of clipnorm, clipvalue and global_clipnorm can be set (got " +
                        std::to_string(clipnorm) + ", " + std::to_string(clipvalue) + ", " +
                        std::to_string(global_clipnorm) + ")");
  }

  /// Clips the `n` gradients at `g` (in place) on backend b, `variables` giving the sizes of the
  /// variables they are laid out in (empty: one variable); `norms` has room for one float per variable.
  template <class B>
  void apply(const B& b, std::size_t n, std::span<const std::size_t> variables, pointer_t<B, float> g,
             pointer_t<B, float> norms) const {
    if (clipvalue > 0.0f) return b.clip(n, -clipvalue, clipvalue, g);
    if constexpr (!requires { b.l2(n, 1.0f, 0.0f, pointer_t<B, const float>(g), g, norms); }) {
      throw usage_error(std::string("clipnorm and global_clipnorm need the backend's l2 kernel, which ") + B::name +
                        " has not");
    } else {
      const std::size_t one[] = {n};
      if (variables.empty() || global_clipnorm > 0.0f) variables = one;
      b.fill(variables.size(), 0.0f, norms);
      for (std::size_t i = 0, at = 0; i < variables.size(); at += variables[i++])
        b.l2(variables[i], 1.0f, 0.0f, pointer_t<B, const float>(g + at), pointer_t<B, float>{}, norms + i);
      std::vector<float> sums(variables.size());
      b.download(sums.size(), pointer_t<B, const float>(norms), sums.data());
      for (std::size_t i = 0, at = 0; i < variables.size(); at += variables[i++]) {
        const float norm = std::sqrt(sums[i]);
        // Keras' arithmetic: clip_by_global_norm's scale (NaN for a norm that is not finite), _clip_by_norm's ratio
        const float factor = global_clipnorm > 0.0f
                                 ? global_clipnorm * std::min(1.0f / norm, 1.0f / global_clipnorm) + (norm - norm)
                                 : clipnorm / std::max(norm, clipnorm);
        if (factor != 1.0f) b.scale(variables[i], factor, g + at);
      }
    }
  }
};

namespace detail {
/// Keras `apply_gradients` for an optimizer `O` with `name()`, `variables()` and `begin_step(n, v)` (which
/// checks v's slots, advances v's `iterations` and returns the step): basic_optimizer and any_optimizer.
///
/// Inside `strategy.run` of a strategy with several replicas in this process (mirrored_strategy), every
/// replica calls `apply_gradients` on the same free optimizer with its own copy of the (summed) gradients
/// and weights. As TF's mirrored optimizer variables, each replica then steps its own copy of the
/// optimizer's variables: replica 0 the optimizer's own, replica i a copy taken when the run first
/// needed it, so `iterations` counts each step once, the copies stay identical and no two threads touch
/// the same state (core/replica_group.hpp). A model's compiled optimizer belongs to one replica (every
/// replica's model has its own) and steps its own variables wherever it is called (`set_replica_owned`).
template <class O>
class gradient_steps {
 public:
  /// One step over a whole parameter buffer in host memory, with the host's kernels...
  /// `variables`: the sizes of the variables the buffers hold, in order (what `clipnorm` clips one by one;
  /// a model's `trainable_variable_sizes()`); empty: one variable.
  void apply_gradients(std::span<const float> grads, std::span<float> params,
                       std::span<const std::size_t> variables = {}) {
    apply(cpu{}, grads.data(), grads.size(), params.data(), params.size(), variables,
          [](optimizer_slots& s, std::size_t n) { return s.host(n); });
  }
  /// ...or in a backend's memory (a model's `gradients()` and `parameters()`), with its own.
  template <class G, update_kernels B>
  void apply_gradients(device_span<G, B> grads, device_span<float, B> params, std::span<const std::size_t> variables = {}) {
    const B& b = params.device();
    apply(b, pointer_t<B, const float>(grads.data()), grads.size(), params.data(), params.size(), variables,
          [&](optimizer_slots& s, std::size_t n) { return s.on(b, n); });
  }
  /// Keras' `finalize_variable_values`: with `use_ema`, the parameters take their moving average (what
  /// `fit` does at its end). Nothing before the first step.
  void finalize_variable_values(std::span<float> params) {
    if (const auto at = average_at(params.size())) {
      const float* a = static_cast<O&>(*this).variables().slots.host(*at + params.size()) + *at;
      std::copy_n(a, params.size(), params.data());
    }
  }
  template <update_kernels B>
  void finalize_variable_values(device_span<float, B> params) {
    if (const auto at = average_at(params.size())) {
      const B& b = params.device();
      const pointer_t<B, float> s = static_cast<O&>(*this).variables().slots.on(b, *at + params.size());
      b.copy(params.size(), pointer_t<B, const float>(s + *at), params.data());
    }
  }
  /// Marks an optimizer that one replica alone steps (what a model does with its compiled one).
  void set_replica_owned() { replica_owned_ = true; }

 protected:
  /// The optimizer's own variables were replaced: the replicas' copies are out of date.
  void variables_replaced() { replica_copies_.clear(); }

 private:
  /// Checks the sizes, picks the variables this replica steps, and makes the step on backend b: the
  /// gradients accumulated or clipped as asked, the update, the moving average. `slots_of(s, k)` gives
  /// k values of slots s where b reaches them.
  template <class B, class Slots>
  void apply(const B& b, pointer_t<B, const float> g, std::size_t ng, pointer_t<B, float> p, std::size_t n,
             std::span<const std::size_t> variables, Slots slots_of) {
    O& self = static_cast<O&>(*this);
    if (ng != n)
      throw shape_error(self.name() + ".apply_gradients: " + std::to_string(ng) + " gradients for " +
                        std::to_string(n) + " parameters");
    std::size_t total = 0;
    for (std::size_t v : variables) total += v;
    if (!variables.empty() && total != n)
      throw shape_error(self.name() + ".apply_gradients: variables of " + std::to_string(total) + " values in all for " +
                        std::to_string(n) + " parameters");
    if (current_local_replica() < 0) replica_copies_.clear();  // a step outside a run: the copies fall behind
    optimizer_variables& v = replica_owned_ ? self.variables() : replica_copies_.get(self.variables(), copy_of);
    const std::int64_t every = self.gradient_accumulation_steps(), calls = v.iterations;
    const std::optional<op::ema> ema = self.ema_step(every ? calls / every : calls);
    const gradient_clipping clip = self.clipping();
    std::visit(
        [&](const auto& step) {
          const std::size_t k = slot_count(step), averages = ema ? 1 : 0;
          const pointer_t<B, float> s = slots_of(v.slots, (k + averages + (every ? 1 : 0)) * n);
          const pointer_t<B, float> summed = s + (k + averages) * n;  // (accumulating only)
          if (every && (calls + 1) % every != 0) {
            b.axpy(n, 1.0f, g, summed);
          } else {
            pointer_t<B, const float> use = g;
            if (every || clip.any()) {
              const std::size_t norms = clip.any() ? std::max<std::size_t>(variables.size(), 1) : 0;
              const pointer_t<B, float> room = slots_of(v.scratch, (every ? 0 : n) + norms);
              const pointer_t<B, float> work = every ? summed : room;
              if (every) {  // Keras' (g + accumulated) / steps
                b.axpy(n, 1.0f, g, summed);
                b.scale(n, 1.0f / static_cast<float>(every), summed);
              } else {
                b.copy(n, g, work);
              }
              if (clip.any()) clip.apply(b, n, variables, work, room + (every ? 0 : n));
              use = work;
            }
            b.update(step, n, use, s, p);
            if (every) b.fill(n, 0.0f, summed);
          }
          if (ema) b.update(*ema, n, pointer_t<B, const float>(p), s + k * n, p);
        },
        optimizer_op(self.begin_step(n, v)));
  }

  /// Where the moving average of `n` parameters starts in the slots; none before the first step.
  std::optional<std::size_t> average_at(std::size_t n) {
    O& self = static_cast<O&>(*this);
    const optimizer_variables& v = self.variables();
    const std::size_t at = self.slots() * n, accumulated = self.gradient_accumulation_steps() ? n : 0;
    if (!self.use_ema() || v.iterations == 0 || v.slots.size() != at + n + accumulated) return std::nullopt;
    return at;
  }

  static optimizer_variables copy_of(const optimizer_variables& own) {
    optimizer_variables c{own.iterations, {}, {}};
    c.slots.assign(own.slots.values());  // reaches each replica's device at its first step
    return c;
  }

  bool replica_owned_ = false;
  replica_copies<optimizer_variables> replica_copies_;
};
}  // namespace detail

/// Options, state and `apply_gradients` shared by every optimizer (CRTP over the update rule).
template <class Derived, class Options>
class basic_optimizer : public detail::gradient_steps<Derived> {
 public:
  basic_optimizer(Options o = {}) : options(std::move(o)) {
    if (!(options.ema_momentum >= 0.0f && options.ema_momentum <= 1.0f) || options.ema_overwrite_frequency < 0)
      throw value_error("optimizer: ema_momentum must be in [0, 1] and ema_overwrite_frequency not negative");
    clipping().validate("optimizer");
    if (options.gradient_accumulation_steps < 0 || options.gradient_accumulation_steps == 1)
      throw value_error("optimizer: gradient_accumulation_steps must be at least 2 (0: none), got " +
                        std::to_string(options.gradient_accumulation_steps));
  }

  Options options;

  /// The learning rate the next step will use.
  float learning_rate() const { return options.learning_rate(vars_.iterations); }
  /// Replaces the learning rate (or schedule) with a constant, as ReduceLROnPlateau does.
  void set_learning_rate(float lr) { options.learning_rate = lr; }
  /// A constant learning rate is state (a callback may have changed it) and is saved and restored with
  /// the slots; a schedule follows from the iterations.
  bool learning_rate_is_constant() const { return options.learning_rate.is_constant(); }
  std::int64_t iterations() const { return vars_.iterations; }
  /// A host copy of the state.
  optimizer_state state() const { return {vars_.iterations, vars_.slots.values(), {}}; }
  /// Restores a saved state; its slots must match the parameters (checked on the next step).
  void set_state(optimizer_state s) {
    if (!s.extra.empty())
      throw value_error(static_cast<const Derived&>(*this).name() + ": the restored state carries " +
                        std::to_string(s.extra.size()) + " values of a wrapping optimizer (a loss_scale_optimizer's?)");
    vars_.iterations = s.iterations;
    vars_.slots.assign(std::move(s.slots));
    this->variables_replaced();
  }

  /// Whether the weights' moving average is kept (an extra slot after `slots()`).
  bool use_ema() const { return options.use_ema; }
  /// Keras' clipnorm, clipvalue and global_clipnorm.
  gradient_clipping clipping() const { return {options.clipnorm, options.clipvalue, options.global_clipnorm}; }
  /// Calls per update (0: every call updates); the accumulated gradients are one more slot.
  std::int64_t gradient_accumulation_steps() const { return options.gradient_accumulation_steps; }
  /// The moving average's update after step `iterations` + 1 (Keras: momentum 0 on the first step).
  std::optional<op::ema> ema_step(std::int64_t iterations) const {
    if (!options.use_ema) return std::nullopt;
    const bool overwrite = options.ema_overwrite_frequency > 0 && (iterations + 1) % options.ema_overwrite_frequency == 0;
    return op::ema{iterations == 0 ? 0.0f : options.ema_momentum, overwrite};
  }

  /// Starts the next call of variables `v` over `n` parameters: checks that v's slots fit them, advances
  /// v's `iterations` and returns the step for the backend, which updates `v.slots` with it (when the
  /// call updates: its step number counts updates).
  auto begin_step(std::size_t n, optimizer_variables& v) const {
    const Derived& self = static_cast<const Derived&>(*this);
    const std::int64_t every = options.gradient_accumulation_steps;
    const std::size_t need = (self.slots() + (options.use_ema ? 1 : 0) + (every ? 1 : 0)) * n;
    if (v.slots.size() != need && (v.slots.size() != 0 || v.iterations != 0))
      throw value_error(self.name() + ": the restored optimizer state has " + std::to_string(v.slots.size()) +
                        " slot values but this model needs " + std::to_string(need));
    const float lr = options.learning_rate(v.iterations);
    ++v.iterations;
    return self.step(lr, every ? (v.iterations - 1) / every + 1 : v.iterations);
  }
  /// The optimizer's own variables (replica 0's under a mirrored strategy).
  optimizer_variables& variables() { return vars_; }

 private:
  optimizer_variables vars_;
};

/// An optimizer of any type, held by value (what `compile` stores).
class any_optimizer : public detail::gradient_steps<any_optimizer> {
 public:
  any_optimizer() = default;
  template <class O>
    requires optimizer_algorithm<O> && (!std::same_as<std::remove_cvref_t<O>, any_optimizer>)
  any_optimizer(O o) : self_(std::make_unique<model_t<O>>(std::move(o))) {}
  any_optimizer(const any_optimizer& o) : gradient_steps(o), self_(o.self_ ? o.self_->clone() : nullptr) {}
  any_optimizer& operator=(const any_optimizer& o) {
    if (this != &o) {
      gradient_steps::operator=(o);
      self_ = o.self_ ? o.self_->clone() : nullptr;
    }
    return *this;
  }
  any_optimizer(any_optimizer&&) noexcept = default;
  any_optimizer& operator=(any_optimizer&&) noexcept = default;

  explicit operator bool() const { return self_ != nullptr; }
  /// The optimizer held, if it is an `O` (as `std::function::target`).
  template <class O>
  const O* target() const {
    const auto* m = dynamic_cast<const model_t<O>*>(self_.get());
    return m ? &m->o_ : nullptr;
  }
  template <class O>
  O* target() {
    auto* m = dynamic_cast<model_t<O>*>(self_.get());
    return m ? &m->o_ : nullptr;
  }
  std::string name() const { return self_->name(); }
  float learning_rate() const { return self_->learning_rate(); }
  void set_learning_rate(float lr) { self_->set_learning_rate(lr); }
  bool learning_rate_is_constant() const { return self_->learning_rate_is_constant(); }
  std::int64_t iterations() const { return self_->iterations(); }
  optimizer_state state() const { return self_->state(); }
  void set_state(optimizer_state s) {
    self_->set_state(std::move(s));
    variables_replaced();
  }
  optimizer_op begin_step(std::size_t n, optimizer_variables& v) const { return self_->begin_step(n, v); }
  optimizer_variables& variables() { return self_->variables(); }
  std::size_t slots() const { return self_->slots(); }
  bool use_ema() const { return self_->use_ema(); }
  std::optional<op::ema> ema_step(std::int64_t iterations) const { return self_->ema_step(iterations); }
  gradient_clipping clipping() const { return self_->clipping(); }
  std::int64_t gradient_accumulation_steps() const { return self_->gradient_accumulation_steps(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual optimizer_op begin_step(std::size_t n, optimizer_variables& v) const = 0;
    virtual optimizer_variables& variables() = 0;
    virtual std::size_t slots() const = 0;
    virtual bool use_ema() const = 0;
    virtual std::optional<op::ema> ema_step(std::int64_t) const = 0;
    virtual gradient_clipping clipping() const = 0;
    virtual std::int64_t gradient_accumulation_steps() const = 0;
    virtual float learning_rate() const = 0;
    virtual void set_learning_rate(float) = 0;
    virtual bool learning_rate_is_constant() const = 0;
    virtual std::int64_t iterations() const = 0;
    virtual optimizer_state state() const = 0;
    virtual void set_state(optimizer_state) = 0;
    virtual std::unique_ptr<concept_t> clone() const = 0;
  };
  template <class O>
  struct model_t final : concept_t {
    explicit model_t(O o) : o_(std::move(o)) {}
    std::string name() const override { return o_.name(); }
    optimizer_op begin_step(std::size_t n, optimizer_variables& v) const override { return o_.begin_step(n, v); }
    optimizer_variables& variables() override { return o_.variables(); }
    std::size_t slots() const override { return o_.slots(); }
    bool use_ema() const override { return o_.use_ema(); }
    std::optional<op::ema> ema_step(std::int64_t t) const override { return o_.ema_step(t); }
    gradient_clipping clipping() const override { return o_.clipping(); }
    std::int64_t gradient_accumulation_steps() const override { return o_.gradient_accumulation_steps(); }
    float learning_rate() const override { return o_.learning_rate(); }
    void set_learning_rate(float lr) override { o_.set_learning_rate(lr); }
    bool learning_rate_is_constant() const override { return o_.learning_rate_is_constant(); }
    std::int64_t iterations() const override { return o_.iterations(); }
    optimizer_state state() const override { return o_.state(); }
    void set_state(optimizer_state s) override { o_.set_state(std::move(s)); }
    std::unique_ptr<concept_t> clone() const override { return std::make_unique<model_t>(o_); }
    O o_;
  };
  std::unique_ptr<concept_t> self_;
};

}  // namespace dtrain
