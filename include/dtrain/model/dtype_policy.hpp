#pragma once
/// \file
/// `dtype_policy`: Keras' `keras.DTypePolicy` ("float32", "mixed_bfloat16", "mixed_float16"), the
/// precision a model computes in. Under a mixed policy the variables (weights, optimizer slots) stay
/// float32 and layers compute in the policy's compute dtype, as Keras' layers do: a layer reads its
/// inputs and its weights cast to bfloat16 or float16, its output is cast to that type, and so is the
/// gradient that flows back into it and the gradient of its weights; the loss is computed in float32 on
/// float32 outputs (the model's output layers keep theirs, the cast Keras' guide asks for by hand).
/// Layers that compute in float32 whatever the policy (Keras' normalization layers; an embedding, whose
/// inputs are indices) say `autocast = false`: their inputs and weights are read as they are.
///
/// Values are cast by rounding each float to the nearest value of the compute dtype and keeping it in a
/// float (the backend's `round_to`): products of such values are exact in float32, and every kernel
/// accumulates in float32, so a GEMM gives what a bfloat16 or float16 GEMM with float32 accumulation
/// gives; elementwise work is done in float32 and then rounded.

#include <string>
#include <string_view>

#include "dtrain/core/error.hpp"
#include "dtrain/core/float16.hpp"

namespace dtrain {

class dtype_policy {
 public:
  /// Keras' default, "float32".
  constexpr dtype_policy() = default;
  /// By Keras' name: "float32", "mixed_bfloat16" or "mixed_float16"; any other is a config_error.
  explicit dtype_policy(std::string_view name) {
    if (name == "mixed_bfloat16") compute_ = dtype::bfloat16;
    else if (name == "mixed_float16") compute_ = dtype::float16;
    else if (name != "float32")
      throw config_error("dtype policy \"" + std::string(name) +
                         "\": expected float32, mixed_bfloat16 or mixed_float16");
  }
  static constexpr dtype_policy mixed_bfloat16() { return dtype_policy(dtype::bfloat16); }
  static constexpr dtype_policy mixed_float16() { return dtype_policy(dtype::float16); }

  constexpr const char* name() const {
    return compute_ == dtype::bfloat16 ? "mixed_bfloat16" : compute_ == dtype::float16 ? "mixed_float16" : "float32";
  }
  /// The type layers compute in, and the type variables are kept in (always float32).
  constexpr dtype compute_dtype() const { return compute_; }
  constexpr dtype variable_dtype() const { return dtype::float32; }
  /// Whether layers compute in another type than their variables'.
  constexpr bool mixed() const { return compute_ != dtype::float32; }
  friend constexpr bool operator==(dtype_policy, dtype_policy) = default;

 private:
  constexpr explicit dtype_policy(dtype compute) : compute_(compute) {}
  dtype compute_ = dtype::float32;
};

}  // namespace dtrain
