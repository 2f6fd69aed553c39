#pragma once
/// \file
/// `dense<Units, Activation, Options...>`: Keras `layers.Dense`. `y = activation(x . kernel + bias)`
/// along the last axis, kernel (in, units) and bias (units) as Keras stores them. Options: a kernel
/// regularizer (`l2<0.01f>`).

#include <algorithm>
#include <cstring>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"

namespace dtrain {

template <std::size_t Units, class Activation = linear, class... Options>
struct dense {
  static_assert(Units > 0, "dense: units must be positive");
  static_assert(detail::activation_policy<Activation>,
                "dense: the second argument must be an activation (relu, sigmoid, tanh, softmax, gelu, linear)");
  static_assert((detail::is_regularizer<Options>::value && ...),
                "dense: options must be regularizers such as l2<0.01f>");
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;

  template <class In>
  struct bind {
    static_assert(In::rank >= 1, "dense: the input needs at least one axis");
    using input_shape = In;
    using output_shape = typename detail::replace_last<In, Units>::type;
    static constexpr const char* keras_name = "dense";
    static constexpr const char* class_name = "Dense";
    static constexpr std::size_t in = In::dims[In::rank - 1];
    static constexpr std::size_t rows_per_sample = In::size / in;
    static constexpr std::array<param_spec, 2> params{{{"kernel", 2, {in, Units, 0, 0}}, {"bias", 1, {Units, 0, 0, 0}}}};

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(in * Units), in, Units, r);
      std::fill(p.begin() + in * Units, p.end(), 0.0f);
    }

    template <class Ctx>
    void forward(Ctx& ctx, const float* x, float* y, std::size_t n, std::span<const float> p) {
      const std::size_t m = n * rows_per_sample;
      const float* w = p.data();
      const float* b = w + in * Units;
      for (std::size_t r = 0; r < m; ++r) std::memcpy(y + r * Units, b, Units * sizeof(float));
      ctx.device.gemm(transpose::no, transpose::no, m, Units, in, 1.0f, x, in, w, Units, 1.0f, y, Units);
      if constexpr (Activation::needs_input) std::memcpy(detail::ensure(z_, m * Units), y, m * Units * sizeof(float));
      Activation::forward(y, m, Units);
    }

    template <class Ctx>
    void backward(Ctx& ctx, const float* x, const float* y, float* dy, float* dx, std::size_t n,
                  std::span<const float> p, std::span<float> g) {
      const std::size_t m = n * rows_per_sample;
      Activation::backward(z_.data(), y, dy, m, Units);  // dy now holds d loss / d z
      const float* w = p.data();
      float* gw = g.data();
      float* gb = gw + in * Units;
      ctx.device.gemm(transpose::yes, transpose::no, in, Units, m, 1.0f, x, in, dy, Units, 0.0f, gw, Units);
      std::fill(gb, gb + Units, 0.0f);
      for (std::size_t r = 0; r < m; ++r)
        for (std::size_t u = 0; u < Units; ++u) gb[u] += dy[r * Units + u];
      if (dx) ctx.device.gemm(transpose::no, transpose::yes, m, in, Units, 1.0f, dy, Units, w, Units, 0.0f, dx, in);
    }

    float regularization(std::span<const float> p, std::span<float> g, float scale) const {
      return regularizer::apply(p.first(in * Units), g.first(in * Units), scale);
    }

   private:
    std::vector<float> z_;  // pre-activations, kept only for activations that need them
  };
};

}  // namespace dtrain
