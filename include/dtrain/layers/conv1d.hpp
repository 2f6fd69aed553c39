#pragma once
/// \file
/// `conv1d<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv1D` over (steps, channels);
/// `max_pooling1d<Pool>` / `average_pooling1d<Pool>` (Keras `MaxPooling1D` / `AveragePooling1D`) and
/// `global_average_pooling1d<>` / `global_max_pooling1d<>` (Keras `GlobalAveragePooling1D` /
/// `GlobalMaxPooling1D`) over the steps. A sequence is an image of one row: conv1d is conv2d's kernels over
/// (1, steps, channels) with a (1, Kernel) window, its kernel (Kernel, in_channels / groups, filters) as
/// Keras stores it. Options: `strides<S>`, `padding::valid` (default) / `padding::same` /
/// `padding::causal` (output step t sees input steps up to t), `dilation_rate<D>`, `groups<G>`,
/// `use_bias<false>`, regularizers, as conv2d's.

#include <array>
#include <vector>

#include "dtrain/layers/conv2d.hpp"
#include "dtrain/layers/pooling.hpp"

namespace dtrain {

namespace detail {
/// A sequence (steps, channels) as the one-row image (1, steps, channels) the 2-D kernels take.
template <class In>
using one_row = shape<1, In::dims[0], (In::rank == 2 ? In::dims[1] : 1)>;
}  // namespace detail

template <std::size_t Filters, std::size_t Kernel, class Activation = linear, class... Options>
struct conv1d {
  using conv = conv2d<Filters, kernel_size{1, Kernel}, Activation, Options..., detail::conv1d_window>;

  template <class In, class B>
  struct bind : conv::template bind<detail::one_row<In>, B> {
    static_assert(In::rank == 2, "conv1d expects a rank-2 input (steps, channels)");
    using base = typename conv::template bind<detail::one_row<In>, B>;
    using input_shape = In;
    using output_shape = shape<base::geo::ow, Filters>;
    static constexpr const char* keras_name = "conv1d";
    static constexpr const char* class_name = "Conv1D";
    template <class C>
    static void get_config(C& c) {
      c.set("filters", Filters);
      detail::window_config<kernel_size{1, Kernel}, typename conv::stride_type, typename conv::padding_type>(
          c, "kernel_size", true);
      c.set("dilation_rate", std::array<std::size_t, 1>{conv::dilation_type::w});
      c.set("groups", conv::group_count);
      c.set("activation", Activation::name);
      c.set("use_bias", conv::bias);
      detail::regularizers_config<typename conv::regularizer, typename conv::bias_regularizer,
                                  typename base::activity_regularizer>(c);
    }
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 3, {Kernel, base::geo::c / conv::group_count, Filters, 0}};
      if constexpr (conv::bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {Filters, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();
  };
};

namespace detail {
/// Max or average pooling over windows of Pool steps: pooling2d over (1, steps, c) with a (1, Pool) window.
template <bool Max, std::size_t Pool, class... Options>
struct pooling1d {
  using pool2d = pooling2d<Max, kernel_size{1, Pool}, Options...>;

  template <class In, class B>
  struct bind : pool2d::template bind<one_row<In>, B> {
    static_assert(In::rank == 2, "pooling 1D expects a rank-2 input (steps, channels)");
    using geo = typename pool2d::template geo<one_row<In>>;
    using input_shape = In;
    using output_shape = shape<geo::ow, geo::c>;
    static constexpr const char* keras_name = Max ? "max_pooling1d" : "average_pooling1d";
    static constexpr const char* class_name = Max ? "MaxPooling1D" : "AveragePooling1D";
    template <class C>
    static void get_config(C& c) {
      window_config<kernel_size{1, Pool}, typename pool2d::stride_type, typename pool2d::padding_type>(c, "pool_size",
                                                                                                       true);
    }
  };
};

/// One window over all steps: global_pooling2d over (1, steps, c); (c), or (1, c) with KeepDims. The
/// average of a masked input is Keras': the mean of each sample's unmasked steps (a sample whose every
/// step is masked: 0, where Keras divides by zero).
template <bool Max, bool KeepDims>
struct global_pooling1d {
  template <class In, class B>
  struct bind : global_pooling2d<Max, KeepDims>::template bind<one_row<In>, B> {
    static_assert(In::rank == 2, "global pooling 1D: the input must be (steps, channels)");
    using base = typename global_pooling2d<Max, KeepDims>::template bind<one_row<In>, B>;
    using input_shape = In;
    using output_shape = std::conditional_t<KeepDims, shape<1, one_row<In>::dims[2]>, shape<one_row<In>::dims[2]>>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = Max ? "global_max_pooling1d" : "global_average_pooling1d";
    static constexpr const char* class_name = Max ? "GlobalMaxPooling1D" : "GlobalAveragePooling1D";
    static constexpr bool supports_masking = !Max, keeps_mask = false;
    static constexpr std::size_t steps = In::dims[0], c = one_row<In>::dims[2];

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const step_mask<B> m = ctx.mask();
      if (!m) return base::forward(ctx, x, y, n, p);
      const B& dev = ctx.device;
      // each sample's mean over its unmasked steps: y_i = w_i x_i, w_i = m_i / (its count)
      weights_.resize(n * steps);
      for (std::size_t i = 0; i < n; ++i) {
        float count = 0.0f;
        for (std::size_t t = 0; t < steps; ++t) count += m.host[i * steps + t];
        for (std::size_t t = 0; t < steps; ++t) weights_[i * steps + t] = count > 0.0f ? m.host[i * steps + t] / count : 0.0f;
      }
      const ptr w = ensure(dev, weights_dev_, n * steps);
      dev.upload(n * steps, static_cast<const float*>(weights_.data()), w);
      for (std::size_t i = 0; i < n; ++i)
        dev.gemm(transpose::no, transpose::no, 1, c, steps, 1.0f, cptr(w + i * steps), steps, x + i * steps * c, c, 0.0f,
                 y + i * c, c);
    }
    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      if (!ctx.mask()) return base::backward(ctx, x, y, dy, dx, n, p, g);
      if (!dx) return;
      for (std::size_t i = 0; i < n; ++i)  // dx_i = w_i^T dy_i
        ctx.device.gemm(transpose::no, transpose::no, steps, c, 1, 1.0f, cptr(weights_dev_.data() + i * steps), 1,
                        cptr(dy + i * c), c, 0.0f, dx + i * steps * c, c);
    }

   private:
    std::vector<float> weights_;
    buffer_t<B, float> weights_dev_;
  };
};
}  // namespace detail

/// Keras `layers.MaxPooling1D(pool_size)`: `max_pooling1d<2>`; options `strides<S>` (default the pool
/// size) and `padding::valid | padding::same`.
template <std::size_t Pool = 2, class... Options>
struct max_pooling1d : detail::pooling1d<true, Pool, Options...> {};

/// Keras `layers.AveragePooling1D(pool_size)` (same padding: the mean of the steps inside the input).
template <std::size_t Pool = 2, class... Options>
struct average_pooling1d : detail::pooling1d<false, Pool, Options...> {};

/// Keras `layers.GlobalMaxPooling1D(keepdims=KeepDims)`.
template <bool KeepDims = false>
struct global_max_pooling1d : detail::global_pooling1d<true, KeepDims> {};

/// Keras `layers.GlobalAveragePooling1D(keepdims=KeepDims)`.
template <bool KeepDims = false>
struct global_average_pooling1d : detail::global_pooling1d<false, KeepDims> {};

}  // namespace dtrain
