#pragma once
/// \file
/// `multi_head_attention<NumHeads, KeyDim, Options...>`: Keras `layers.MultiHeadAttention`. With one
/// input it is self-attention, Keras' `mha(x, x)`: the query, key and value are the same sequence (steps,
/// features); in a functional model's node of two or three sources it is Keras' `mha(query, value)` /
/// `mha(query, value, key)`, the key and value of their own length and widths.
/// Per head h: q = query Wq[h] + bq[h], k = key Wk[h] + bk[h], v = value Wv[h] + bv[h], the scores
/// q k^T / sqrt(KeyDim) (with `use_causal_mask<true>`, Keras' call argument, query step t attends to key
/// steps up to t only: later scores get Keras' large negative addend -1e9), softmax along each row, the
/// heads' weighted values side by side, and y = that Wo + bo, of the query's width.
/// Variables as Keras stores them: query, key and value kernels (their input's features, heads, key_dim)
/// and biases (heads, key_dim) (value_dim for the value's), the output kernel (heads, value_dim, query
/// features) and bias.
/// Options: `value_dim<V>` (default KeyDim), `use_bias<false>`, `use_causal_mask<true>`, `dropout<Rate>`
/// (Keras' `dropout=`: in training, the attention probabilities dropped before they weigh the values).
/// Masked inputs (after `embedding<..., mask_zero<true>>`) mask as Keras' do: query step t attends to
/// key step u only where both are real steps (and u <= t when causal); a padded query step's
/// probabilities are all 0 (Keras' masked softmax), and the output carries the query's mask.
///
/// Computed unfused: per sample and head, three GEMMs of the backend and its row softmax; the scores
/// (query steps x key steps per head) are kept for backward.

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/dropout.hpp"

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
/// Keras MultiHeadAttention's `dropout=`: the option `dropout<Rate>`.
template <class T>
struct is_dropout_option : std::false_type {
  static constexpr float rate = 0.0f;
};
template <float Rate>
struct is_dropout_option<dropout<Rate>> : std::true_type {
  static constexpr float rate = Rate;
};
/// What Keras adds to a masked score before the softmax (float32's `_large_negative_number`).
inline constexpr float masked_score = -1e9f;
/// The key's shape in `mha(query, value, key...)`: the key's when given, else the value's.
template <class V, class... K>
using key_shape_t = std::tuple_element_t<sizeof...(K), std::tuple<V, K...>>;
template <class S>
inline constexpr std::size_t last_extent_v = S::dims[S::rank - 1];
}  // namespace detail

namespace detail {
/// The attention of Tq queries of width Dq over Tk keys of width Dk and values of width Dv (what
/// self-attention and cross-attention share; Spec is the multi_head_attention spec). Inputs and their
/// gradients are (n, T, D) each; the output is (n, Tq, Dq).
template <class Spec, class B, std::size_t Tq, std::size_t Dq, std::size_t Tk, std::size_t Dk, std::size_t Dv>
struct attention_core {
  static_assert(activation_kernels<B>, "multi_head_attention: the backend lacks the activation kernels");
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr std::size_t heads = Spec::heads, key_dim = Spec::key_dim, val_dim = Spec::val_dim;
  static constexpr bool bias = Spec::bias, causal = Spec::causal;
  static constexpr float rate = Spec::dropout_rate;
  static_assert(rate == 0.0f || regularization_kernels<B>, "multi_head_attention: dropout needs the regularization kernels");
  static constexpr const char* keras_name = "multi_head_attention";
  static constexpr const char* class_name = "MultiHeadAttention";
  static constexpr std::size_t hk = heads * key_dim, hv = heads * val_dim;
  // where each variable starts in the layer's parameters (Keras' order)
  static constexpr std::size_t wq = 0, bq = wq + Dq * hk, wk = bq + (bias ? hk : 0), bk = wk + Dk * hk,
                               wv = bk + (bias ? hk : 0), bv = wv + Dv * hv, wo = bv + (bias ? hv : 0),
                               bo = wo + hv * Dq, end = bo + (bias ? Dq : 0);
  template <class C>
  static void get_config(C& c) {
    c.set("num_heads", heads);
    c.set("key_dim", key_dim);
    c.set("value_dim", val_dim);
    c.set("dropout", rate);
    c.set("use_bias", bias);
  }
  /// How Keras calls it, for its files: the inputs as the arguments query, value (and key), and
  /// use_causal_mask a keyword argument of the call, not of the config.
  static constexpr std::array<const char*, 3> keras_call_inputs{"query", "value", "key"};
  template <class C>
  static void call_config(C& c) {
    c.set("use_causal_mask", causal);
  }
  // Keras keeps them in its four EinsumDense sublayers: layers/multi_head_attention/query_dense/vars/0...
  static constexpr auto params = [] {
    constexpr param_spec q{"query/kernel", 3, {Dq, heads, key_dim, 0}, "query_dense/vars/0"},
        k{"key/kernel", 3, {Dk, heads, key_dim, 0}, "key_dense/vars/0"},
        v{"value/kernel", 3, {Dv, heads, val_dim, 0}, "value_dense/vars/0"},
        o{"attention_output/kernel", 3, {heads, val_dim, Dq, 0}, "output_dense/vars/0"};
    if constexpr (bias)
      return std::array<param_spec, 8>{q, {"query/bias", 2, {heads, key_dim, 0, 0}, "query_dense/vars/1"},
                                       k, {"key/bias", 2, {heads, key_dim, 0, 0}, "key_dense/vars/1"},
                                       v, {"value/bias", 2, {heads, val_dim, 0, 0}, "value_dense/vars/1"},
                                       o, {"attention_output/bias", 1, {Dq, 0, 0, 0}, "output_dense/vars/1"}};
    else return std::array<param_spec, 4>{q, k, v, o};
  }();

  /// Keras' glorot_uniform on each kernel of rank 3 (fans: its last two axes times the first).
  void initialize(std::span<float> p, rng& r) {
    std::fill(p.begin(), p.end(), 0.0f);
    glorot_uniform(p.subspan(wq, Dq * hk), Dq * heads, Dq * key_dim, r);
    glorot_uniform(p.subspan(wk, Dk * hk), Dk * heads, Dk * key_dim, r);
    glorot_uniform(p.subspan(wv, Dv * hv), Dv * heads, Dv * val_dim, r);
    glorot_uniform(p.subspan(wo, hv * Dq), heads * val_dim, heads * Dq, r);
  }

  /// The attention of the query xq over the key xk and value xv; the masks (each perhaps empty) are the
  /// inputs' (query, key, value).
  void attend(layer_context<B>& ctx, cptr xq, cptr xk, cptr xv, ptr y, std::size_t n, cptr p, step_mask<B> mq_mask,
              step_mask<B> mk_mask, step_mask<B> mv_mask) {
    const B& dev = ctx.device;
    const std::size_t mq = n * Tq, mk = n * Tk;
    const ptr q = ensure(dev, q_, mq * hk), k = ensure(dev, k_, mk * hk), v = ensure(dev, v_, mk * hv);
    const ptr s = ensure(dev, scores_, n * heads * Tq * Tk), o = ensure(dev, o_, mq * hv);
    project(dev, mq, Dq, hk, xq, p + wq, p + bq, q);
    project(dev, mk, Dk, hk, xk, p + wk, p + bk, k);
    project(dev, mk, Dv, hv, xv, p + wv, p + bv, v);
    const bool masked = mq_mask || mk_mask || mv_mask;
    if (masked) sample_masks(dev, n, mq_mask, mk_mask, mv_mask);
    const ptr mask = causal && !masked ? causal_mask(dev) : ptr{};
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t h = 0; h < heads; ++h) {
        const ptr sh = s + (i * heads + h) * Tq * Tk;
        dev.gemm(transpose::no, transpose::yes, Tq, Tk, key_dim, scale, cptr(q + i * Tq * hk + h * key_dim), hk,
                 cptr(k + i * Tk * hk + h * key_dim), hk, 0.0f, sh, Tk);
        if (masked) dev.axpy(Tq * Tk, 1.0f, cptr(mask_add_.data() + i * Tq * Tk), sh);
        else if (causal) dev.axpy(Tq * Tk, 1.0f, cptr(mask), sh);
      }
    dev.template activation_forward<activation_kind::softmax>(n * heads * Tq, Tk, s, s);
    // Keras' masked softmax zeroes the masked probabilities after it (a padded query's whole row); the
    // backward of this product is the softmax's of the rows kept
    if (masked)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t h = 0; h < heads; ++h)
          dev.multiply(Tq * Tk, cptr(s + (i * heads + h) * Tq * Tk), cptr(mask_mul_.data() + i * Tq * Tk),
                       s + (i * heads + h) * Tq * Tk);
    // Keras' dropout of the probabilities in training (the values take the dropped ones; the softmax's
    // backward the kept ones)
    dropped_ = rate > 0.0f && ctx.training;
    cptr weights = s;
    if constexpr (rate > 0.0f)
      if (dropped_) {
        const std::size_t e = n * heads * Tq * Tk;
        const ptr d = ensure(dev, dropped_scores_, 2 * e);
        dev.dropout(e, rate, ctx.random.next(), cptr(s), d, d + e);
        weights = d;
      }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t h = 0; h < heads; ++h)
        dev.gemm(transpose::no, transpose::no, Tq, val_dim, Tk, 1.0f, cptr(weights + (i * heads + h) * Tq * Tk), Tk,
                 cptr(v + i * Tk * hv + h * val_dim), hv, 0.0f, o + i * Tq * hv + h * val_dim, hv);
    project(dev, mq, hv, Dq, o, p + wo, p + bo, y);
  }

  /// The gradients from dy: the parameters' into g and each wanted input's (a null one is not), added
  /// to what it holds when its `add` flag says so (an input that is also another's: self-attention).
  void attend_backward(layer_context<B>& ctx, cptr xq, cptr xk, cptr xv, ptr dy, ptr dxq, ptr dxk, bool add_k, ptr dxv,
                       bool add_v, std::size_t n, cptr p, ptr g) {
    const B& dev = ctx.device;
    const std::size_t mq = n * Tq, mk = n * Tk;
    const ptr q = q_.data(), k = k_.data(), v = v_.data(), s = scores_.data();
    const std::size_t e = n * heads * Tq * Tk;
    const cptr dropped = dropped_ ? cptr(dropped_scores_.data()) : cptr(s), keep = dropped_ ? dropped + e : cptr{};
    const ptr dq = ensure(dev, dq_, mq * hk), dk = ensure(dev, dk_, mk * hk), dv = ensure(dev, dv_, mk * hv);
    const ptr dout = ensure(dev, do_, mq * hv), ds = ensure(dev, ds_, Tq * Tk);
    // y = o Wo + bo
    dev.gemm(transpose::yes, transpose::no, hv, Dq, mq, 1.0f, cptr(o_.data()), hv, cptr(dy), Dq, 0.0f, g + wo, Dq);
    if constexpr (bias) dev.column_sums(mq, Dq, dy, g + bo);
    dev.gemm(transpose::no, transpose::yes, mq, hv, Dq, 1.0f, cptr(dy), Dq, p + wo, Dq, 0.0f, dout, hv);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t h = 0; h < heads; ++h) {
        const cptr ph = s + (i * heads + h) * Tq * Tk;
        const std::size_t qk = i * Tq * hk + h * key_dim, kk = i * Tk * hk + h * key_dim, ov = i * Tq * hv + h * val_dim,
                          vv = i * Tk * hv + h * val_dim;
        // o = P' v (P' = P, or P dropped): dP' = do v^T, dv = P'^T do; dP = dP' times the dropout's factors
        dev.gemm(transpose::no, transpose::yes, Tq, Tk, val_dim, 1.0f, cptr(dout + ov), hv, cptr(v + vv), hv, 0.0f, ds, Tk);
        dev.gemm(transpose::yes, transpose::no, Tk, val_dim, Tq, 1.0f, dropped + (i * heads + h) * Tq * Tk, Tk,
                 cptr(dout + ov), hv, 0.0f, dv + vv, hv);
        if (keep) dev.multiply(Tq * Tk, cptr(ds), keep + (i * heads + h) * Tq * Tk, ds);
        // P = softmax(S), S = scale q k^T (a masked score's probability is 0: so is its gradient)
        dev.template activation_backward<activation_kind::softmax>(Tq, Tk, ph, ph, ds, ds);
        dev.gemm(transpose::no, transpose::no, Tq, key_dim, Tk, scale, cptr(ds), Tk, cptr(k + kk), hk, 0.0f, dq + qk, hk);
        dev.gemm(transpose::yes, transpose::no, Tk, key_dim, Tq, scale, cptr(ds), Tk, cptr(q + qk), hk, 0.0f, dk + kk, hk);
      }
    project_backward(dev, mq, Dq, hk, xq, dq, p + wq, g + wq, g + bq, dxq, false);
    project_backward(dev, mk, Dk, hk, xk, dk, p + wk, g + wk, g + bk, dxk, add_k);
    project_backward(dev, mk, Dv, hv, xv, dv, p + wv, g + wv, g + bv, dxv, add_v);
  }

  void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

 private:
  /// Keras' 1 / sqrt(key_dim) (its query is scaled by it; here the scores, as the GEMM's alpha).
  inline static const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim)));

  /// out (m x cols) = in (m x width) w (width x cols) + b.
  static void project(const B& dev, std::size_t m, std::size_t width, std::size_t cols, cptr in, cptr w, cptr b, ptr out) {
    if constexpr (bias) dev.broadcast_rows(m, cols, b, out);
    dev.gemm(transpose::no, transpose::no, m, cols, width, 1.0f, in, width, w, cols, bias ? 1.0f : 0.0f, out, cols);
  }
  /// The gradients of a projection of x (m x width) to `cols` columns from its output's, `dz`; dx gets
  /// dz w^T, added to what it holds when `add`.
  static void project_backward(const B& dev, std::size_t m, std::size_t width, std::size_t cols, cptr x, ptr dz, cptr w,
                               ptr gw, ptr gb, ptr dx, bool add) {
    dev.gemm(transpose::yes, transpose::no, width, cols, m, 1.0f, x, width, cptr(dz), cols, 0.0f, gw, cols);
    if constexpr (bias) dev.column_sums(m, cols, dz, gb);
    if (dx) dev.gemm(transpose::no, transpose::yes, m, width, cols, 1.0f, cptr(dz), cols, w, cols, add ? 1.0f : 0.0f, dx, width);
  }
  /// The causal addend (Tq x Tk: 0 where key j <= query i, Keras' large negative above), made once (its
  /// host copy lives on with the layer, as an upload a recording backend replays reads it).
  ptr causal_mask(const B& dev) {
    if (mask_host_.empty()) {
      mask_host_.assign(Tq * Tk, 0.0f);
      for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t u = t + 1; u < Tk; ++u) mask_host_[t * Tk + u] = masked_score;
      mask_ = dev.template allocate<float>(Tq * Tk);
      dev.upload(mask_host_.size(), static_cast<const float*>(mask_host_.data()), mask_.data());
    }
    return mask_.data();
  }

  /// Keras' attention mask of each sample (Tq x Tk: query step t may attend to key step u where both are
  /// unmasked, and u <= t when causal), as the factor after the softmax (1 or 0) and the addend before
  /// it (0 or Keras' large negative).
  void sample_masks(const B& dev, std::size_t n, step_mask<B> q, step_mask<B> k, step_mask<B> v) {
    const std::size_t each = Tq * Tk;
    mask_values_.resize(2 * n * each);
    float* mul = mask_values_.data();
    float* add = mul + n * each;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t t = 0; t < Tq; ++t)
        for (std::size_t u = 0; u < Tk; ++u) {
          const bool keep = (!q || q.host[i * Tq + t] != 0.0f) && (!k || k.host[i * Tk + u] != 0.0f) &&
                            (!v || v.host[i * Tk + u] != 0.0f) && (!causal || u <= t);
          mul[(i * Tq + t) * Tk + u] = keep ? 1.0f : 0.0f;
          add[(i * Tq + t) * Tk + u] = keep ? 0.0f : masked_score;
        }
    dev.upload(n * each, static_cast<const float*>(mul), ensure(dev, mask_mul_, n * each));
    dev.upload(n * each, static_cast<const float*>(add), ensure(dev, mask_add_, n * each));
  }

  buffer_t<B, float> q_, k_, v_, scores_, o_, dq_, dk_, dv_, do_, ds_, mask_, mask_mul_, mask_add_;
  buffer_t<B, float> dropped_scores_;  // in training with dropout: the dropped probabilities, then the factors
  bool dropped_ = false;               // the last forward dropped
  std::vector<float> mask_host_, mask_values_;
};
}  // namespace detail

template <std::size_t NumHeads, std::size_t KeyDim, class... Options>
struct multi_head_attention {
  static_assert(NumHeads > 0 && KeyDim > 0, "multi_head_attention: num_heads and key_dim must be positive");
  static_assert(((detail::is_value_dim<Options>::value || detail::is_use_bias<Options>::value ||
                  detail::is_use_causal_mask<Options>::value || detail::is_dropout_option<Options>::value) &&
                 ...),
                "multi_head_attention: options are value_dim<V>, use_bias<false>, use_causal_mask<true> and "
                "dropout<Rate>");
  static constexpr std::size_t heads = NumHeads, key_dim = KeyDim;
  static constexpr std::size_t val_dim =
      detail::find_option<detail::is_value_dim, value_dim<KeyDim>, Options...>::type::value;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;
  static constexpr bool causal =
      detail::find_option<detail::is_use_causal_mask, use_causal_mask<false>, Options...>::type::value;
  static constexpr float dropout_rate = detail::is_dropout_option<
      typename detail::find_option<detail::is_dropout_option, dropout<0.0f>, Options...>::type>::rate;
  /// One input: self-attention; two or three (a functional model's node): cross-attention.
  static constexpr bool optional_merge = true;

  /// Self-attention, Keras' `mha(x, x)`: the query, key and value are the one input (steps, features).
  template <class In, class B>
  struct bind : detail::attention_core<multi_head_attention, B, In::dims[0], In::rank == 2 ? In::dims[1] : 1, In::dims[0],
                                       In::rank == 2 ? In::dims[1] : 1, In::rank == 2 ? In::dims[1] : 1> {
    static_assert(In::rank == 2, "multi_head_attention expects a rank-2 input (steps, features)");
    using input_shape = In;
    using output_shape = In;
    using typename bind::attention_core::cptr;
    using typename bind::attention_core::ptr;
    static constexpr bool supports_masking = true;
    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      this->attend(ctx, x, x, x, y, n, p, ctx.mask(), ctx.mask(), ctx.mask());
    }
    void backward(layer_context<B>& ctx, cptr x, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      this->attend_backward(ctx, x, x, x, dy, dx, dx, true, dx, true, n, p, g);
    }
  };

  /// Cross-attention, Keras' `mha(query, value)` or `mha(query, value, key)`: the inputs in that order,
  /// each (steps, features); the key (the value when there are two) has the value's steps. The output
  /// has the query's shape.
  template <class B, class Q, class V, class... K>
  struct bind_merge
      : detail::attention_core<multi_head_attention, B, Q::dims[0], detail::last_extent_v<Q>, V::dims[0],
                               detail::last_extent_v<detail::key_shape_t<V, K...>>, detail::last_extent_v<V>> {
    static_assert(sizeof...(K) <= 1, "multi_head_attention takes a query, a value and optionally a key");
    static_assert(Q::rank == 2 && V::rank == 2 && ((K::rank == 2) && ...),
                  "multi_head_attention expects rank-2 inputs (steps, features)");
    static_assert(((K::dims[0] == V::dims[0]) && ...), "multi_head_attention: the key and the value must have the same steps");
    using core = typename bind_merge::attention_core;
    using typename core::cptr;
    using typename core::ptr;
    static constexpr std::size_t arity = 2 + sizeof...(K);
    using output_shape = Q;
    using inputs = std::array<cptr, arity>;
    using input_gradients = std::array<ptr, arity>;
    static constexpr bool supports_masking = true, mask_of_first = true;
    void forward(layer_context<B>& ctx, const inputs& xs, ptr y, std::size_t n, cptr p) {
      this->attend(ctx, xs[0], xs[arity - 1], xs[1], y, n, p, ctx.mask(0), ctx.mask(arity - 1), ctx.mask(1));
    }
    void backward(layer_context<B>& ctx, const inputs& xs, cptr, ptr dy, const input_gradients& dxs, std::size_t n,
                  cptr p, ptr g) {
      // with two inputs the value is the key as well: its gradient gets both parts
      this->attend_backward(ctx, xs[0], xs[arity - 1], xs[1], dy, dxs[0], dxs[arity - 1], false, dxs[1], arity == 2, n, p, g);
    }
  };
};

}  // namespace dtrain
