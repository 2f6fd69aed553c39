#pragma once
/// \file
/// `layer_normalization<Epsilon>`: Keras `layers.LayerNormalization(axis=-1, epsilon=Epsilon)`. Each
/// position's last axis is normalised to mean 0 and variance 1 (the biased variance, as Keras), then
/// scaled by `gamma` and shifted by `beta` (Keras' order and names; initialised to ones and zeros).
///
/// `batch_normalization<{.momentum, .epsilon, .synchronized}>`: Keras `layers.BatchNormalization(axis=-1)`.
/// In training each channel (the last axis) is normalised by the batch's mean and biased variance, and
/// the moving statistics (non-trainable `moving_mean`, `moving_variance`, initialised to zeros and ones)
/// move towards them: moving = moving momentum + batch (1 - momentum). At inference the moving statistics
/// normalise. Under a strategy, by default each replica normalises by its own rows (Keras'
/// synchronized=False) and the replicas' batch statistics are averaged (weighted by their rows) before
/// the moving update, so every replica keeps the same moving statistics: what TF's mean-aggregated
/// mirrored variables hold. With `.synchronized = true` the statistics (and their gradients) are those of
/// the global batch, summed across replicas: N workers with a global batch B compute what one worker
/// computes with B.

#include <algorithm>
#include <vector>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <float Epsilon = 1e-3f>
struct layer_normalization {
  static_assert(Epsilon > 0.0f, "layer_normalization: epsilon must be positive");

  template <class In, class B>
  struct bind {
    static_assert(normalization_kernels<B>, "layer_normalization: the backend lacks the normalization kernels (normalization_kernels)");
    static_assert(In::rank >= 1, "layer_normalization: the input needs at least one axis");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "layer_normalization";
    static constexpr bool supports_masking = true;  // each step on its own
    static constexpr bool autocast = false;  // statistics in float32 (Keras' normalization layers)
    static constexpr const char* class_name = "LayerNormalization";
    template <class C>
    static void get_config(C& c) {
      c.set("axis", std::array<int, 1>{-1});  // Keras keeps a list
      c.set("epsilon", Epsilon);
      c.set("center", true);
      c.set("scale", true);
    }
    static constexpr std::size_t features = In::dims[In::rank - 1];
    static constexpr std::size_t rows_per_sample = In::size / features;
    static constexpr std::array<param_spec, 2> params{
        {{"gamma", 1, {features, 0, 0, 0}}, {"beta", 1, {features, 0, 0, 0}}}};

    void initialize(std::span<float> p, rng&) {
      std::fill_n(p.begin(), features, 1.0f);
      std::fill(p.begin() + features, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const std::size_t rows = n * rows_per_sample;
      ctx.device.layer_normalization_forward(rows, features, Epsilon, x, p, p + features, y,
                                             ensure(ctx.device, xhat_, rows * features),
                                             ensure(ctx.device, inv_std_, rows));
    }

    /// dx from the saved normalised values; then beta's gradient (the column sums of dy) and gamma's
    /// (of dy xhat, formed in place of xhat, which the next forward rewrites).
    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t rows = n * rows_per_sample;
      if (dx) dev.layer_normalization_backward(rows, features, xhat_.data(), inv_std_.data(), p, dy, dx);
      dev.column_sums(rows, features, dy, g + features);
      dev.multiply(rows * features, dy, xhat_.data(), xhat_.data());
      dev.column_sums(rows, features, xhat_.data(), g);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    buffer_t<B, float> xhat_, inv_std_;  // what forward computed, for backward
  };
};

/// Keras `BatchNormalization`'s keyword arguments (axis is -1, center and scale are on).
struct batch_normalization_options {
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  bool synchronized = false;
};

template <batch_normalization_options O = {}>
struct batch_normalization {
  static_assert(O.momentum >= 0.0f && O.momentum <= 1.0f, "batch_normalization: momentum must be in [0, 1]");
  static_assert(O.epsilon > 0.0f, "batch_normalization: epsilon must be positive");

  template <class In, class B>
  struct bind {
    static_assert(normalization_kernels<B>, "batch_normalization: the backend lacks the normalization kernels (normalization_kernels)");
    static_assert(In::rank >= 1, "batch_normalization: the input needs at least one axis");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "batch_normalization";
    static constexpr bool autocast = false;  // statistics in float32 (Keras' normalization layers)
    static constexpr const char* class_name = "BatchNormalization";
    template <class C>
    static void get_config(C& c) {
      c.set("axis", -1);
      c.set("momentum", O.momentum);
      c.set("epsilon", O.epsilon);
      c.set("center", true);
      c.set("scale", true);
      c.set("synchronized", O.synchronized);
    }
    static constexpr std::size_t c = In::dims[In::rank - 1];
    static constexpr std::size_t rows_per_sample = In::size / c;
    static constexpr std::array<param_spec, 2> params{{{"gamma", 1, {c, 0, 0, 0}}, {"beta", 1, {c, 0, 0, 0}}}};
    static constexpr std::array<param_spec, 2> state{
        {{"moving_mean", 1, {c, 0, 0, 0}}, {"moving_variance", 1, {c, 0, 0, 0}}}};

    void initialize(std::span<float> p, rng&) {
      std::fill_n(p.begin(), c, 1.0f);
      std::fill(p.begin() + c, p.end(), 0.0f);
    }
    void initialize_state(std::span<float> s) {
      std::fill_n(s.begin(), c, 0.0f);
      std::fill(s.begin() + c, s.end(), 1.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t rows = n * rows_per_sample;
      const ptr xhat = ensure(dev, xhat_, rows * c), inv_std = ensure(dev, inv_std_, c);
      training_ = ctx.training;
      if (!training_) {
        dev.batch_normalization_forward(rows, c, O.epsilon, x, ctx.state, ctx.state + c, p, p + c, y, xhat, inv_std);
        return;
      }
      statistics(ctx, x, rows);
      dev.batch_normalization_forward(rows, c, O.epsilon, x, moments_.data(), moments_.data() + c, p, p + c, y, xhat,
                                      inv_std);
      update_moving(ctx, rows);
    }

    /// The parameters' gradients (column sums of dy xhat and of dy), then dx through the batch statistics
    /// (the global batch's when synchronised; the moving ones, held fixed, after an inference forward).
    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t rows = n * rows_per_sample;
      dev.batch_normalization_gradient_sums(rows, c, dy, xhat_.data(), g);
      if (!dx) return;
      if (!training_)
        return dev.batch_normalization_backward(rows, c, 0.0f, xhat_.data(), inv_std_.data(), p, cptr{}, dy, dx);
      cptr sums = g;
      if constexpr (O.synchronized) {
        dev.copy(2 * c, g, ensure(dev, sums_, 2 * c));
        sum_over_replicas(ctx, sums_.data(), 2 * c, 0.0f);
        sums = sums_.data();
      }
      dev.batch_normalization_backward(rows, c, 1.0f / count_, xhat_.data(), inv_std_.data(), p, sums, dy, dx);
    }

    /// A replica without rows in a training step: its part of forward's collectives, and the same
    /// moving update as the others.
    void join_forward(layer_context<B>& ctx) {
      if constexpr (O.synchronized) statistics(ctx, cptr{}, 0);
      else ensure(ctx.device, moments_, 2 * c);
      update_moving(ctx, 0);
    }
    /// Its part of backward's (the sums of the input gradient, synchronised only).
    void join_backward(layer_context<B>& ctx, bool dx) {
      if (!O.synchronized || !dx) return;
      ctx.device.fill(2 * c, 0.0f, ensure(ctx.device, sums_, 2 * c));
      sum_over_replicas(ctx, sums_.data(), 2 * c, 0.0f);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    /// The batch's mean and biased variance per channel into `moments_` (two passes over x; over every
    /// replica's rows when synchronised) and their row count into `count_`.
    void statistics(layer_context<B>& ctx, cptr x, std::size_t rows) {
      const B& dev = ctx.device;
      const ptr sums = ensure(dev, sums_, 2 * c), m = ensure(dev, moments_, 2 * c);
      if (rows) dev.column_sums(rows, c, x, sums);
      else dev.fill(c, 0.0f, sums);
      count_ = O.synchronized ? sum_over_replicas(ctx, sums, c, float(rows)) : float(rows);
      dev.fill(2 * c, 0.0f, m);
      dev.axpy(c, 1.0f / count_, sums, m);
      if (rows) dev.squared_deviation_sums(rows, c, x, m, sums + c);
      else dev.fill(c, 0.0f, sums + c);
      if constexpr (O.synchronized) sum_over_replicas(ctx, sums + c, c, 0.0f);
      dev.axpy(c, 1.0f / count_, sums + c, m + c);
    }

    /// moving = moving momentum + batch (1 - momentum), with the replicas' batch moments averaged first
    /// (weighted by their rows) when each computed its own.
    void update_moving(layer_context<B>& ctx, std::size_t rows) {
      const B& dev = ctx.device;
      if (!O.synchronized && ctx.replicas.count > 1) {
        host_.assign(2 * c + 1, 0.0f);
        if (rows) dev.download(2 * c, cptr(moments_.data()), host_.data());
        for (std::size_t i = 0; i < 2 * c; ++i) host_[i] *= float(rows);
        host_[2 * c] = float(rows);
        ctx.replicas.sum(host_);
        for (std::size_t i = 0; i < 2 * c; ++i) host_[i] /= host_[2 * c];
        dev.upload(2 * c, static_cast<const float*>(host_.data()), moments_.data());
      }
      dev.moving_average(2 * c, O.momentum, moments_.data(), ctx.state);
    }

    /// Sums k values at p over the replicas (through host memory) and `extra` with them; returns extra's sum.
    float sum_over_replicas(layer_context<B>& ctx, ptr p, std::size_t k, float extra) {
      if (ctx.replicas.count == 1) return extra;
      host_.resize(k + 1);
      ctx.device.download(k, cptr(p), host_.data());
      host_[k] = extra;
      ctx.replicas.sum(host_);
      ctx.device.upload(k, static_cast<const float*>(host_.data()), p);
      return host_[k];
    }

    buffer_t<B, float> xhat_, inv_std_;           // forward's normalised values and 1 / std
    buffer_t<B, float> sums_, moments_;           // the batch's sums and (mean, variance) per channel
    std::vector<float> host_;                     // values on their way through a collective
    float count_ = 0.0f;                          // rows the batch statistics came from
    bool training_ = false;
  };
};

}  // namespace dtrain
