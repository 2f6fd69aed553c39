#pragma once
/// \file
/// The loss seam and reductions. (`compute_average_loss` and `scale_regularization_loss`, which read the
/// strategy in scope, are in distribute/replica_context.hpp.)
///
/// Loss contract (`loss_function`): `name()` is the Keras name and `get_reduction()` its reduction. A loss
/// computes one value per row of `y_pred` (a row is one position of its last axis, so a batch of class
/// scores (n, c) has n rows) and, when asked, `scale` times the gradient of each row's loss with respect
/// to `y_pred`, in one of two ways:
/// - on the model's backend: `kernel()` returns the `loss_op` every backend implements, and
///   `validate(y_true, y_pred)` checks on the host, before any kernel runs, that `y_true` (data and
///   extents) fits `y_pred` (extents only), throwing `shape_error` / `value_error` that name the loss
///   and both shapes (the built-in losses);
/// - on the host: `per_example(y_true, y_pred, losses, d_pred, scale)` validates and computes on host
///   views (a loss of the user's own; a model on another backend hands it host copies).

#include <cmath>
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/backend/cpu/losses.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/view.hpp"

namespace dtrain {

/// How per-example losses become one number (Keras' `reduction=`).
enum class reduction { none, sum, sum_over_batch_size };

/// A loss computed by the backend's kernel.
template <class L>
concept kernel_loss = requires(const L& l, batch_view v) {
  { l.kernel() } -> std::convertible_to<loss_op>;
  l.validate(v, v);
};

/// A loss computed on the host.
template <class L>
concept host_loss = requires(const L& l, batch_view v, float* p, float s) { l.per_example(v, v, p, p, s); };

template <class L>
concept loss_function = requires(const L& l) {
  { l.name() } -> std::convertible_to<std::string>;
  { l.get_reduction() } -> std::same_as<reduction>;
} && (kernel_loss<L> || host_loss<L>);

namespace detail {
/// Number of rows (loss values) a prediction batch yields.
inline std::size_t loss_rows(batch_view y_pred) { return y_pred.size() / std::max<std::size_t>(1, y_pred.last()); }

/// Per-row losses (and scaled gradients when `d` is not null) of host views, on the host.
template <loss_function L>
void host_per_example(const L& l, batch_view t, batch_view p, float* losses, float* d, float scale) {
  if constexpr (kernel_loss<L>) {
    l.validate(t, p);
    std::visit([&](const auto& o) { loss_kernel(o, loss_rows(p), p.last(), scale, t.data, p.data, losses, d); },
               loss_op(l.kernel()));
  } else {
    l.per_example(t, p, losses, d, scale);
  }
}

/// Shared `__call__` of every loss: reduces the per-row losses as its reduction says.
template <class L>
tensor call_loss(const L& l, const tensor& y_true, const tensor& y_pred) {
  const extents et = extents_of(y_true), ep = extents_of(y_pred);
  const batch_view t{y_true.data(), et}, p{y_pred.data(), ep};
  std::vector<float> per(loss_rows(p));
  host_per_example(l, t, p, per.data(), nullptr, 1.0f);
  if (l.get_reduction() == reduction::none) return from_span(per, {per.size()});
  double s = 0.0;
  for (float v : per) s += v;
  if (l.get_reduction() == reduction::sum_over_batch_size && !per.empty()) s /= static_cast<double>(per.size());
  tensor out = xt::zeros<float>(std::vector<std::size_t>{});
  out() = static_cast<float>(s);
  return out;
}

/// Checks that `y_true` holds one value per prediction value (categorical, binary, mse).
inline void require_same_size(const char* loss, batch_view t, batch_view p) {
  if (t.size() != p.size() || t.batch() != p.batch())
    throw shape_error(std::string(loss) + ": y_true shape " + t.str() + " does not match y_pred shape " + p.str());
}
}  // namespace detail

/// A loss of any type, held by value (what `compile` stores).
class any_loss {
 public:
  any_loss() = default;
  template <loss_function L>
    requires(!std::same_as<std::remove_cvref_t<L>, any_loss>)
  any_loss(L l) : self_(std::make_shared<model_t<L>>(std::move(l))) {}

  explicit operator bool() const { return self_ != nullptr; }
  /// The loss held, if it is an `L` (as `std::function::target`).
  template <class L>
  const L* target() const {
    const auto* m = dynamic_cast<const model_t<L>*>(self_.get());
    return m ? &m->l_ : nullptr;
  }
  std::string name() const { return self_->name(); }
  reduction get_reduction() const { return self_->get_reduction(); }
  /// The backend kernel, or nothing for a loss computed on the host.
  std::optional<loss_op> kernel() const { return self_->kernel(); }
  /// Checks a batch before the kernel runs (a host loss checks in `per_example`).
  void validate(batch_view t, batch_view p) const { self_->validate(t, p); }
  /// Per-row losses and scaled gradients of host views, on the host.
  void per_example(batch_view t, batch_view p, float* losses, float* d_pred, float scale) const {
    self_->per_example(t, p, losses, d_pred, scale);
  }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual reduction get_reduction() const = 0;
    virtual std::optional<loss_op> kernel() const = 0;
    virtual void validate(batch_view, batch_view) const = 0;
    virtual void per_example(batch_view, batch_view, float*, float*, float) const = 0;
  };
  template <class L>
  struct model_t final : concept_t {
    explicit model_t(L l) : l_(std::move(l)) {}
    std::string name() const override { return l_.name(); }
    reduction get_reduction() const override { return l_.get_reduction(); }
    std::optional<loss_op> kernel() const override {
      if constexpr (kernel_loss<L>) return l_.kernel();
      else return std::nullopt;
    }
    void validate(batch_view t, batch_view p) const override {
      if constexpr (kernel_loss<L>) l_.validate(t, p);
    }
    void per_example(batch_view t, batch_view p, float* o, float* d, float s) const override {
      detail::host_per_example(l_, t, p, o, d, s);
    }
    L l_;
  };
  std::shared_ptr<const concept_t> self_;
};

}  // namespace dtrain
