#pragma once
/// \file
/// `dropout<Rate>`: Keras `layers.Dropout(rate)`. In training each value is zeroed with probability
/// `Rate` and the survivors are scaled by 1 / (1 - Rate); at inference it is the identity. The mask
/// comes from the model's seeded generator, so a seed fixes it.

#include <cstring>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <float Rate>
struct dropout {
  static_assert(Rate >= 0.0f && Rate < 1.0f, "dropout: the rate must be in [0, 1)");

  template <class In>
  struct bind : detail::no_params {
    using input_shape = In;
    using output_shape = In;
    static constexpr const char* keras_name = "dropout";
    static constexpr const char* class_name = "Dropout";

    template <class Ctx>
    void forward(Ctx& ctx, const float* x, float* y, std::size_t n, std::span<const float>) {
      const std::size_t e = n * In::size;
      training_ = ctx.training && Rate > 0.0f;
      if (!training_) {
        std::memcpy(y, x, e * sizeof(float));
        return;
      }
      float* mask = detail::ensure(mask_, e);
      constexpr float keep_scale = 1.0f / (1.0f - Rate);
      for (std::size_t i = 0; i < e; ++i) {
        mask[i] = ctx.random.uniform() >= Rate ? keep_scale : 0.0f;
        y[i] = x[i] * mask[i];
      }
    }

    template <class Ctx>
    void backward(Ctx&, const float*, const float*, float* dy, float* dx, std::size_t n, std::span<const float>,
                  std::span<float>) {
      if (!dx) return;
      const std::size_t e = n * In::size;
      if (!training_) {
        std::memcpy(dx, dy, e * sizeof(float));
        return;
      }
      for (std::size_t i = 0; i < e; ++i) dx[i] = dy[i] * mask_[i];
    }

   private:
    std::vector<float> mask_;
    bool training_ = false;
  };
};

}  // namespace dtrain
