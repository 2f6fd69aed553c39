#pragma once
/// \file
/// `layer_normalization<Epsilon>`: Keras `layers.LayerNormalization(axis=-1, epsilon=Epsilon)`. Each
/// position's last axis is normalised to mean 0 and variance 1 (the biased variance, as Keras), then
/// scaled by `gamma` and shifted by `beta` (Keras' order and names; initialised to ones and zeros).

#include <algorithm>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <float Epsilon = 1e-3f>
struct layer_normalization {
  static_assert(Epsilon > 0.0f, "layer_normalization: epsilon must be positive");

  template <class In, class B>
  struct bind {
    static_assert(In::rank >= 1, "layer_normalization: the input needs at least one axis");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "layer_normalization";
    static constexpr const char* class_name = "LayerNormalization";
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

}  // namespace dtrain
