#pragma once
/// \file
/// `bidirectional<L>`: Keras `layers.Bidirectional(layer)` (merge_mode="concat") of a recurrent layer L
/// (`lstm<...>` or `gru<...>`): L over the steps first to last and a copy of it with weights of its own
/// over them last to first (Keras' backward layer: L with go_backwards flipped), their outputs side by
/// side: (2 units), or with return_sequences (steps, 2 units), the backward layer's sequence put back in
/// the input's order as Keras does. A masked input masks both; the output keeps the mask when it is a
/// sequence. Keras keeps the two layers' variables under `forward_layer` and `backward_layer`.

#include <array>
#include <utility>

#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/recurrent.hpp"

namespace dtrain {

namespace detail {
/// The recurrent spec L reading the steps the other way (go_backwards flipped): Keras' backward layer.
template <class L>
struct reversed_rnn {
  static_assert(sizeof(L) == 0, "bidirectional wraps a recurrent layer: lstm<...> or gru<...>");
};
template <std::size_t U, class... Os>
struct reversed_rnn<lstm<U, Os...>> {
  using type = lstm<U, go_backwards<!lstm<U, Os...>::spec::backwards>, Os...>;
};
template <std::size_t U, class... Os>
struct reversed_rnn<gru<U, Os...>> {
  using type = gru<U, go_backwards<!gru<U, Os...>::spec::backwards>, Os...>;
};
}  // namespace detail

template <class L>
struct bidirectional {
  template <class In, class B>
  struct bind {
    using forward_layer = bind_t<L, In, B>;
    using backward_layer = bind_t<typename detail::reversed_rnn<L>::type, In, B>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr bool sequences = forward_layer::sequences;
    static constexpr std::size_t u = forward_layer::u, steps = forward_layer::steps, out = sequences ? steps * u : u;
    using input_shape = In;
    using output_shape = std::conditional_t<sequences, shape<steps, 2 * u>, shape<2 * u>>;
    static constexpr const char* keras_name = "bidirectional";
    static constexpr const char* class_name = "Bidirectional";
    static constexpr bool supports_masking = true, keeps_mask = sequences;

    template <class C>
    static void get_config(C& c) {
      auto f = c.object("layer", "keras.layers", forward_layer::class_name);
      forward_layer::get_config(f);
      c.set("merge_mode", "concat");
      auto b = c.object("backward_layer", "keras.layers", backward_layer::class_name);
      backward_layer::get_config(b);
    }

    // the forward layer's variables, then the backward one's, where Keras keeps them
    static constexpr std::size_t half = param_count_v<forward_layer>;
    static constexpr auto params = [] {
      constexpr auto inner = forward_layer::params;
      constexpr const char* names[2][3] = {{"forward_layer/kernel", "forward_layer/recurrent_kernel", "forward_layer/bias"},
                                           {"backward_layer/kernel", "backward_layer/recurrent_kernel", "backward_layer/bias"}};
      constexpr const char* paths[2][3] = {
          {"forward_layer/cell/vars/0", "forward_layer/cell/vars/1", "forward_layer/cell/vars/2"},
          {"backward_layer/cell/vars/0", "backward_layer/cell/vars/1", "backward_layer/cell/vars/2"}};
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<param_spec, 2 * inner.size()>{
            param_spec{names[I / inner.size()][I % inner.size()], inner[I % inner.size()].rank,
                       inner[I % inner.size()].dims, paths[I / inner.size()][I % inner.size()]}...};
      }(std::make_index_sequence<2 * inner.size()>{});
    }();

    void initialize(std::span<float> p, rng& r) {
      forward_.initialize(p.subspan(0, half), r);
      backward_.initialize(p.subspan(half), r);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const ptr f = ensure(dev, outputs_, 2 * n * out), b = f + n * out;
      forward_.forward(ctx, x, f, n, p);
      backward_.forward(ctx, x, b, n, p + half);
      // y's columns: the forward output, then the backward one (its step t is input step steps - 1 - t)
      if constexpr (sequences) {
        for (std::size_t t = 0; t < steps; ++t) {
          dev.copy_columns(n, u, cptr(f + t * u), steps * u, y + t * 2 * u, steps * 2 * u);
          dev.copy_columns(n, u, cptr(b + (steps - 1 - t) * u), steps * u, y + t * 2 * u + u, steps * 2 * u);
        }
      } else {
        dev.copy_columns(n, u, cptr(f), u, y, 2 * u);
        dev.copy_columns(n, u, cptr(b), u, y + u, 2 * u);
      }
    }

    void backward(layer_context<B>& ctx, cptr x, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const ptr df = ensure(dev, gradients_, 2 * n * out + (dx ? n * In::size : 0)), db = df + n * out;
      if constexpr (sequences) {
        for (std::size_t t = 0; t < steps; ++t) {
          dev.copy_columns(n, u, cptr(dy + t * 2 * u), steps * 2 * u, df + t * u, steps * u);
          dev.copy_columns(n, u, cptr(dy + t * 2 * u + u), steps * 2 * u, db + (steps - 1 - t) * u, steps * u);
        }
      } else {
        dev.copy_columns(n, u, cptr(dy), 2 * u, df, u);
        dev.copy_columns(n, u, cptr(dy + u), 2 * u, db, u);
      }
      const ptr f = outputs_.data(), dxb = dx ? db + n * out : ptr{};
      forward_.backward(ctx, x, cptr(f), df, dx, n, p, g);
      backward_.backward(ctx, x, cptr(f + n * out), db, dxb, n, p + half, g + half);
      if (dx) dev.axpy(n * In::size, 1.0f, cptr(dxb), dx);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    forward_layer forward_;
    backward_layer backward_;
    buffer_t<B, float> outputs_, gradients_;
  };
};

}  // namespace dtrain
