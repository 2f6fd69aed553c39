#pragma once
/// \file
/// `conv2d_transpose<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv2DTranspose`, channels
/// last: the adjoint of a conv2d whose input has this layer's output shape, so strides s grow the image
/// s-fold. Kernel (kh, kw, filters, in_channels) and bias (filters) as Keras stores them. Options:
/// `strides<...>`, `padding::valid` (default; output (in - 1) s + span, or in s when the span is smaller)
/// / `padding::same` (output in s), `output_padding<...>`, `dilation_rate<...>`, `use_bias<false>`, a
/// regularizer (of the kernel).

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"
#include "dtrain/layers/window.hpp"

namespace dtrain {

/// Keras' `output_padding` of conv2d_transpose: the output is (in - 1) stride + span - 2 (span / 2, under
/// padding::same) + H rows (and likewise W columns), each smaller than the stride along its axis. Which
/// rows the extra ones are follows TF's padding rule for that output size (valid: added at the bottom,
/// reached by no tap; same: the crop moves).
template <std::size_t H, std::size_t W = H>
struct output_padding {
  static constexpr bool is_output_padding = true;
  static constexpr std::size_t h = H, w = W;
};

namespace detail {
template <class T, class = void>
struct is_output_padding : std::false_type {};
template <class T>
struct is_output_padding<T, std::void_t<decltype(T::is_output_padding)>> : std::true_type {};
struct no_output_padding {  // Keras' None: the output length by the padding alone
  static constexpr std::size_t h = 0, w = 0;
};
}  // namespace detail

template <std::size_t Filters, kernel_size Kernel, class Activation = linear, class... Options>
struct conv2d_transpose {
  static_assert(Filters > 0 && Kernel.positive(), "conv2d_transpose: filters and kernel size must be positive");
  static_assert(detail::activation_policy<Activation>,
                "conv2d_transpose: the third argument must be an activation (relu, sigmoid, tanh, softmax, gelu, "
                "linear)");
  static_assert(((detail::is_regularizer<Options>::value || detail::is_strides<Options>::value ||
                  detail::is_padding<Options>::value || detail::is_use_bias<Options>::value ||
                  detail::is_dilation_rate<Options>::value || detail::is_output_padding<Options>::value ||
                  detail::is_bias_regularizer<Options>::value || detail::is_activity_regularizer<Options>::value) &&
                 ...),
                "conv2d_transpose: options are strides<...>, padding::valid | padding::same, output_padding<...>, "
                "dilation_rate<...>, use_bias<false>, regularizers such as l2<>, bias_regularizer<...> and "
                "activity_regularizer<...>");
  using stride_type = typename detail::find_option<detail::is_strides, strides<1>, Options...>::type;
  using padding_type = typename detail::find_option<detail::is_padding, padding::valid, Options...>::type;
  static_assert(!padding_type::is_causal, "padding::causal is conv1d's only");
  using dilation_type = typename detail::find_option<detail::is_dilation_rate, dilation_rate<1>, Options...>::type;
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;
  using bias_regularizer = detail::bias_regularizer_of<Options...>;
  using output_padding_type =
      typename detail::find_option<detail::is_output_padding, detail::no_output_padding, Options...>::type;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;
  static_assert(bias || !bias_regularizer::active, "conv2d_transpose: a bias_regularizer needs the bias (not use_bias<false>)");
  static constexpr bool padded = detail::is_output_padding<output_padding_type>::value;
  static constexpr bool padding_below_strides =
      output_padding_type::h < stride_type::h && output_padding_type::w < stride_type::w;
  static_assert(padding_below_strides,
                "conv2d_transpose: output_padding must be smaller than the strides along each axis (as in Keras)");

  /// Keras' output length along one axis (deconv_output_length).
  static constexpr std::size_t output_length(std::size_t in, std::size_t taps, std::size_t stride,
                                             std::size_t dilation, std::size_t extra) {
    const std::size_t span = (taps - 1) * dilation + 1;
    if (padded) return (in - 1) * stride + span - (padding_type::is_same ? span / 2 * 2 : 0) + extra;
    return padding_type::is_same ? in * stride : in * stride + (span > stride ? span - stride : 0);
  }

  template <class In, class B>
  struct bind {
    using activity_regularizer = detail::activity_regularizer_of<Options...>;
    static_assert(window_kernels<B>, "conv2d_transpose: the backend lacks the window kernels (window_kernels)");
    static_assert(In::rank == 3,
                  "conv2d_transpose expects a rank-3 input (height, width, channels); add dtrain::reshape<h, w, c> "
                  "before it");
    static constexpr std::size_t c = In::dims[2];
    using output_shape =
        shape<output_length(In::dims[0], Kernel.h, stride_type::h, dilation_type::h, output_padding_type::h),
              output_length(In::dims[1], Kernel.w, stride_type::w, dilation_type::w, output_padding_type::w), Filters>;
    // the convolution this layer is the adjoint of: from the output back to the input
    using geo = detail::window2d<output_shape, detail::window_layer::conv2d_transpose, Kernel, stride_type,
                                 padding_type, dilation_type>;
    static_assert(!padding_below_strides || (geo::oh == In::dims[0] && geo::ow == In::dims[1]),
                  "conv2d_transpose: with this output_padding, a convolution of the output with these strides "
                  "and padding does not give back the input's size (TF rejects it too): under padding::same "
                  "with an even kernel span, output_padding must be at least 1");
    using input_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "conv2d_transpose";
    static constexpr const char* class_name = "Conv2DTranspose";
    template <class C>
    static void get_config(C& c) {
      c.set("filters", Filters);
      detail::window_config<Kernel, stride_type, padding_type>(c, "kernel_size");
      if constexpr (padded)
        c.set("output_padding", std::array<std::size_t, 2>{output_padding_type::h, output_padding_type::w});
      else
        c.set("output_padding", nullptr);
      c.set("dilation_rate", std::array<std::size_t, 2>{dilation_type::h, dilation_type::w});
      c.set("activation", Activation::name);
      c.set("use_bias", bias);
      detail::regularizers_config<regularizer, bias_regularizer, activity_regularizer>(c);
    }
    static constexpr window_geometry window = geo::with_outputs(c);
    static constexpr activation_kind act = Activation::kind;
    static constexpr std::size_t kernel_values = window.kernel_values();
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 4, {Kernel.h, Kernel.w, Filters, c}};
      if constexpr (bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {Filters, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(kernel_values), Kernel.h * Kernel.w * Filters, Kernel.h * Kernel.w * c, r);
      std::fill(p.begin() + kernel_values, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const ptr z = needs_input(act) ? ensure(dev, z_, n * output_shape::size) : ptr{};
      const ptr work = ensure(dev, work_, dev.template conv2d_transpose_workspace<window>(n));
      dev.template conv2d_transpose_forward<window, act>(n, x, p, bias ? p + kernel_values : cptr{}, y, z, work);
    }

    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      ctx.device.template conv2d_transpose_backward<window, act>(n, x, z_.data(), y, dy, p, work_.data(), g,
                                                                 bias ? g + kernel_values : ptr{}, dx);
    }

    void regularization(layer_context<B>& ctx, cptr p, ptr g, float scale, ptr penalty) const {
      regularizer::apply(ctx.device, kernel_values, p, g, scale, penalty);
      if constexpr (bias_regularizer::active)
        bias_regularizer::apply(ctx.device, Filters, p + kernel_values, g ? g + kernel_values : ptr{}, scale, penalty);
    }

   private:
    buffer_t<B, float> z_, work_;  // pre-activations (when the activation needs them); im2col rows
  };
};

}  // namespace dtrain
