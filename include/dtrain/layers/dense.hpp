#pragma once
/// \file
/// `dense<Units, Activation, Options...>`: Keras `layers.Dense`. `y = activation(x . kernel + bias)`
/// along the last axis, kernel (in, units) and bias (units) as Keras stores them. Options: a kernel
/// regularizer (`l2<0.01f>`), a bias regularizer (`bias_regularizer<l1<0.01f>>`), an activity regularizer
/// (`activity_regularizer<l2<0.01f>>`), `use_bias<false>` (no bias variable).

#include <algorithm>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"

namespace dtrain {

template <std::size_t Units, class Activation = linear, class... Options>
struct dense {
  static_assert(Units > 0, "dense: units must be positive");
  static_assert(detail::activation_policy<Activation>,
                "dense: the second argument must be an activation (relu, sigmoid, tanh, softmax, gelu, linear)");
  static_assert(((detail::is_regularizer<Options>::value || detail::is_use_bias<Options>::value ||
                  detail::is_bias_regularizer<Options>::value || detail::is_activity_regularizer<Options>::value) &&
                 ...),
                "dense: options are use_bias<false>, regularizers such as l2<0.01f>, bias_regularizer<...> and "
                "activity_regularizer<...>");
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;
  using bias_regularizer = detail::bias_regularizer_of<Options...>;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;
  static_assert(bias || !bias_regularizer::active, "dense: a bias_regularizer needs the bias (not use_bias<false>)");

  template <class In, class B>
  struct bind {
    using activity_regularizer = detail::activity_regularizer_of<Options...>;
    static_assert(activation_kernels<B>, "dense: the backend lacks the activation kernels (activation_kernels)");
    static_assert(In::rank >= 1, "dense: the input needs at least one axis");
    using input_shape = In;
    using output_shape = typename detail::replace_last<In, Units>::type;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "dense";
    static constexpr bool supports_masking = true;  // over the last axis: the steps' mask carries on
    static constexpr const char* class_name = "Dense";
    static constexpr std::size_t in = In::dims[In::rank - 1];
    static constexpr std::size_t rows_per_sample = In::size / in;
    static constexpr activation_kind act = Activation::kind;
    template <class C>
    static void get_config(C& c) {
      c.set("units", Units);
      c.set("activation", Activation::name);
      c.set("use_bias", bias);
      detail::regularizers_config<regularizer, bias_regularizer, activity_regularizer>(c);
    }
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 2, {in, Units, 0, 0}};
      if constexpr (bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {Units, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(in * Units), in, Units, r);
      std::fill(p.begin() + in * Units, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t m = n * rows_per_sample;
      if constexpr (bias) dev.broadcast_rows(m, Units, p + in * Units, y);
      dev.gemm(transpose::no, transpose::no, m, Units, in, 1.0f, x, in, p, Units, bias ? 1.0f : 0.0f, y, Units);
      if constexpr (needs_input(act)) dev.copy(m * Units, y, ensure(dev, z_, m * Units));
      dev.template activation_forward<act>(m, Units, y, y);
    }

    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t m = n * rows_per_sample;
      dev.template activation_backward<act>(m, Units, z_.data(), y, dy, dy);  // dy now holds d loss / d z
      dev.gemm(transpose::yes, transpose::no, in, Units, m, 1.0f, x, in, dy, Units, 0.0f, g, Units);
      if constexpr (bias) dev.column_sums(m, Units, dy, g + in * Units);
      if (dx) dev.gemm(transpose::no, transpose::yes, m, in, Units, 1.0f, dy, Units, p, Units, 0.0f, dx, in);
    }

    void regularization(layer_context<B>& ctx, cptr p, ptr g, float scale, ptr penalty) const {
      regularizer::apply(ctx.device, in * Units, p, g, scale, penalty);
      if constexpr (bias_regularizer::active)
        bias_regularizer::apply(ctx.device, Units, p + in * Units, g ? g + in * Units : ptr{}, scale, penalty);
    }

   private:
    buffer_t<B, float> z_;  // pre-activations, kept only for activations that need them
  };
};

}  // namespace dtrain
