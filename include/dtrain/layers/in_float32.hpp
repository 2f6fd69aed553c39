#pragma once
/// \file
/// `in_float32<L>`: layer L computing in float32 under any dtype policy, Keras' `dtype="float32"` on a
/// layer (`layers.Dense(10, dtype="float32")`) in a mixed-precision model: it reads its inputs and weights
/// uncast, its GEMMs multiply float32, and its weight gradients stay float32. Everything else is L's
/// (shapes, names, weights, Keras config). The usual use is a model's last layers, where Keras' guide
/// keeps the softmax and what feeds the loss in float32 (dtrain keeps the model's outputs float32
/// anyway), or a layer whose values need float32's range.

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <class L>
struct in_float32 {
  static_assert(!requires { L::merge; }, "in_float32: merge layers (add, multiply, concatenate) are not supported");
  template <class In, class B>
  struct bind : bind_t<L, In, B> {
    using base = bind_t<L, In, B>;
    using base::base;
    static constexpr bool autocast = false;  // (layers/concepts.hpp: the model casts nothing for it)
    static constexpr const char* dtype_policy_name = "float32";  // its policy in Keras files
  };
};

}  // namespace dtrain
