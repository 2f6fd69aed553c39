#pragma once
/// \file
/// `dropout<Rate>`: Keras `layers.Dropout(rate)`. In training each value is zeroed with probability
/// `Rate` and the survivors are scaled by 1 / (1 - Rate); at inference it is the identity. Each training
/// pass draws one key from the model's seeded generator and the backend derives the mask from it
/// (core/random.hpp: counter-based), so a seed fixes the masks on every backend.
/// `spatial_dropout2d<Rate>`: Keras `layers.SpatialDropout2D(rate)`, channels last: the same, one draw
/// per (sample, channel), so a dropped channel is zero over the whole image (neighbouring pixels of a
/// feature map are correlated: dropping them one by one regularises little).

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {
/// A bound dropout layer over input In; with PerChannel, one mask value per (sample, channel) of an
/// (h, w, c) input, repeated over its pixels.
template <float Rate, bool PerChannel, class In, class B>
struct dropout_layer : no_params {
  static_assert(regularization_kernels<B>, "dropout: the backend lacks the regularization kernels (regularization_kernels)");
  static_assert(!PerChannel || In::rank == 3,
                "spatial_dropout2d expects a rank-3 input (height, width, channels)");
  using input_shape = In;
  using output_shape = In;
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr std::size_t channels = PerChannel ? In::dims[In::rank - 1] : In::size;

  void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
    const B& dev = ctx.device;
    const std::size_t e = n * In::size;
    training_ = ctx.training && Rate > 0.0f;
    if (!training_) return dev.copy(e, x, y);
    const ptr mask = ensure(dev, mask_, e);
    if constexpr (!PerChannel) {
      dev.dropout(e, Rate, ctx.random.next(), x, y, mask);
    } else {  // the mask of n x channels ones (kept: 1 / (1 - Rate)), then repeated over the pixels
      const std::size_t m = n * channels;
      const ptr ones = ensure(dev, draws_, 3 * m), kept = ones + m;
      dev.fill(m, 1.0f, ones);
      dev.dropout(m, Rate, ctx.random.next(), ones, kept, kept + m);
      for (std::size_t s = 0; s < n; ++s)
        dev.broadcast_rows(In::size / channels, channels, kept + s * channels, mask + s * In::size);
      dev.multiply(e, x, mask, y);
    }
  }

  void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
    if (!dx) return;
    const std::size_t e = n * In::size;
    if (training_)
      ctx.device.multiply(e, dy, mask_.data(), dx);
    else
      ctx.device.copy(e, dy, dx);
  }

 private:
  buffer_t<B, float> mask_, draws_;
  bool training_ = false;
};
}  // namespace detail

template <float Rate>
struct dropout {
  static_assert(Rate >= 0.0f && Rate < 1.0f, "dropout: the rate must be in [0, 1)");
  template <class In, class B>
  struct bind : detail::dropout_layer<Rate, false, In, B> {
    static constexpr const char* keras_name = "dropout";
    static constexpr const char* class_name = "Dropout";
    static constexpr bool supports_masking = true;
    template <class C>
    static void get_config(C& c) {
      c.set("rate", Rate);
    }
  };
};

template <float Rate>
struct spatial_dropout2d {
  static_assert(Rate >= 0.0f && Rate < 1.0f, "spatial_dropout2d: the rate must be in [0, 1)");
  template <class In, class B>
  struct bind : detail::dropout_layer<Rate, true, In, B> {
    static constexpr const char* keras_name = "spatial_dropout2d";
    static constexpr const char* class_name = "SpatialDropout2D";
    template <class C>
    static void get_config(C& c) {
      c.set("rate", Rate);
      c.set("data_format", "channels_last");
    }
  };
};

}  // namespace dtrain
