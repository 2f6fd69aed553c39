#pragma once
/// \file
/// `embedding<InputDim, OutputDim>`: Keras `layers.Embedding(input_dim, output_dim)`. Each input value is
/// an index in [0, InputDim) (held as a float, exact below 2^24) and becomes that row of the
/// `embeddings` table (InputDim, OutputDim), initialised uniform in [-0.05, 0.05] (Keras' default): the
/// output's shape is the input's with OutputDim appended. With `mask_zero<true>` (Keras' `mask_zero=True`)
/// index 0 is padding, and the output carries the mask of the other steps (layers/concepts.hpp). A model checks the indices of a batch it
/// feeds straight to an embedding before anything runs (`check_input`), so a bad index is an error
/// naming it; elsewhere an index outside the table reads a row of zeros and receives no gradient.
///
/// The table's gradient adds dy rows by index, which several rows may share. To add them in a fixed
/// order without atomics, backward sorts the row numbers by index on the host (a counting sort of the
/// batch's indices) and the backend sums each index's rows in that order: the same bits on every run.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {
template <class S, std::size_t Last, class Seq = std::make_index_sequence<S::rank>>
struct append_dim;
template <class S, std::size_t Last, std::size_t... I>
struct append_dim<S, Last, std::index_sequence<I...>> {
  using type = shape<S::dims[I]..., Last>;
};
}  // namespace detail

/// Keras' `mask_zero=True` of an embedding: index 0 is padding, and the output carries a mask of the
/// steps whose index is not 0 to the layers after it that support masking (attention, the recurrent
/// layers, pooling over the steps).
template <bool Mask>
struct mask_zero {
  static constexpr bool is_mask_zero = true;
  static constexpr bool value = Mask;
};

namespace detail {
template <class T, class = void>
struct is_mask_zero : std::false_type {};
template <class T>
struct is_mask_zero<T, std::void_t<decltype(T::is_mask_zero)>> : std::true_type {};
}  // namespace detail

template <std::size_t InputDim, std::size_t OutputDim, class... Options>
struct embedding {
  static_assert(InputDim > 0 && OutputDim > 0, "embedding: input_dim and output_dim must be positive");
  static_assert(InputDim < (std::size_t(1) << 24), "embedding: input_dim must be below 2^24 (indices are floats)");
  static_assert((detail::is_mask_zero<Options>::value && ...), "embedding: the option is mask_zero<true>");
  static constexpr bool masks = detail::find_option<detail::is_mask_zero, mask_zero<false>, Options...>::type::value;

  template <class In, class B>
  struct bind {
    static_assert(embedding_kernels<B>, "embedding: the backend lacks the embedding kernels (embedding_kernels)");
    using input_shape = In;
    using output_shape = typename detail::append_dim<In, OutputDim>::type;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "embedding";
    static constexpr bool autocast = false;  // its inputs are indices
    static constexpr const char* class_name = "Embedding";
    template <class C>
    static void get_config(C& c) {
      c.set("input_dim", InputDim);
      c.set("output_dim", OutputDim);
      c.set("mask_zero", masks);
    }
    static constexpr std::array<param_spec, 1> params{{{"embeddings", 2, {InputDim, OutputDim, 0, 0}}}};

    /// With mask_zero: the output's mask, 1 where the index is not 0 (one value per index).
    static constexpr bool makes_mask = masks;
    static void compute_mask(std::span<const float> x, float* mask) {
      for (std::size_t i = 0; i < x.size(); ++i) mask[i] = x[i] != 0.0f ? 1.0f : 0.0f;
    }

    void initialize(std::span<float> p, rng& r) {
      for (auto& v : p) v = r.uniform(-0.05f, 0.05f);
    }

    /// Every value of a batch fed to the layer must be a whole number in [0, InputDim).
    static void check_input(std::span<const float> x, const std::string& layer_name) {
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!(x[i] >= 0.0f && x[i] < float(InputDim) && x[i] == std::floor(x[i])))
          throw value_error("embedding '" + layer_name + "': input value " + std::to_string(x[i]) + " (sample " +
                            std::to_string(i / In::size) + ", position " + std::to_string(i % In::size) +
                            ") is not an index in [0, " + std::to_string(InputDim) + ")");
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      ctx.device.embedding_forward(n * In::size, OutputDim, InputDim, x, p, y);
    }

    /// The indices are not differentiable: an input gradient asked for (watch_inputs) is zero.
    void backward(layer_context<B>& ctx, cptr x, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr g) {
      const B& dev = ctx.device;
      const std::size_t rows = n * In::size;
      if (dx) dev.fill(rows, 0.0f, dx);
      indices_.resize(rows);
      dev.download(rows, x, indices_.data());
      // counting sort of the rows by index: starts[v] .. starts[v + 1] are index v's rows in order
      starts_.assign(InputDim + 1, 0);
      for (float v : indices_)
        if (v >= 0.0f && v < float(InputDim)) ++starts_[std::size_t(v) + 1];
      for (std::size_t v = 0; v < InputDim; ++v) starts_[v + 1] += starts_[v];
      order_.resize(starts_[InputDim]);
      next_.assign(starts_.begin(), starts_.end() - 1);
      for (std::size_t r = 0; r < rows; ++r)
        if (indices_[r] >= 0.0f && indices_[r] < float(InputDim))
          order_[next_[std::size_t(indices_[r])]++] = std::uint32_t(r);
      const auto order = ensure(dev, order_dev_, std::max<std::size_t>(order_.size(), 1));
      const auto starts = ensure(dev, starts_dev_, InputDim + 1);
      dev.upload(order_.size(), static_cast<const std::uint32_t*>(order_.data()), order);
      dev.upload(InputDim + 1, static_cast<const std::uint32_t*>(starts_.data()), starts);
      dev.embedding_backward(InputDim, OutputDim, pointer_t<B, const std::uint32_t>(order),
                             pointer_t<B, const std::uint32_t>(starts), dy, g);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    std::vector<float> indices_;
    std::vector<std::uint32_t> starts_, order_, next_;
    buffer_t<B, std::uint32_t> order_dev_, starts_dev_;
  };
};

/// `position_embedding<SequenceLength>`: KerasHub's `layers.PositionEmbedding(sequence_length)`, a learned
/// table `embeddings` (SequenceLength, features) whose first `steps` rows are the layer's output for an
/// input (steps, features), steps <= SequenceLength, in every sample. The input's values are not read:
/// as in KerasHub, the model adds the two (`add` of x and position_embedding(x) in a functional model).
template <std::size_t SequenceLength>
struct position_embedding {
  static_assert(SequenceLength > 0, "position_embedding: sequence_length must be positive");

  template <class In, class B>
  struct bind {
    static_assert(In::rank == 2, "position_embedding expects a rank-2 input (steps, features)");
    static_assert(In::dims[0] <= SequenceLength, "position_embedding: the input has more steps than sequence_length");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "position_embedding";
    static constexpr const char* class_name = "PositionEmbedding";
    static constexpr std::size_t steps = In::dims[0], features = In::rank == 2 ? In::dims[1] : 1;
    template <class C>
    static void get_config(C& c) {
      c.set("sequence_length", SequenceLength);
    }
    static constexpr std::array<param_spec, 1> params{{{"embeddings", 2, {SequenceLength, features, 0, 0}}}};

    void initialize(std::span<float> p, rng& r) { detail::glorot_uniform(p, SequenceLength, features, r); }

    void forward(layer_context<B>& ctx, cptr, ptr y, std::size_t n, cptr p) {
      ctx.device.broadcast_rows(n, In::size, p, y);
    }
    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr g) {
      const B& dev = ctx.device;
      dev.column_sums(n, In::size, dy, g);
      if constexpr (SequenceLength > steps) dev.fill((SequenceLength - steps) * features, 0.0f, g + In::size);
      if (dx) dev.fill(n * In::size, 0.0f, dx);
    }
    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}
  };
};

}  // namespace dtrain
