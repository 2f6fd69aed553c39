#pragma once
/// \file
/// `dropout<Rate>`: Keras `layers.Dropout(rate)`. In training each value is zeroed with probability
/// `Rate` and the survivors are scaled by 1 / (1 - Rate); at inference it is the identity. Each training
/// pass draws one key from the model's seeded generator and the backend derives the mask from it
/// (core/random.hpp: counter-based), so a seed fixes the masks on every backend.

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <float Rate>
struct dropout {
  static_assert(Rate >= 0.0f && Rate < 1.0f, "dropout: the rate must be in [0, 1)");

  template <class In, class B>
  struct bind : detail::no_params {
    static_assert(regularization_kernels<B>, "dropout: the backend lacks the regularization kernels (regularization_kernels)");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "dropout";
    static constexpr const char* class_name = "Dropout";

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
      const std::size_t e = n * In::size;
      training_ = ctx.training && Rate > 0.0f;
      if (training_)
        ctx.device.dropout(e, Rate, ctx.random.next(), x, y, ensure(ctx.device, mask_, e));
      else
        ctx.device.copy(e, x, y);
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
    buffer_t<B, float> mask_;
    bool training_ = false;
  };
};

}  // namespace dtrain
