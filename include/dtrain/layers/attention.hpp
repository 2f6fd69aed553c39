#pragma once
/// \file
/// `multi_head_attention<NumHeads, KeyDim, Options...>`: Keras `layers.MultiHeadAttention` as
/// self-attention, Keras' `mha(x, x)`: the query, key and value are the same sequence (steps, features).
/// Per head h: q = x Wq[h] + bq[h], k = x Wk[h] + bk[h], v = x Wv[h] + bv[h], the scores
/// q k^T / sqrt(KeyDim) (with `use_causal_mask<true>`, Keras' call argument, step t attends to steps up
/// to t only: later scores get Keras' large negative addend -1e9), softmax along each row, the heads'
/// weighted values side by side, and y = that Wo + bo, of the input's width.
/// Variables as Keras stores them: query, key and value kernels (features, heads, key_dim) and biases
/// (heads, key_dim) (value_dim for the value's), the output kernel (heads, value_dim, features) and bias.
/// Options: `value_dim<V>` (default KeyDim), `use_bias<false>`, `use_causal_mask<true>`.
///
/// Computed unfused: per sample and head, three GEMMs of the backend and its row softmax; the scores
/// (steps x steps per head) are kept for backward.

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/concepts.hpp"

namespace dtrain {

/// Keras MultiHeadAttention's `value_dim`: the width of each head's values (default: key_dim).
template <std::size_t V>
struct value_dim {
  static_assert(V > 0, "value_dim: must be positive");
  static constexpr bool is_value_dim = true;
  static constexpr std::size_t value = V;
};

/// Keras' `use_causal_mask=True` (a call argument there): step t attends to steps 0..t only.
template <bool Use>
struct use_causal_mask {
  static constexpr bool is_use_causal_mask = true;
  static constexpr bool value = Use;
};

namespace detail {
template <class T, class = void>
struct is_value_dim : std::false_type {};
template <class T>
struct is_value_dim<T, std::void_t<decltype(T::is_value_dim)>> : std::true_type {};
template <class T, class = void>
struct is_use_causal_mask : std::false_type {};
template <class T>
struct is_use_causal_mask<T, std::void_t<decltype(T::is_use_causal_mask)>> : std::true_type {};
/// What Keras adds to a masked score before the softmax (float32's `_large_negative_number`).
inline constexpr float masked_score = -1e9f;
}  // namespace detail

template <std::size_t NumHeads, std::size_t KeyDim, class... Options>
struct multi_head_attention {
  static_assert(NumHeads > 0 && KeyDim > 0, "multi_head_attention: num_heads and key_dim must be positive");
  static_assert(((detail::is_value_dim<Options>::value || detail::is_use_bias<Options>::value ||
                  detail::is_use_causal_mask<Options>::value) &&
                 ...),
                "multi_head_attention: options are value_dim<V>, use_bias<false> and use_causal_mask<true>");
  static constexpr std::size_t heads = NumHeads, key_dim = KeyDim;
  static constexpr std::size_t val_dim =
      detail::find_option<detail::is_value_dim, value_dim<KeyDim>, Options...>::type::value;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;
  static constexpr bool causal =
      detail::find_option<detail::is_use_causal_mask, use_causal_mask<false>, Options...>::type::value;

  template <class In, class B>
  struct bind {
    static_assert(activation_kernels<B>, "multi_head_attention: the backend lacks the activation kernels");
    static_assert(In::rank == 2, "multi_head_attention expects a rank-2 input (steps, features)");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "multi_head_attention";
    static constexpr const char* class_name = "MultiHeadAttention";
    static constexpr std::size_t steps = In::dims[0], d = In::rank == 2 ? In::dims[1] : 1;
    static constexpr std::size_t hk = heads * key_dim, hv = heads * val_dim;
    // where each variable starts in the layer's parameters (Keras' order)
    static constexpr std::size_t wq = 0, bq = wq + d * hk, wk = bq + (bias ? hk : 0), bk = wk + d * hk,
                                 wv = bk + (bias ? hk : 0), bv = wv + d * hv, wo = bv + (bias ? hv : 0),
                                 bo = wo + hv * d, end = bo + (bias ? d : 0);
    template <class C>
    static void get_config(C& c) {
      c.set("num_heads", heads);
      c.set("key_dim", key_dim);
      c.set("value_dim", val_dim);
      c.set("dropout", 0.0f);
      c.set("use_bias", bias);
    }
    // Keras keeps them in its four EinsumDense sublayers: layers/multi_head_attention/query_dense/vars/0...
    static constexpr auto params = [] {
      constexpr param_spec q{"query/kernel", 3, {d, heads, key_dim, 0}, "query_dense/vars/0"},
          k{"key/kernel", 3, {d, heads, key_dim, 0}, "key_dense/vars/0"},
          v{"value/kernel", 3, {d, heads, val_dim, 0}, "value_dense/vars/0"},
          o{"attention_output/kernel", 3, {heads, val_dim, d, 0}, "output_dense/vars/0"};
      if constexpr (bias)
        return std::array<param_spec, 8>{q, {"query/bias", 2, {heads, key_dim, 0, 0}, "query_dense/vars/1"},
                                         k, {"key/bias", 2, {heads, key_dim, 0, 0}, "key_dense/vars/1"},
                                         v, {"value/bias", 2, {heads, val_dim, 0, 0}, "value_dense/vars/1"},
                                         o, {"attention_output/bias", 1, {d, 0, 0, 0}, "output_dense/vars/1"}};
      else return std::array<param_spec, 4>{q, k, v, o};
    }();

    /// Keras' glorot_uniform on each kernel of rank 3 (fans: its last two axes times the first).
    void initialize(std::span<float> p, rng& r) {
      std::fill(p.begin(), p.end(), 0.0f);
      detail::glorot_uniform(p.subspan(wq, d * hk), d * heads, d * key_dim, r);
      detail::glorot_uniform(p.subspan(wk, d * hk), d * heads, d * key_dim, r);
      detail::glorot_uniform(p.subspan(wv, d * hv), d * heads, d * val_dim, r);
      detail::glorot_uniform(p.subspan(wo, hv * d), heads * val_dim, heads * d, r);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t m = n * steps;
      const ptr q = ensure(dev, q_, m * hk), k = ensure(dev, k_, m * hk), v = ensure(dev, v_, m * hv);
      const ptr s = ensure(dev, scores_, n * heads * steps * steps), o = ensure(dev, o_, m * hv);
      project(dev, m, d, hk, x, p + wq, p + bq, q);
      project(dev, m, d, hk, x, p + wk, p + bk, k);
      project(dev, m, d, hv, x, p + wv, p + bv, v);
      const ptr mask = causal ? causal_mask(dev) : ptr{};
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t h = 0; h < heads; ++h) {
          const ptr sh = s + (i * heads + h) * steps * steps;
          dev.gemm(transpose::no, transpose::yes, steps, steps, key_dim, scale, cptr(q + i * steps * hk + h * key_dim), hk,
                   cptr(k + i * steps * hk + h * key_dim), hk, 0.0f, sh, steps);
          if constexpr (causal) dev.axpy(steps * steps, 1.0f, cptr(mask), sh);
        }
      dev.template activation_forward<activation_kind::softmax>(n * heads * steps, steps, s, s);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t h = 0; h < heads; ++h)
          dev.gemm(transpose::no, transpose::no, steps, val_dim, steps, 1.0f, cptr(s + (i * heads + h) * steps * steps),
                   steps, cptr(v + i * steps * hv + h * val_dim), hv, 0.0f, o + i * steps * hv + h * val_dim, hv);
      project(dev, m, hv, d, o, p + wo, p + bo, y);
    }

    void backward(layer_context<B>& ctx, cptr x, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t m = n * steps;
      const ptr q = q_.data(), k = k_.data(), v = v_.data(), s = scores_.data();
      const ptr dq = ensure(dev, dq_, m * hk), dk = ensure(dev, dk_, m * hk), dv = ensure(dev, dv_, m * hv);
      const ptr dout = ensure(dev, do_, m * hv), ds = ensure(dev, ds_, steps * steps);
      // y = o Wo + bo
      dev.gemm(transpose::yes, transpose::no, hv, d, m, 1.0f, cptr(o_.data()), hv, cptr(dy), d, 0.0f, g + wo, d);
      if constexpr (bias) dev.column_sums(m, d, dy, g + bo);
      dev.gemm(transpose::no, transpose::yes, m, hv, d, 1.0f, cptr(dy), d, p + wo, d, 0.0f, dout, hv);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t h = 0; h < heads; ++h) {
          const cptr ph = s + (i * heads + h) * steps * steps;
          const std::size_t at_k = i * steps * hk + h * key_dim, at_v = i * steps * hv + h * val_dim;
          // o = P v: dP = do v^T, dv = P^T do
          dev.gemm(transpose::no, transpose::yes, steps, steps, val_dim, 1.0f, cptr(dout + at_v), hv, cptr(v + at_v), hv,
                   0.0f, ds, steps);
          dev.gemm(transpose::yes, transpose::no, steps, val_dim, steps, 1.0f, ph, steps, cptr(dout + at_v), hv, 0.0f,
                   dv + at_v, hv);
          // P = softmax(S), S = scale q k^T (a masked score's probability is 0: so is its gradient)
          dev.template activation_backward<activation_kind::softmax>(steps, steps, ph, ph, ds, ds);
          dev.gemm(transpose::no, transpose::no, steps, key_dim, steps, scale, cptr(ds), steps, cptr(k + at_k), hk, 0.0f,
                   dq + at_k, hk);
          dev.gemm(transpose::yes, transpose::no, steps, key_dim, steps, scale, cptr(ds), steps, cptr(q + at_k), hk, 0.0f,
                   dk + at_k, hk);
        }
      project_backward(dev, m, hk, x, dq, p + wq, g + wq, g + bq, dx, false);
      project_backward(dev, m, hk, x, dk, p + wk, g + wk, g + bk, dx, true);
      project_backward(dev, m, hv, x, dv, p + wv, g + wv, g + bv, dx, true);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    /// Keras' 1 / sqrt(key_dim) (its query is scaled by it; here the scores, as the GEMM's alpha).
    inline static const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim)));

    /// out (m x cols) = in (m x width) w (width x cols) + b.
    static void project(const B& dev, std::size_t m, std::size_t width, std::size_t cols, cptr in, cptr w, cptr b,
                        ptr out) {
      if constexpr (bias) dev.broadcast_rows(m, cols, b, out);
      dev.gemm(transpose::no, transpose::no, m, cols, width, 1.0f, in, width, w, cols, bias ? 1.0f : 0.0f, out, cols);
    }
    /// The gradients of a projection of x (m x d) to `cols` columns from its output's, `dz`; dx gets
    /// dz w^T, added to what it holds when `add`.
    static void project_backward(const B& dev, std::size_t m, std::size_t cols, cptr x, ptr dz, cptr w, ptr gw, ptr gb,
                                 ptr dx, bool add) {
      dev.gemm(transpose::yes, transpose::no, d, cols, m, 1.0f, x, d, cptr(dz), cols, 0.0f, gw, cols);
      if constexpr (bias) dev.column_sums(m, cols, dz, gb);
      if (dx) dev.gemm(transpose::no, transpose::yes, m, d, cols, 1.0f, cptr(dz), cols, w, cols, add ? 1.0f : 0.0f, dx, d);
    }
    /// The causal addend (steps x steps: 0 on and below the diagonal, Keras' large negative above), made
    /// once (its host copy lives on with the layer, as an upload a recording backend replays reads it).
    ptr causal_mask(const B& dev) {
      if (mask_host_.empty()) {
        mask_host_.assign(steps * steps, 0.0f);
        for (std::size_t t = 0; t < steps; ++t)
          for (std::size_t u = t + 1; u < steps; ++u) mask_host_[t * steps + u] = detail::masked_score;
        mask_ = dev.template allocate<float>(steps * steps);
        dev.upload(mask_host_.size(), static_cast<const float*>(mask_host_.data()), mask_.data());
      }
      return mask_.data();
    }

    buffer_t<B, float> q_, k_, v_, scores_, o_, dq_, dk_, dv_, do_, ds_, mask_;
    std::vector<float> mask_host_;
  };
};

}  // namespace dtrain
