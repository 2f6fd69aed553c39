#pragma once
/// \file
/// Keras' recurrent layers over a sequence (steps, features), from a zero state, Keras' defaults
/// (tanh activation, sigmoid recurrent activation):
/// - `lstm<Units, Options...>` (`layers.LSTM`): per step z = x_t W + h_{t-1} U + b with the gates' four
///   blocks in Keras' order (input i, forget f, cell g, output o); c_t = f c_{t-1} + i g and
///   h_t = o tanh(c_t), with i, f, o sigmoids and g a tanh. The forget gate's bias starts at 1
///   (Keras' unit_forget_bias).
/// - `gru<Units, Options...>` (`layers.GRU`, reset_after=True, Keras' default and cuDNN's form): blocks
///   (update z, reset r, candidate h); z and r are sigmoids of x_t W + b_in + h_{t-1} U + b_rec,
///   the candidate tanh(x_t W_h + b_in,h + r (h_{t-1} U_h + b_rec,h)), h_t = z h_{t-1} + (1 - z) candidate.
/// Variables as Keras stores them: kernel (features, G units), recurrent_kernel (units, G units), bias
/// (G units; the GRU's (2, 3 units): the input's row, then the recurrent one). Kernels start
/// glorot_uniform, recurrent kernels orthogonal (Keras' initializers). Options: `return_sequences<true>`
/// (every step's h, (steps, units); default the last step's, (units)), `go_backwards<true>` (the steps read
/// last to first, the sequence returned in that order), `use_bias<false>`. A masked input
/// (after `embedding<..., mask_zero<true>>`) is Keras' masking: at a sample's padded steps its state and
/// output stay the previous step's (zero before the first real step).
///
/// Computed with the backend's BLAS-like and activation kernels, time-major (step t's rows of all samples
/// contiguous): the input projections of every step in one GEMM, then per step the recurrent GEMM and
/// the gates, all kept for backpropagation through time, whose steps run only the GEMM to h_{t-1}'s
/// gradient; the kernels' and the input's gradients are one GEMM each over every step afterwards.

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/concepts.hpp"

namespace dtrain {

/// Keras' `return_sequences=True`: the layer outputs h at every step, not only the last.
template <bool Return>
struct return_sequences {
  static constexpr bool is_return_sequences = true;
  static constexpr bool value = Return;
};

/// Keras' `go_backwards=True`: the layer reads the steps last to first, and returns its sequence in that
/// order (reversed).
template <bool Backwards>
struct go_backwards {
  static constexpr bool is_go_backwards = true;
  static constexpr bool value = Backwards;
};

namespace detail {
template <class T, class = void>
struct is_go_backwards : std::false_type {};
template <class T>
struct is_go_backwards<T, std::void_t<decltype(T::is_go_backwards)>> : std::true_type {};
template <class T, class = void>
struct is_return_sequences : std::false_type {};
template <class T>
struct is_return_sequences<T, std::void_t<decltype(T::is_return_sequences)>> : std::true_type {};

/// Keras' `Orthogonal()` for a (rows, cols) kernel: the orthonormal factor of a normal matrix (by
/// modified Gram-Schmidt on its longer side, so the triangular factor's diagonal is positive, as
/// Keras' sign correction makes it), transposed when rows < cols (then its rows are orthonormal).
inline void orthogonal(std::span<float> w, std::size_t rows, std::size_t cols, rng& r) {
  const std::size_t big = std::max(rows, cols), small = std::min(rows, cols);
  std::vector<double> q(big * small);  // `small` columns of length `big`, column-major
  for (double& v : q) v = r.normal();
  for (std::size_t j = 0; j < small; ++j) {
    double* cj = q.data() + j * big;
    for (std::size_t k = 0; k < j; ++k) {
      const double* ck = q.data() + k * big;
      double dot = 0.0;
      for (std::size_t i = 0; i < big; ++i) dot += ck[i] * cj[i];
      for (std::size_t i = 0; i < big; ++i) cj[i] -= dot * ck[i];
    }
    double norm = 0.0;
    for (std::size_t i = 0; i < big; ++i) norm += cj[i] * cj[i];
    norm = std::sqrt(norm);
    for (std::size_t i = 0; i < big; ++i) cj[i] /= norm;
  }
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      w[i * cols + j] = static_cast<float>(rows >= cols ? q[j * big + i] : q[i * big + j]);
}

/// What LSTM and GRU share: shapes, variables, options, and the input projections of all steps.
template <std::size_t Units, std::size_t Gates, class... Options>
struct recurrent_spec {
  static_assert(Units > 0, "recurrent layer: units must be positive");
  static_assert(((is_return_sequences<Options>::value || is_use_bias<Options>::value || is_go_backwards<Options>::value) &&
                 ...),
                "recurrent layer: options are return_sequences<true>, go_backwards<true> and use_bias<false>");
  static constexpr bool sequences = find_option<is_return_sequences, return_sequences<false>, Options...>::type::value;
  static constexpr bool backwards = find_option<is_go_backwards, go_backwards<false>, Options...>::type::value;
  static constexpr bool bias = find_option<is_use_bias, use_bias<true>, Options...>::type::value;
  static constexpr std::size_t units = Units, width = Gates * Units;
};
/// The bound recurrent layer's common part: shapes, variables and buffers (time-major: step t's rows
/// for all n samples are contiguous).
template <class Spec, class In, class B, std::size_t BiasRows>
struct recurrent_base {
  static_assert(blas_kernels<B> && activation_kernels<B>,
                "recurrent layer: the backend lacks the BLAS-like or activation kernels");
  static_assert(In::rank == 2, "recurrent layer: expects a rank-2 input (steps, features)");
  using input_shape = In;
  using output_shape = std::conditional_t<Spec::sequences, shape<In::dims[0], Spec::units>, shape<Spec::units>>;
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr std::size_t steps = In::dims[0], f = In::rank == 2 ? In::dims[1] : 1, u = Spec::units,
                               w = Spec::width;
  static constexpr bool bias = Spec::bias, sequences = Spec::sequences, backwards = Spec::backwards;
  /// The input step the layer reads at its step t.
  static constexpr std::size_t input_step(std::size_t t) { return backwards ? steps - 1 - t : t; }
  /// Keras' RNN masking (see step_masks); the output keeps the mask when it is every step's.
  static constexpr bool supports_masking = true, keeps_mask = sequences;
  // where each variable starts in the layer's parameters (Keras' order)
  static constexpr std::size_t kernel = 0, recurrent = f * w, bias_at = recurrent + u * w;
  static constexpr auto params = [] {
    // Keras keeps them in the layer's cell: layers/lstm/cell/vars/0...
    constexpr param_spec k{"kernel", 2, {f, w, 0, 0}, "cell/vars/0"}, r{"recurrent_kernel", 2, {u, w, 0, 0}, "cell/vars/1"};
    constexpr param_spec b = BiasRows == 1 ? param_spec{"bias", 1, {w, 0, 0, 0}, "cell/vars/2"}
                                           : param_spec{"bias", 2, {BiasRows, w, 0, 0}, "cell/vars/2"};
    if constexpr (bias) return std::array<param_spec, 3>{k, r, b};
    else return std::array<param_spec, 2>{k, r};
  }();

  /// Keras' initializers: glorot_uniform kernel, orthogonal recurrent kernel, zero bias.
  static void initialize_kernels(std::span<float> p, rng& r) {
    std::fill(p.begin(), p.end(), 0.0f);
    detail::glorot_uniform(p.subspan(kernel, f * w), f, w, r);
    detail::orthogonal(p.subspan(recurrent, u * w), u, w, r);
  }
  template <class C>
  static void common_config(C& c) {
    c.set("units", u);
    c.set("activation", "tanh");
    c.set("recurrent_activation", "sigmoid");
    c.set("use_bias", bias);
    c.set("return_sequences", sequences);
    c.set("return_state", false);
    c.set("go_backwards", backwards);
    c.set("stateful", false);
    c.set("unroll", false);
    c.set("dropout", 0.0f);
    c.set("recurrent_dropout", 0.0f);
  }

  /// Step t's rows of the sample-major (n, steps, cols) `from` into the (n, cols) `to`, and back.
  static void gather_step(const B& dev, std::size_t n, std::size_t t, std::size_t cols, cptr from, ptr to) {
    dev.copy_columns(n, cols, from + t * cols, steps * cols, to, cols);
  }
  static void scatter_step(const B& dev, std::size_t n, std::size_t t, std::size_t cols, cptr from, ptr to) {
    dev.copy_columns(n, cols, from, cols, to + t * cols, steps * cols);
  }
  /// xt (steps, n, f) = x (n, steps, f) time-major, and proj (steps n, w) = xt W (+ the input bias `b`
  /// when not null): every step's input projection in one GEMM, step t's rows contiguous.
  static void project_inputs(const B& dev, std::size_t n, cptr x, cptr p, cptr b, ptr xt, ptr proj) {
    for (std::size_t t = 0; t < steps; ++t) gather_step(dev, n, input_step(t), f, x, xt + t * n * f);
    if (b) dev.broadcast_rows(n * steps, w, b, proj);
    dev.gemm(transpose::no, transpose::no, n * steps, w, f, 1.0f, cptr(xt), f, p + kernel, w, b ? 1.0f : 0.0f, proj, w);
  }
  /// The output: every step's h (time-major hs) into y's (n, steps, u), or the last step's.
  static void write_output(const B& dev, std::size_t n, cptr hs, ptr y) {
    if constexpr (sequences)
      for (std::size_t t = 0; t < steps; ++t) scatter_step(dev, n, t, u, hs + t * n * u, y);
    else dev.copy(n * u, hs + (steps - 1) * n * u, y);
  }
  /// dh += the output's gradient at step t.
  static void add_output_gradient(const B& dev, std::size_t n, std::size_t t, cptr dy, ptr dh, ptr scratch) {
    if constexpr (sequences) {
      gather_step(dev, n, t, u, dy, scratch);
      dev.axpy(n * u, 1.0f, cptr(scratch), dh);
    } else if (t == steps - 1) {
      dev.axpy(n * u, 1.0f, dy, dh);
    }
  }
  /// The recurrent kernel's gradient from every step's at once: the sum over t >= 1 of h_{t-1}^T dz_t,
  /// one GEMM over the time-major hs and dzs (steps n rows each).
  static void recurrent_backward(const B& dev, std::size_t n, cptr hs, cptr dzs, ptr g) {
    if (steps == 1) return dev.fill(u * w, 0.0f, g + recurrent);
    dev.gemm(transpose::yes, transpose::no, u, w, (steps - 1) * n, 1.0f, hs, u, dzs + n * w, w, 0.0f, g + recurrent, w);
  }
  /// A masked input (Keras' RNN masking): a sample's state stays as it was at its masked steps, and so
  /// does its output (the previous step's). `step_masks` expands the mask to every unit, time-major
  /// (steps, n, u), or returns null for an unmasked input; `carry` makes step t's new state `out` the
  /// previous one `prev` (null: zero) where masked; `split` divides a step state's gradient `d` into the
  /// new state's (kept in d) and what passes to the previous state unchanged (`passed`).
  ptr step_masks(const B& dev, step_mask<B> m, std::size_t n) {
    if (!m) return ptr{};
    mask_host_.resize(steps * n * u);
    for (std::size_t t = 0; t < steps; ++t)
      for (std::size_t i = 0; i < n; ++i)
        std::fill_n(mask_host_.begin() + std::ptrdiff_t((t * n + i) * u), u, m.host[i * steps + input_step(t)]);
    const ptr mask = ensure(dev, mask_, steps * n * u);
    dev.upload(mask_host_.size(), static_cast<const float*>(mask_host_.data()), mask);
    return mask;
  }
  /// out = prev + m (out - prev), or m out when prev is null; tmp is scratch.
  static void carry(const B& dev, std::size_t nu, cptr m, cptr prev, ptr out, ptr tmp) {
    if (!prev) return dev.multiply(nu, m, cptr(out), out);
    dev.copy(nu, cptr(out), tmp);
    dev.axpy(nu, -1.0f, prev, tmp);
    dev.multiply(nu, m, cptr(tmp), tmp);
    dev.copy(nu, prev, out);
    dev.axpy(nu, 1.0f, cptr(tmp), out);
  }
  /// passed = (1 - m) d, d = m d.
  static void split(const B& dev, std::size_t nu, cptr m, ptr d, ptr passed) {
    dev.copy(nu, cptr(d), passed);
    dev.multiply(nu, m, cptr(d), d);
    dev.axpy(nu, -1.0f, cptr(d), passed);
  }

  /// From the time-major projections' gradients dproj (steps n, w): the kernel's and the input bias's
  /// gradients, and dx (through xt, whose values are then spent).
  static void project_backward(const B& dev, std::size_t n, ptr xt, cptr dproj, cptr p, ptr g, ptr gb, ptr dx) {
    dev.gemm(transpose::yes, transpose::no, f, w, n * steps, 1.0f, cptr(xt), f, dproj, w, 0.0f, g + kernel, w);
    if (gb) dev.column_sums(n * steps, w, dproj, gb);
    if (!dx) return;
    dev.gemm(transpose::no, transpose::yes, n * steps, f, w, 1.0f, dproj, w, p + kernel, w, 0.0f, xt, f);
    for (std::size_t t = 0; t < steps; ++t) scatter_step(dev, n, input_step(t), f, cptr(xt + t * n * f), dx);
  }

 private:
  std::vector<float> mask_host_;
  buffer_t<B, float> mask_;
};

}  // namespace detail

template <std::size_t Units, class... Options>
struct lstm : detail::recurrent_spec<Units, 4, Options...> {
  using spec = detail::recurrent_spec<Units, 4, Options...>;

  template <class In, class B>
  struct bind : detail::recurrent_base<spec, In, B, 1> {
    using base = detail::recurrent_base<spec, In, B, 1>;
    using typename base::cptr;
    using typename base::ptr;
    using base::bias;
    using base::bias_at;
    using base::recurrent;
    using base::steps;
    using base::u;
    using base::w;
    static constexpr const char* keras_name = "lstm";
    static constexpr const char* class_name = "LSTM";
    template <class C>
    static void get_config(C& c) {
      base::common_config(c);
      c.set("unit_forget_bias", true);
    }
    void initialize(std::span<float> p, rng& r) {
      base::initialize_kernels(p, r);
      if constexpr (bias) std::fill_n(p.begin() + bias_at + u, u, 1.0f);  // unit_forget_bias
    }

    // Gates are kept gate-major per step, in the order i, f, o, g (the three sigmoids together):
    // block k of a step's gates is Keras' block keras_block[k] of z.
    static constexpr std::size_t keras_block[4] = {0, 1, 3, 2};

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t nu = n * u;
      const ptr xt = ensure(dev, xt_, n * steps * base::f), proj = ensure(dev, proj_, n * steps * w);
      const ptr gates = ensure(dev, gates_, steps * 4 * nu), c = ensure(dev, c_, steps * nu),
                tc = ensure(dev, tc_, steps * nu), h = ensure(dev, h_, steps * nu), tmp = ensure(dev, tmp_, nu);
      base::project_inputs(dev, n, x, p, bias ? p + bias_at : cptr{}, xt, proj);
      const ptr mask = masks_ = this->step_masks(dev, ctx.mask(), n);
      for (std::size_t t = 0; t < steps; ++t) {
        const ptr z = proj + t * n * w, a = gates + t * 4 * nu, ct = c + t * nu, ht = h + t * nu;
        if (t > 0)
          dev.gemm(transpose::no, transpose::no, n, w, u, 1.0f, cptr(h + (t - 1) * nu), u, p + recurrent, w, 1.0f, z, w);
        for (std::size_t k = 0; k < 4; ++k) dev.copy_columns(n, u, cptr(z + keras_block[k] * u), w, a + k * nu, u);
        dev.template activation_forward<activation_kind::sigmoid>(3 * n, u, a, a);
        dev.template activation_forward<activation_kind::tanh>(n, u, a + 3 * nu, a + 3 * nu);
        dev.multiply(nu, a, a + 3 * nu, ct);  // i g
        if (t > 0) {
          dev.multiply(nu, a + nu, cptr(c + (t - 1) * nu), tmp);  // + f c_{t-1}
          dev.axpy(nu, 1.0f, cptr(tmp), ct);
        }
        dev.template activation_forward<activation_kind::tanh>(n, u, ct, tc + t * nu);
        dev.multiply(nu, a + 2 * nu, cptr(tc + t * nu), ht);  // o tanh(c_t)
        if (mask) {  // (tc keeps the new state's tanh, for backward)
          const cptr m = mask + t * nu;
          base::carry(dev, nu, m, t > 0 ? cptr(c + (t - 1) * nu) : cptr{}, ct, tmp);
          base::carry(dev, nu, m, t > 0 ? cptr(h + (t - 1) * nu) : cptr{}, ht, tmp);
        }
      }
      base::write_output(dev, n, h, y);
    }

    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t nu = n * u;
      const ptr proj = proj_.data(), gates = gates_.data(), c = c_.data(), tc = tc_.data(), h = h_.data();
      const ptr dh = ensure(dev, dh_, nu), dc = ensure(dev, dc_, nu), da = ensure(dev, da_, 4 * nu), tmp = tmp_.data();
      const ptr mask = masks_, passed_h = mask ? ensure(dev, passed_h_, nu) : ptr{},
                passed_c = mask ? ensure(dev, passed_c_, nu) : ptr{};
      dev.fill(nu, 0.0f, dh);
      dev.fill(nu, 0.0f, dc);
      // dh = dz U^T at every step: U transposed once, so each of those GEMMs reads both operands as they lie
      const ptr ut = ensure(dev, ut_, u * w);
      dev.transpose_matrix(u, w, p + recurrent, w, ut, u);
      for (std::size_t t = steps; t-- > 0;) {
        const cptr a = gates + t * 4 * nu, tct = tc + t * nu;
        const ptr dz = proj + t * n * w;  // z_t's gradient replaces it
        base::add_output_gradient(dev, n, t, dy, dh, tmp);
        if (mask) {  // a masked step's state is the previous one: its gradient passes on
          base::split(dev, nu, cptr(mask + t * nu), dh, passed_h);
          base::split(dev, nu, cptr(mask + t * nu), dc, passed_c);
        }
        // h = o tanh(c): do = dh tanh(c); dc += (dh o) tanh'(c)
        dev.multiply(nu, cptr(dh), tct, da + 2 * nu);
        dev.multiply(nu, cptr(dh), a + 2 * nu, tmp);
        dev.template activation_backward<activation_kind::tanh>(n, u, cptr{}, tct, cptr(tmp), tmp);
        dev.axpy(nu, 1.0f, cptr(tmp), dc);
        // c = f c_{t-1} + i g: di = dc g, dg = dc i, df = dc c_{t-1}; dc_{t-1} = dc f
        dev.multiply(nu, cptr(dc), a + 3 * nu, da);
        dev.multiply(nu, cptr(dc), a, da + 3 * nu);
        if (t > 0) dev.multiply(nu, cptr(dc), cptr(c + (t - 1) * nu), da + nu);
        else dev.fill(nu, 0.0f, da + nu);
        dev.multiply(nu, cptr(dc), a + nu, dc);
        if (mask) dev.axpy(nu, 1.0f, cptr(passed_c), dc);
        // through the gates' activations to z, in Keras' block order
        dev.template activation_backward<activation_kind::sigmoid>(3 * n, u, cptr{}, a, cptr(da), da);
        dev.template activation_backward<activation_kind::tanh>(n, u, cptr{}, a + 3 * nu, cptr(da + 3 * nu), da + 3 * nu);
        for (std::size_t k = 0; k < 4; ++k) dev.copy_columns(n, u, cptr(da + k * nu), u, dz + keras_block[k] * u, w);
        if (t > 0) {  // z_t = ... + h_{t-1} U
          if (mask) dev.copy(nu, cptr(passed_h), dh);
          dev.gemm(transpose::no, transpose::no, n, u, w, 1.0f, cptr(dz), w, cptr(ut), u, mask ? 1.0f : 0.0f, dh, u);
        }
      }
      base::recurrent_backward(dev, n, h, proj, g);
      base::project_backward(dev, n, xt_.data(), proj, p, g, bias ? g + bias_at : ptr{}, dx);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    buffer_t<B, float> xt_, proj_, gates_, c_, tc_, h_, tmp_, dh_, dc_, da_, ut_, passed_h_, passed_c_;
    ptr masks_{};  // the last forward's (null: unmasked)
  };
};

template <std::size_t Units, class... Options>
struct gru : detail::recurrent_spec<Units, 3, Options...> {
  using spec = detail::recurrent_spec<Units, 3, Options...>;

  template <class In, class B>
  struct bind : detail::recurrent_base<spec, In, B, 2> {
    using base = detail::recurrent_base<spec, In, B, 2>;
    using typename base::cptr;
    using typename base::ptr;
    using base::bias;
    using base::bias_at;
    using base::recurrent;
    using base::steps;
    using base::u;
    using base::w;
    static constexpr const char* keras_name = "gru";
    static constexpr const char* class_name = "GRU";
    template <class C>
    static void get_config(C& c) {
      base::common_config(c);
      c.set("reset_after", true);
    }
    void initialize(std::span<float> p, rng& r) { base::initialize_kernels(p, r); }

    // Per step, gate-major blocks of n x u: z and r (the sigmoids, together), the candidate hh, and
    // rec_h = h_{t-1} U_h + b_rec,h (what r multiplies).
    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t nu = n * u;
      const ptr xt = ensure(dev, xt_, n * steps * base::f), proj = ensure(dev, proj_, n * steps * w);
      const ptr xz = ensure(dev, xz_, n * w), rz = ensure(dev, rz_, n * steps * w);
      const ptr gates = ensure(dev, gates_, steps * 4 * nu), h = ensure(dev, h_, steps * nu), tmp = ensure(dev, tmp_, nu);
      base::project_inputs(dev, n, x, p, bias ? p + bias_at : cptr{}, xt, proj);
      const ptr mask = masks_ = this->step_masks(dev, ctx.mask(), n);
      for (std::size_t t = 0; t < steps; ++t) {
        const ptr a = gates + t * 4 * nu, ht = h + t * nu;
        // the recurrent side h_{t-1} U + b_rec (b_rec alone at the first step, whose h_{t-1} is zero)
        if constexpr (bias) dev.broadcast_rows(n, w, p + bias_at + w, rz);
        else dev.fill(n * w, 0.0f, rz);
        if (t > 0)
          dev.gemm(transpose::no, transpose::no, n, w, u, 1.0f, cptr(h + (t - 1) * nu), u, p + recurrent, w, 1.0f, rz, w);
        // z, r = sigmoid(input side + recurrent side)
        dev.copy(n * w, cptr(proj + t * n * w), xz);
        dev.axpy(n * w, 1.0f, cptr(rz), xz);
        for (std::size_t k = 0; k < 2; ++k) dev.copy_columns(n, u, cptr(xz + k * u), w, a + k * nu, u);
        dev.template activation_forward<activation_kind::sigmoid>(2 * n, u, a, a);
        // hh = tanh(x_h + r rec_h)
        dev.copy_columns(n, u, cptr(rz + 2 * u), w, a + 3 * nu, u);
        dev.copy_columns(n, u, cptr(proj + t * n * w + 2 * u), w, a + 2 * nu, u);
        dev.multiply(nu, cptr(a + nu), cptr(a + 3 * nu), tmp);
        dev.axpy(nu, 1.0f, cptr(tmp), a + 2 * nu);
        dev.template activation_forward<activation_kind::tanh>(n, u, a + 2 * nu, a + 2 * nu);
        // h = hh + z (h_{t-1} - hh)
        previous_minus_candidate(dev, n, t, h, a, tmp);
        dev.multiply(nu, cptr(a), cptr(tmp), tmp);
        dev.copy(nu, cptr(a + 2 * nu), ht);
        dev.axpy(nu, 1.0f, cptr(tmp), ht);
        if (mask) base::carry(dev, nu, cptr(mask + t * nu), t > 0 ? cptr(h + (t - 1) * nu) : cptr{}, ht, tmp);
      }
      base::write_output(dev, n, h, y);
    }

    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t nu = n * u;
      // every step's gradients, time-major: the input side's replace the projections; the recurrent
      // side's fill rz (steps n rows), for one GEMM and one column sum after the loop
      const ptr proj = proj_.data(), gates = gates_.data(), h = h_.data(), drzs = rz_.data();
      const ptr dh = ensure(dev, dh_, nu), da = ensure(dev, da_, 3 * nu), tmp = tmp_.data(), direct = ensure(dev, t2_, nu);
      const ptr ut = ensure(dev, ut_, u * w);  // U^T, as the LSTM's
      dev.transpose_matrix(u, w, p + recurrent, w, ut, u);
      const ptr mask = masks_, passed = mask ? ensure(dev, passed_, nu) : ptr{};
      dev.fill(nu, 0.0f, dh);
      for (std::size_t t = steps; t-- > 0;) {
        const cptr a = gates + t * 4 * nu;
        const ptr dxz = proj + t * n * w, drz = drzs + t * n * w;
        base::add_output_gradient(dev, n, t, dy, dh, tmp);
        if (mask) base::split(dev, nu, cptr(mask + t * nu), dh, passed);  // as the LSTM's
        // h = hh + z (h_{t-1} - hh): dz = dh (h_{t-1} - hh), dhh = dh - dh z, and dh z straight to h_{t-1}
        previous_minus_candidate(dev, n, t, h, a, tmp);
        dev.multiply(nu, cptr(dh), cptr(tmp), da);
        dev.multiply(nu, cptr(dh), a, direct);
        dev.copy(nu, cptr(dh), da + 2 * nu);
        dev.axpy(nu, -1.0f, cptr(direct), da + 2 * nu);
        dev.template activation_backward<activation_kind::tanh>(n, u, cptr{}, a + 2 * nu, cptr(da + 2 * nu), da + 2 * nu);
        // hh's argument x_h + r rec_h: dr = d(arg) rec_h, d rec_h = d(arg) r
        dev.multiply(nu, cptr(da + 2 * nu), a + 3 * nu, da + nu);
        dev.multiply(nu, cptr(da + 2 * nu), a + nu, tmp);
        dev.template activation_backward<activation_kind::sigmoid>(2 * n, u, cptr{}, a, cptr(da), da);
        // the input side's gradient (z, r, hh) and the recurrent side's (z, r, rec_h), in Keras' block order
        for (std::size_t k = 0; k < 3; ++k) dev.copy_columns(n, u, cptr(da + k * nu), u, dxz + k * u, w);
        dev.copy_columns(n, 2 * u, cptr(dxz), w, drz, w);
        dev.copy_columns(n, u, cptr(tmp), u, drz + 2 * u, w);
        if (t > 0) {
          dev.copy(nu, cptr(direct), dh);
          if (mask) dev.axpy(nu, 1.0f, cptr(passed), dh);
          dev.gemm(transpose::no, transpose::no, n, u, w, 1.0f, cptr(drz), w, cptr(ut), u, 1.0f, dh, u);
        }
      }
      base::recurrent_backward(dev, n, h, drzs, g);
      if constexpr (bias) dev.column_sums(n * steps, w, drzs, g + bias_at + w);
      base::project_backward(dev, n, xt_.data(), proj, p, g, bias ? g + bias_at : ptr{}, dx);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    /// out = h_{t-1} - hh (h_{-1} = 0).
    static void previous_minus_candidate(const B& dev, std::size_t n, std::size_t t, ptr h, cptr a, ptr out) {
      const std::size_t nu = n * u;
      if (t > 0) dev.copy(nu, cptr(h + (t - 1) * nu), out);
      else dev.fill(nu, 0.0f, out);
      dev.axpy(nu, -1.0f, a + 2 * nu, out);
    }

    buffer_t<B, float> xt_, proj_, xz_, rz_, gates_, h_, tmp_, dh_, da_, t2_, ut_, passed_;
    ptr masks_{};  // the last forward's (null: unmasked)
  };
};

}  // namespace dtrain
