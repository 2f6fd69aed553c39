// Shapes, names, initialisers and behaviours of the layers (values worked out by hand), on every backend
// of the suite.
#include <numeric>

#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::backends;

BOOST_AUTO_TEST_SUITE(layers)

// TF's output-size rules: valid = floor((in - k) / s) + 1, same = ceil(in / s).
static_assert(std::is_same_v<bind_t<conv2d<8, 3>, shape<28, 28, 1>>::output_shape, shape<26, 26, 8>>);
static_assert(std::is_same_v<bind_t<conv2d<8, 3, relu, padding::same>, shape<28, 28, 1>>::output_shape, shape<28, 28, 8>>);
static_assert(std::is_same_v<bind_t<conv2d<8, 3, relu, strides<2>>, shape<28, 27, 1>>::output_shape, shape<13, 13, 8>>);
static_assert(std::is_same_v<bind_t<conv2d<8, 4, relu, strides<3>, padding::same>, shape<10, 9, 2>>::output_shape,
                             shape<4, 3, 8>>);
// non-square kernels and dilation: the window spans (k - 1) d + 1; groups split the kernel's channels
static_assert(std::is_same_v<bind_t<conv2d<8, kernel_size{3, 5}>, shape<10, 9, 2>>::output_shape, shape<8, 5, 8>>);
static_assert(std::is_same_v<bind_t<conv2d<8, 3, relu, dilation_rate<2, 3>>, shape<10, 9, 2>>::output_shape,
                             shape<6, 3, 8>>);
static_assert(std::is_same_v<bind_t<conv2d<8, 3, relu, dilation_rate<2>, padding::same>, shape<10, 9, 2>>::output_shape,
                             shape<10, 9, 8>>);
static_assert(std::is_same_v<conv2d<8, 3>, conv2d<8, kernel_size{3, 3}>>);
static_assert(std::is_same_v<bind_t<conv1d<8, 3>, shape<10, 4>>::output_shape, shape<8, 8>>);
static_assert(std::is_same_v<bind_t<conv1d<8, 3, relu, padding::causal, strides<2>>, shape<10, 4>>::output_shape, shape<5, 8>>);
static_assert(param_count_v<bind_t<conv1d<6, 3, relu, groups<2>>, shape<10, 4>>> == 3 * 2 * 6 + 6);
static_assert(std::is_same_v<bind_t<global_average_pooling1d<>, shape<10, 4>>::output_shape, shape<4>>);
static_assert(std::is_same_v<bind_t<max_pooling1d<2>, shape<9, 4>>::output_shape, shape<4, 4>>);
static_assert(std::is_same_v<bind_t<average_pooling1d<3, strides<2>, padding::same>, shape<9, 4>>::output_shape, shape<5, 4>>);
static_assert(std::is_same_v<bind_t<multi_head_attention<4, 8>, shape<16, 32>>::output_shape, shape<16, 32>>);
static_assert(param_count_v<bind_t<multi_head_attention<4, 8, value_dim<6>>, shape<16, 32>>> ==
              2 * (32 * 4 * 8 + 4 * 8) + 32 * 4 * 6 + 4 * 6 + 4 * 6 * 32 + 32);
static_assert(std::is_same_v<bind_t<global_max_pooling1d<true>, shape<10, 4>>::output_shape, shape<1, 4>>);
static_assert(param_count_v<bind_t<conv2d<6, kernel_size{1, 3}, relu, groups<3>>, shape<5, 5, 9>>> == 1 * 3 * 3 * 6 + 6);
static_assert(std::is_same_v<bind_t<max_pooling2d<kernel_size{2, 3}>, shape<7, 7, 3>>::output_shape, shape<3, 2, 3>>);
// Keras' Conv2DTranspose lengths: valid (in - 1) s + span (in s when the span is smaller), same in s
static_assert(std::is_same_v<bind_t<conv2d_transpose<4, 3>, shape<5, 6, 2>>::output_shape, shape<7, 8, 4>>);
static_assert(std::is_same_v<bind_t<conv2d_transpose<4, 3, relu, strides<2>>, shape<5, 6, 2>>::output_shape,
                             shape<11, 13, 4>>);
static_assert(std::is_same_v<bind_t<conv2d_transpose<4, 2, relu, strides<3>>, shape<5, 6, 2>>::output_shape,
                             shape<15, 18, 4>>);
static_assert(std::is_same_v<bind_t<conv2d_transpose<4, 3, relu, strides<2>, padding::same>, shape<5, 6, 2>>::output_shape,
                             shape<10, 12, 4>>);
static_assert(std::is_same_v<bind_t<conv2d_transpose<4, 3, relu, dilation_rate<2>>, shape<5, 6, 2>>::output_shape,
                             shape<9, 10, 4>>);
static_assert(param_count_v<bind_t<conv2d_transpose<4, kernel_size{3, 2}>, shape<5, 6, 2>>> == 3 * 2 * 4 * 2 + 4);
static_assert(layer<bind_t<conv2d_transpose<3, 3>, shape<4, 4, 2>, opaque>, opaque>);
static_assert(param_count_v<bind_t<depthwise_conv2d<3, relu, use_bias<false>, depth_multiplier<2>>, shape<5, 5, 4>>> ==
              3 * 3 * 4 * 2);
static_assert(param_count_v<bind_t<separable_conv2d<6, 3, relu, use_bias<false>>, shape<5, 5, 4>>> == 3 * 3 * 4 + 4 * 6);
static_assert(std::is_same_v<bind_t<max_pooling2d<2>, shape<7, 7, 3>>::output_shape, shape<3, 3, 3>>);
static_assert(std::is_same_v<bind_t<max_pooling2d<2, padding::same>, shape<7, 7, 3>>::output_shape, shape<4, 4, 3>>);
static_assert(std::is_same_v<bind_t<average_pooling2d<3, strides<1>>, shape<5, 6, 1>>::output_shape, shape<3, 4, 1>>);
static_assert(std::is_same_v<bind_t<flatten, shape<3, 4, 5>>::output_shape, shape<60>>);
static_assert(std::is_same_v<bind_t<dense<7>, shape<3, 4>>::output_shape, shape<3, 7>>);
static_assert(param_count_v<bind_t<dense<128>, shape<21632>>> == 21632 * 128 + 128);
static_assert(param_count_v<bind_t<dense<128, relu, use_bias<false>>, shape<21632>>> == 21632 * 128);
static_assert(param_count_v<bind_t<conv2d<32, 3>, shape<28, 28, 1>>> == 3 * 3 * 1 * 32 + 32);
static_assert(param_count_v<bind_t<conv2d<32, 3, relu, use_bias<false>>, shape<28, 28, 1>>> == 3 * 3 * 1 * 32);
static_assert(layer<bind_t<dense<3>, shape<4>>, cpu> && layer<bind_t<conv2d<3, 3>, shape<4, 4, 1>>, cpu> &&
              layer<bind_t<max_pooling2d<2>, shape<4, 4, 1>>, cpu> && layer<bind_t<dropout<0.5f>, shape<4>>, cpu> &&
              layer<bind_t<relu, shape<4>>, cpu> && layer<bind_t<reshape<2, 2>, shape<4>>, cpu>);
static_assert(layer<bind_t<dense<3, gelu, l2<0.1f>>, shape<4>, opaque>, opaque> &&
              layer<bind_t<conv2d<3, 3>, shape<4, 4, 1>, opaque>, opaque> &&
              layer<bind_t<average_pooling2d<2>, shape<4, 4, 1>, opaque>, opaque> &&
              layer<bind_t<flatten, shape<2, 2>, opaque>, opaque>);
static_assert(std::is_same_v<bind_t<global_average_pooling2d<>, shape<7, 5, 3>>::output_shape, shape<3>>);
static_assert(std::is_same_v<bind_t<global_max_pooling2d<true>, shape<7, 5, 3>>::output_shape, shape<1, 1, 3>>);
static_assert(std::is_same_v<bind_t<zero_padding2d<>, shape<7, 5, 3>>::output_shape, shape<9, 7, 3>>);
static_assert(std::is_same_v<bind_t<zero_padding2d<2, 0>, shape<7, 5, 3>>::output_shape, shape<11, 5, 3>>);
static_assert(std::is_same_v<bind_t<zero_padding2d<0, 1, 3, 2>, shape<7, 5, 3>>::output_shape, shape<8, 10, 3>>);
static_assert(std::is_same_v<bind_t<up_sampling2d<>, shape<7, 5, 3>>::output_shape, shape<14, 10, 3>>);
static_assert(std::is_same_v<bind_t<up_sampling2d<3>, shape<7, 5, 3>>::output_shape, shape<21, 15, 3>>);
static_assert(std::is_same_v<bind_t<up_sampling2d<1, 4>, shape<7, 5, 3>>::output_shape, shape<7, 20, 3>>);
static_assert(param_count_v<bind_t<layer_normalization<>, shape<6, 10>>> == 2 * 10);
static_assert(layer<bind_t<leaky_relu<>, shape<4>, opaque>, opaque> &&
              layer<bind_t<layer_normalization<>, shape<4>, opaque>, opaque> &&
              layer<bind_t<zero_padding2d<1>, shape<4, 4, 1>, opaque>, opaque> &&
              layer<bind_t<global_max_pooling2d<>, shape<4, 4, 1>, opaque>, opaque>);

/// Layer spec `Spec` on input `In` and backend B, forward on host values.
template <class Spec, class In, class B>
std::vector<float> run_forward(const std::vector<float>& x, std::size_t n, const std::vector<float>& p = {},
                               bool training = false, std::uint64_t seed = 1) {
  using L = bind_t<Spec, In, B>;
  const B device;
  rng r(seed);
  layer_context<B> ctx{device, r, training};
  L l;
  auto xd = dtrain_test::upload(device, x), pd = dtrain_test::upload(device, p);
  auto yd = device.template allocate<float>(n * L::output_shape::size);
  l.forward(ctx, xd.data(), yd.data(), n, pd.data());
  return dtrain_test::download(device, yd);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(max_and_average_pooling_by_hand, B, backends) {
  // one 4x4 channel: 0..15 row-major; 2x2 windows
  std::vector<float> x(16);
  std::iota(x.begin(), x.end(), 0.0f);
  using in = shape<4, 4, 1>;
  BOOST_TEST((run_forward<max_pooling2d<2>, in, B>(x, 1) == std::vector<float>{5, 7, 13, 15}),
             boost::test_tools::per_element());
  BOOST_TEST((run_forward<average_pooling2d<2>, in, B>(x, 1) == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}),
             boost::test_tools::per_element());
  // 3x3 'same' windows with stride 2 over 4x4: output 2x2, pad 0 top/left, 1 bottom/right (TF),
  // and the average counts only cells inside the input.
  const float tl = (0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9.0f, br = (10 + 11 + 14 + 15) / 4.0f;
  const auto out = run_forward<average_pooling2d<3, strides<2>, padding::same>, in, B>(x, 1);
  BOOST_TEST(out[0] == tl, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(out[3] == br, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv2d_matches_a_direct_convolution, B, backends) {
  using spec = conv2d<2, 3, linear, strides<2>, padding::same>;
  using L = bind_t<spec, shape<5, 4, 3>>;
  rng r(3);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  for (auto& v : p) v += 0.1f * r.normal();
  const std::size_t n = 2;
  const auto x = dtrain_test::random_vector(n * 5 * 4 * 3, r);
  const auto y = run_forward<spec, shape<5, 4, 3>, B>(x, n, p);
  // direct loops: out 3x2, total pad rows (3-1)*2+3-5 = 2 -> top 1; cols (2-1)*2+3-4 = 1 -> left 0
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t oy = 0; oy < 3; ++oy)
      for (std::size_t ox = 0; ox < 2; ++ox)
        for (std::size_t f = 0; f < 2; ++f) {
          double acc = p[3 * 3 * 3 * 2 + f];
          for (std::size_t ky = 0; ky < 3; ++ky)
            for (std::size_t kx = 0; kx < 3; ++kx)
              for (std::size_t c = 0; c < 3; ++c) {
                const long iy = long(oy * 2 + ky) - 1, ix = long(ox * 2 + kx);
                if (iy < 0 || iy >= 5 || ix >= 4) continue;
                acc += double(x[((s * 5 + iy) * 4 + ix) * 3 + c]) * p[((ky * 3 + kx) * 3 + c) * 2 + f];
              }
          BOOST_TEST(y[((s * 3 + oy) * 2 + ox) * 2 + f] == acc, boost::test_tools::tolerance(1e-4));
        }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv1d_matches_a_direct_convolution, B, backends) {
  // Keras' Conv1D: out[t] = b + sum_k,c x[t * stride + k * dilation - left][c] kernel[k][c][f], the
  // steps outside the input zero; causal pads (kernel - 1) * dilation steps on the left only.
  auto check = [&]<class Spec, std::size_t Steps, std::size_t Out>(std::size_t kernel, std::size_t stride,
                                                                    std::size_t dilation, std::size_t left, const char* what) {
    using L = bind_t<Spec, shape<Steps, 3>>;
    static_assert(std::is_same_v<typename L::output_shape, shape<Out, 2>>);
    rng r(4);
    std::vector<float> p(param_count_v<L>);
    L{}.initialize(p, r);
    for (auto& v : p) v += 0.1f * r.normal();
    const std::size_t n = 2;
    const auto x = dtrain_test::random_vector(n * Steps * 3, r);
    const auto y = run_forward<Spec, shape<Steps, 3>, B>(x, n, p);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t t = 0; t < Out; ++t)
        for (std::size_t f = 0; f < 2; ++f) {
          double acc = p[kernel * 3 * 2 + f];
          for (std::size_t k = 0; k < kernel; ++k)
            for (std::size_t c = 0; c < 3; ++c) {
              const long at = long(t * stride + k * dilation) - long(left);
              if (at < 0 || at >= long(Steps)) continue;
              acc += double(x[(s * Steps + std::size_t(at)) * 3 + c]) * p[(k * 3 + c) * 2 + f];
            }
          BOOST_TEST_CONTEXT(what << ", sample " << s << " step " << t) {
            BOOST_TEST(y[(s * Out + t) * 2 + f] == acc, boost::test_tools::tolerance(1e-4));
          }
        }
  };
  check.template operator()<conv1d<2, 3>, 7, 5>(3, 1, 1, 0, "valid");
  check.template operator()<conv1d<2, 3, linear, padding::causal>, 7, 7>(3, 1, 1, 2, "causal");
  check.template operator()<conv1d<2, 3, linear, padding::causal, dilation_rate<2>>, 7, 7>(3, 1, 2, 4, "causal dilated");
  check.template operator()<conv1d<2, 2, linear, padding::causal, strides<2>>, 7, 4>(2, 2, 1, 1, "causal strided");
  check.template operator()<conv1d<2, 4, linear, padding::same, strides<2>>, 7, 4>(4, 2, 1, 1, "same strided");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(multi_head_attention_matches_the_textbook_formula, B, backends) {
  // softmax(q k^T / sqrt(key_dim)) v per head, in double, with every step masked after the query's when
  // causal; q, k, v and the output are the einsum projections of Keras' kernels (d, h, k) and (h, v, d).
  constexpr std::size_t T = 4, D = 5, H = 2, K = 3, V = 2;
  auto check = [&]<class Spec>(bool causal, const char* what) {
    using L = bind_t<Spec, shape<T, D>>;
    rng r(6);
    std::vector<float> p(param_count_v<L>);
    L{}.initialize(p, r);
    for (auto& v : p) v += 0.1f * r.normal();
    const std::size_t n = 2;
    const auto x = dtrain_test::random_vector(n * T * D, r);
    const auto y = run_forward<Spec, shape<T, D>, B>(x, n, p);
    const float *wq = p.data(), *bq = wq + D * H * K, *wk = bq + H * K, *bk = wk + D * H * K, *wv = bk + H * K,
                *bv = wv + D * H * V, *wo = bv + H * V, *bo = wo + H * V * D;
    for (std::size_t s = 0; s < n; ++s) {
      const float* xs = x.data() + s * T * D;
      auto proj = [&](const float* w, const float* b, std::size_t h, std::size_t j, std::size_t t, std::size_t width) {
        double a = b[h * width + j];
        for (std::size_t e = 0; e < D; ++e) a += double(xs[t * D + e]) * w[(e * H + h) * width + j];
        return a;
      };
      std::vector<double> heads(T * H * V, 0.0);
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t t = 0; t < T; ++t) {
          std::vector<double> w(T);
          double top = -1e300, total = 0.0;
          for (std::size_t u = 0; u < T; ++u) {
            double dot = 0.0;
            for (std::size_t j = 0; j < K; ++j) dot += proj(wq, bq, h, j, t, K) * proj(wk, bk, h, j, u, K);
            w[u] = causal && u > t ? -1e300 : dot / std::sqrt(double(K));
            top = std::max(top, w[u]);
          }
          for (auto& e : w) total += e = std::exp(e - top);
          for (std::size_t u = 0; u < T; ++u)
            for (std::size_t j = 0; j < V; ++j) heads[(t * H + h) * V + j] += w[u] / total * proj(wv, bv, h, j, u, V);
        }
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t e = 0; e < D; ++e) {
          double out = bo[e];
          for (std::size_t hv = 0; hv < H * V; ++hv) out += heads[t * H * V + hv] * wo[hv * D + e];
          BOOST_TEST_CONTEXT(what << ", sample " << s << " step " << t) {
            BOOST_TEST(y[(s * T + t) * D + e] == out, boost::test_tools::tolerance(1e-4));
          }
        }
    }
  };
  check.template operator()<multi_head_attention<H, K, value_dim<V>>>(false, "attention");
  check.template operator()<multi_head_attention<H, K, value_dim<V>, use_causal_mask<true>>>(true, "causal attention");
  check.template operator()<multi_head_attention<H, K, value_dim<V>, dropout<0.4f>>>(false, "attention with dropout, inferring");
}

// go_backwards<true> reads the steps last to first and returns its sequence in that order: on a sequence
// it is the forward layer on the sequence reversed, with the same weights.
BOOST_AUTO_TEST_CASE_TEMPLATE(go_backwards_is_the_layer_on_the_reversed_steps, B, backends) {
  constexpr std::size_t T = 5, F = 2, n = 3;
  auto check = [&]<class Backwards, class Forwards>(const char* what) {
    using L = bind_t<Forwards, shape<T, F>>;
    rng r(4);
    std::vector<float> p(param_count_v<L>);
    L{}.initialize(p, r);
    const auto x = dtrain_test::random_vector(n * T * F, r);
    std::vector<float> reversed(x.size());
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t f = 0; f < F; ++f) reversed[(i * T + t) * F + f] = x[(i * T + T - 1 - t) * F + f];
    const auto a = run_forward<Backwards, shape<T, F>, B>(x, n, p), b = run_forward<Forwards, shape<T, F>, B>(reversed, n, p);
    BOOST_TEST_REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], what << " " << i << boost::test_tools::tolerance(1e-6f));
  };
  check.template operator()<lstm<3, go_backwards<true>>, lstm<3>>("lstm");
  check.template operator()<gru<4, go_backwards<true>, return_sequences<true>>, gru<4, return_sequences<true>>>("gru sequences");
}

// bidirectional<L>: L's output beside that of L going backwards (the second half of the weights), whose
// sequence is put back in the input's order.
BOOST_AUTO_TEST_CASE_TEMPLATE(bidirectional_is_its_two_layers_side_by_side, B, backends) {
  constexpr std::size_t T = 4, F = 3, U = 2, n = 2;
  using Forwards = lstm<U, return_sequences<true>>;
  using Backwards = lstm<U, return_sequences<true>, go_backwards<true>>;
  using L = bind_t<bidirectional<Forwards>, shape<T, F>>;
  static_assert(std::is_same_v<L::output_shape, shape<T, 2 * U>>);
  rng r(8);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  const std::size_t half = p.size() / 2;
  const auto x = dtrain_test::random_vector(n * T * F, r);
  const auto y = run_forward<bidirectional<Forwards>, shape<T, F>, B>(x, n, p);
  const auto f = run_forward<Forwards, shape<T, F>, B>(x, n, std::vector<float>(p.begin(), p.begin() + half));
  const auto b = run_forward<Backwards, shape<T, F>, B>(x, n, std::vector<float>(p.begin() + half, p.end()));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < U; ++j) {
        BOOST_TEST(y[(i * T + t) * 2 * U + j] == f[(i * T + t) * U + j]);
        BOOST_TEST(y[(i * T + t) * 2 * U + U + j] == b[(i * T + T - 1 - t) * U + j]);
      }
}

// In training, dropout<Rate> zeroes attention probabilities (a zeroed one leaves out its value, the
// kept ones are scaled by 1 / (1 - Rate)): the output changes, by the seed's mask, the same on every backend.
BOOST_AUTO_TEST_CASE_TEMPLATE(attention_dropout_drops_probabilities_in_training, B, backends) {
  using Spec = multi_head_attention<2, 3, dropout<0.5f>>;
  using L = bind_t<Spec, shape<6, 4>>;
  rng r(3);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  const auto x = dtrain_test::random_vector(2 * 6 * 4, r);
  const auto inferred = run_forward<Spec, shape<6, 4>, B>(x, 2, p);
  const auto trained = run_forward<Spec, shape<6, 4>, B>(x, 2, p, true, 5);
  BOOST_TEST((trained != inferred));
  BOOST_TEST((run_forward<Spec, shape<6, 4>, B>(x, 2, p, true, 5) == trained), boost::test_tools::per_element());
  const auto on_cpu = run_forward<Spec, shape<6, 4>, cpu>(x, 2, p, true, 5);
  for (std::size_t i = 0; i < trained.size(); ++i)  // (other GEMM kernels: float rounding apart)
    BOOST_TEST(std::abs(trained[i] - on_cpu[i]) <= 1e-5f + 1e-4f * std::abs(on_cpu[i]), i << ": " << trained[i] << " vs " << on_cpu[i]);
  BOOST_TEST((run_forward<Spec, shape<6, 4>, B>(x, 2, p, true, 6) != trained));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_attention_matches_the_textbook_formula, B, backends) {
  // mha(query, value, key): 3 query steps of width 4 over 5 key steps (key width 2, value width 6),
  // causal (query step t sees key steps up to t); the output has the query's width
  constexpr std::size_t Tq = 3, Dq = 4, Tk = 5, Dk = 2, Dv = 6, H = 2, K = 3, V = 2;
  using Spec = multi_head_attention<H, K, value_dim<V>, use_causal_mask<true>>;
  using L = typename Spec::template bind_merge<B, shape<Tq, Dq>, shape<Tk, Dv>, shape<Tk, Dk>>;
  static_assert(std::is_same_v<typename L::output_shape, shape<Tq, Dq>>);
  rng r(8);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  for (auto& v : p) v += 0.1f * r.normal();
  const std::size_t n = 2;
  const auto xq = dtrain_test::random_vector(n * Tq * Dq, r), xv = dtrain_test::random_vector(n * Tk * Dv, r),
             xk = dtrain_test::random_vector(n * Tk * Dk, r);
  const B device;
  rng gen(1);
  layer_context<B> ctx{device, gen, false};
  L l;
  auto qd = dtrain_test::upload(device, xq), vd = dtrain_test::upload(device, xv), kd = dtrain_test::upload(device, xk),
       pd = dtrain_test::upload(device, p);
  auto yd = device.template allocate<float>(n * Tq * Dq);
  l.forward(ctx, {qd.data(), vd.data(), kd.data()}, yd.data(), n, pd.data());
  const auto y = dtrain_test::download(device, yd);
  const float *wq = p.data(), *bq = wq + Dq * H * K, *wk = bq + H * K, *bk = wk + Dk * H * K, *wv = bk + H * K,
              *bv = wv + Dv * H * V, *wo = bv + H * V, *bo = wo + H * V * Dq;
  for (std::size_t s = 0; s < n; ++s) {
    auto proj = [&](const float* x, std::size_t width, const float* w, const float* b, std::size_t h, std::size_t j,
                    std::size_t t, std::size_t cols) {
      double a = b[h * cols + j];
      for (std::size_t e = 0; e < width; ++e) a += double(x[t * width + e]) * w[(e * H + h) * cols + j];
      return a;
    };
    const float *q = xq.data() + s * Tq * Dq, *k = xk.data() + s * Tk * Dk, *v = xv.data() + s * Tk * Dv;
    std::vector<double> heads(Tq * H * V, 0.0);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < Tq; ++t) {
        std::vector<double> w(Tk);
        double top = -1e300, total = 0.0;
        for (std::size_t u = 0; u < Tk; ++u) {
          double dot = 0.0;
          for (std::size_t j = 0; j < K; ++j) dot += proj(q, Dq, wq, bq, h, j, t, K) * proj(k, Dk, wk, bk, h, j, u, K);
          w[u] = u > t ? -1e300 : dot / std::sqrt(double(K));
          top = std::max(top, w[u]);
        }
        for (auto& e : w) total += e = std::exp(e - top);
        for (std::size_t u = 0; u < Tk; ++u)
          for (std::size_t j = 0; j < V; ++j) heads[(t * H + h) * V + j] += w[u] / total * proj(v, Dv, wv, bv, h, j, u, V);
      }
    for (std::size_t t = 0; t < Tq; ++t)
      for (std::size_t e = 0; e < Dq; ++e) {
        double out = bo[e];
        for (std::size_t hv = 0; hv < H * V; ++hv) out += heads[t * H * V + hv] * wo[hv * Dq + e];
        BOOST_TEST_CONTEXT("sample " << s << " step " << t) {
          BOOST_TEST(y[(s * Tq + t) * Dq + e] == out, boost::test_tools::tolerance(1e-4));
        }
      }
  }
  // two inputs: the value is the key too, and query = value = x is self-attention
  using Self = multi_head_attention<H, K, value_dim<V>>;
  using Two = typename Self::template bind_merge<B, shape<Tk, Dv>, shape<Tk, Dv>>;
  std::vector<float> p2(param_count_v<Two>);
  Two{}.initialize(p2, r);
  Two two;
  auto p2d = dtrain_test::upload(device, p2), y2 = device.template allocate<float>(n * Tk * Dv);
  two.forward(ctx, {vd.data(), vd.data()}, y2.data(), n, p2d.data());
  BOOST_TEST(dtrain_test::download(device, y2) == (run_forward<Self, shape<Tk, Dv>, B>(xv, n, p2)),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(pooling1d_by_hand, B, backends) {
  // one channel of 7 steps: max over pairs (the 7th step left out); average over 3 steps with stride 2
  // and same padding (TF: 4 windows need 9 steps, one padded before and one after; the steps inside averaged)
  const std::vector<float> x{1, 5, 2, -1, 4, 0, 3};
  const auto mx = run_forward<max_pooling1d<2>, shape<7, 1>, B>(x, 1, {});
  BOOST_TEST(mx == (std::vector<float>{5, 2, 4}), boost::test_tools::per_element());
  const auto av = run_forward<average_pooling1d<3, strides<2>, padding::same>, shape<7, 1>, B>(x, 1, {});
  const std::vector<float> want{(1 + 5) / 2.0f, (5 + 2 - 1) / 3.0f, (-1 + 4 + 0) / 3.0f, (0 + 3) / 2.0f};
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(av[i] == want[i], boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(position_embedding_gives_its_first_rows_whatever_the_input, B, backends) {
  using spec = position_embedding<5>;
  using L = bind_t<spec, shape<3, 2>>;
  std::vector<float> p(param_count_v<L>);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = float(i) + 0.5f;
  rng r(2);
  const auto y = run_forward<spec, shape<3, 2>, B>(dtrain_test::random_vector(2 * 3 * 2, r), 2, p);
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t i = 0; i < 6; ++i) BOOST_TEST(y[s * 6 + i] == p[i]);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(zero_padding_global_pooling_and_leaky_relu_by_hand, B, backends) {
  // one 2x2 channel 1, 2 / 3, 4
  const std::vector<float> x{1, 2, 3, 4};
  using in = shape<2, 2, 1>;
  // top 0, bottom 1, left 1, right 0: a 3x3 plane with the input at its top right
  BOOST_TEST((run_forward<zero_padding2d<0, 1, 1, 0>, in, B>(x, 1) == std::vector<float>{0, 1, 2, 0, 3, 4, 0, 0, 0}),
             boost::test_tools::per_element());
  // up-sampling by 1 row and 2 columns: each value twice along its row
  BOOST_TEST((run_forward<up_sampling2d<1, 2>, in, B>(x, 1) == std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}),
             boost::test_tools::per_element());
  BOOST_TEST((run_forward<global_average_pooling2d<>, in, B>(x, 1) == std::vector<float>{2.5f}),
             boost::test_tools::per_element());
  BOOST_TEST((run_forward<global_max_pooling2d<>, shape<1, 2, 2>, B>(x, 1) == std::vector<float>{3, 4}),
             boost::test_tools::per_element());
  BOOST_TEST((run_forward<leaky_relu<0.5f>, shape<4>, B>({-2, -0.0f, 0.5f, 3}, 1) == std::vector<float>{-1, 0, 0.5f, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(layer_normalization_starts_as_a_standardisation, B, backends) {
  using L = bind_t<layer_normalization<>, shape<2, 4>, B>;
  rng r(3);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  BOOST_TEST((p == std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}), boost::test_tools::per_element());
  // each row of 4 is standardised on its own: row 1, 2, 3, 4 has mean 2.5 and variance 1.25
  const auto y = run_forward<layer_normalization<>, shape<2, 4>, B>({1, 2, 3, 4, 10, 10, 10, 14}, 1, p);
  const float inv = 1.0f / std::sqrt(1.25f + 1e-3f);
  BOOST_TEST(y[0] == -1.5f * inv, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(y[3] == 1.5f * inv, boost::test_tools::tolerance(1e-6f));
  const float inv2 = 1.0f / std::sqrt(3.0f + 1e-3f);  // 10, 10, 10, 14: mean 11, variance 3
  BOOST_TEST(y[4] == -inv2, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(y[7] == 3.0f * inv2, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(batch_normalization_by_hand, B, backends) {
  using L = bind_t<batch_normalization<{.momentum = 0.9f}>, shape<2>, B>;
  static_assert(param_count_v<L> == 4 && state_count_v<L> == 4);
  rng r(3);
  std::vector<float> p(param_count_v<L>), st(state_count_v<L>);
  L l;
  l.initialize(p, r);
  l.initialize_state(st);
  BOOST_TEST((p == std::vector<float>{1, 1, 0, 0}), boost::test_tools::per_element());   // gamma, beta
  BOOST_TEST((st == std::vector<float>{0, 0, 1, 1}), boost::test_tools::per_element());  // moving mean, variance
  p = {2, 1, 0.5f, 0};  // gamma (2, 1), beta (0.5, 0)
  // 4 rows of 2 channels: channel 0 is 1, 2, 3, 6 (mean 3, biased variance 3.5), channel 1 is 0 everywhere
  const std::vector<float> x{1, 0, 2, 0, 3, 0, 6, 0};
  const B device;
  auto xd = dtrain_test::upload(device, x), pd = dtrain_test::upload(device, p), sd = dtrain_test::upload(device, st);
  auto yd = device.template allocate<float>(8);
  layer_context<B> train{device, r, true, sd.data()};
  l.forward(train, xd.data(), yd.data(), 4, pd.data());
  const auto y = dtrain_test::download(device, yd);
  const float inv = 1.0f / std::sqrt(3.5f + 1e-3f);
  const std::vector<float> want{2 * -2 * inv + 0.5f, 0, 2 * -inv + 0.5f, 0, 0.5f, 0, 2 * 3 * inv + 0.5f, 0};
  BOOST_TEST(y == want, boost::test_tools::tolerance(1e-5f) << boost::test_tools::per_element());
  // moving = 0.9 moving + 0.1 batch: mean (0.3, 0), variance (0.9 + 0.35, 0.9)
  const auto moved = dtrain_test::download(device, sd);
  BOOST_TEST(moved == (std::vector<float>{0.3f, 0, 1.25f, 0.9f}), boost::test_tools::tolerance(1e-6f) << boost::test_tools::per_element());
  // inference normalises by the moving statistics: (x - 0.3) / sqrt(1.25 + eps) gamma + beta
  layer_context<B> infer{device, r, false, sd.data()};
  l.forward(infer, xd.data(), yd.data(), 4, pd.data());
  const auto yi = dtrain_test::download(device, yd);
  BOOST_TEST(yi[6] == 2 * (6 - 0.3f) / std::sqrt(1.25f + 1e-3f) + 0.5f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(yi[7] == 0.0f);
  BOOST_TEST(dtrain_test::download(device, sd) == moved, boost::test_tools::per_element());  // inference moves nothing
  // backward after inference: the statistics are constants, dx = gamma dy / sqrt(moving variance + eps)
  auto dyd = dtrain_test::upload(device, std::vector<float>(8, 1.0f));
  auto dxd = device.template allocate<float>(8), gd = device.template allocate<float>(4);
  l.backward(infer, xd.data(), yd.data(), dyd.data(), dxd.data(), 4, pd.data(), gd.data());
  const auto dx = dtrain_test::download(device, dxd), g = dtrain_test::download(device, gd);
  BOOST_TEST(dx[0] == 2.0f / std::sqrt(1.25f + 1e-3f), boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(dx[1] == 1.0f / std::sqrt(0.9f + 1e-3f), boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(g[2] == 4.0f);  // d beta: the column sum of dy
}

BOOST_AUTO_TEST_CASE_TEMPLATE(embedding_rows_and_index_checks, B, backends) {
  static_assert(std::is_same_v<bind_t<embedding<10, 4>, shape<7>>::output_shape, shape<7, 4>>);
  // table row v is (v, v, v) + (0, 0.1, 0.2); an index outside the table reads zeros
  std::vector<float> table(5 * 3);
  for (std::size_t v = 0; v < 5; ++v)
    for (std::size_t d = 0; d < 3; ++d) table[v * 3 + d] = float(v) + 0.1f * float(d);
  const auto y = run_forward<embedding<5, 3>, shape<3>, B>({4, 0, 9}, 1, table);
  BOOST_TEST(y == (std::vector<float>{4, 4.1f, 4.2f, 0, 0.1f, 0.2f, 0, 0, 0}), boost::test_tools::per_element());
  // a model fed indices checks them first, naming the layer and the value
  using lookup = sequential<input<3>, embedding<5, 2>, flatten, dense<2>>;
  lookup m;
  tensor x = zeros({2, 3});
  x(1, 2) = 5.0f;
  BOOST_CHECK_EXCEPTION(m.predict_on_batch(x), value_error, [](const value_error& e) {
    return std::string(e.what()).find("embedding 'embedding': input value 5.000000 (sample 1, position 2) is not an "
                                      "index in [0, 5)") != std::string::npos;
  });
  x(1, 2) = 1.5f;
  BOOST_CHECK_THROW(m.predict_on_batch(x), value_error);
  x(1, 2) = 4.0f;
  BOOST_TEST(m.predict_on_batch(x).shape()[1] == 2u);
}

BOOST_AUTO_TEST_CASE(glorot_uniform_bounds_and_zero_bias) {
  using L = bind_t<dense<30, relu>, shape<50>>;
  rng r(11);
  L l;
  std::vector<float> p(param_count_v<L>);
  l.initialize(p, r);
  const float limit = std::sqrt(6.0f / 80.0f);
  float lo = 0, hi = 0;
  double sum_sq = 0;
  for (std::size_t i = 0; i < 50 * 30; ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]), sum_sq += p[i] * p[i];
  BOOST_TEST(lo >= -limit);
  BOOST_TEST(hi <= limit);
  BOOST_TEST(hi > 0.9f * limit);  // it does fill the range
  BOOST_TEST(sum_sq / 1500.0 == limit * limit / 3.0, boost::test_tools::tolerance(0.1));  // variance of U(-l, l)
  for (std::size_t i = 50 * 30; i < p.size(); ++i) BOOST_TEST(p[i] == 0.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dropout_is_identity_at_inference_and_scaled_in_training, B, backends) {
  using in = shape<1000>;
  std::vector<float> x(2000, 1.0f);
  BOOST_TEST((run_forward<dropout<0.25f>, in, B>(x, 2, {}, false) == x), boost::test_tools::per_element());
  const auto y = run_forward<dropout<0.25f>, in, B>(x, 2, {}, true, 5);
  std::size_t zeros = 0;
  for (float v : y) {
    BOOST_TEST((v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6f));
    zeros += v == 0.0f;
  }
  BOOST_TEST(zeros > 400u);  // expected 500 of 2000, sd ~19
  BOOST_TEST(zeros < 600u);
  BOOST_TEST((run_forward<dropout<0.25f>, in, B>(x, 2, {}, true, 5) == y),
             boost::test_tools::per_element());  // same seed, same mask
  BOOST_TEST((run_forward<dropout<0.25f>, in, B>(x, 2, {}, true, 6) != y));
  BOOST_TEST((run_forward<dropout<0.25f>, in, cpu>(x, 2, {}, true, 5) == y),
             boost::test_tools::per_element());  // and the same mask on every backend
}

BOOST_AUTO_TEST_CASE_TEMPLATE(spatial_dropout2d_drops_whole_channels, B, backends) {
  using in = shape<3, 4, 100>;  // 2 samples x 100 channels of 12 pixels each
  std::vector<float> x(2 * in::size);
  std::iota(x.begin(), x.end(), 1.0f);
  BOOST_TEST((run_forward<spatial_dropout2d<0.4f>, in, B>(x, 2, {}, false) == x), boost::test_tools::per_element());
  const auto y = run_forward<spatial_dropout2d<0.4f>, in, B>(x, 2, {}, true, 7);
  std::size_t dropped = 0;
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t c = 0; c < 100; ++c) {
      const std::size_t first = s * in::size + c;
      const bool drop = y[first] == 0.0f;
      dropped += drop;
      for (std::size_t p = 0; p < 12; ++p) {  // every pixel of a channel shares its fate
        const std::size_t i = first + p * 100;
        BOOST_TEST(y[i] == (drop ? 0.0f : x[i] / 0.6f), boost::test_tools::tolerance(1e-6f));
      }
    }
  BOOST_TEST(dropped > 55u);  // expected 80 of 200, sd ~7
  BOOST_TEST(dropped < 105u);
  BOOST_TEST((run_forward<spatial_dropout2d<0.4f>, in, B>(x, 2, {}, true, 7) == y), boost::test_tools::per_element());
  BOOST_TEST((run_forward<spatial_dropout2d<0.4f>, in, cpu>(x, 2, {}, true, 7) == y),
             boost::test_tools::per_element());  // the same mask on every backend
}

BOOST_AUTO_TEST_CASE_TEMPLATE(softmax_rows_sum_to_one_and_gelu_values, B, backends) {
  const std::vector<float> v = run_forward<softmax, shape<3>, B>({1000.0f, 1001.0f, 1002.0f, -3.0f, 0.0f, 3.0f}, 2);
  BOOST_TEST(v[0] + v[1] + v[2] == 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(v[2] == std::exp(2.0f) / (1 + std::exp(1.0f) + std::exp(2.0f)), boost::test_tools::tolerance(1e-6f));
  const std::vector<float> g = run_forward<gelu, shape<3>, B>({-1.0f, 0.0f, 1.0f}, 1);
  // x * Phi(x): Phi(1) = 0.841344746
  BOOST_TEST(g[2] == 0.841344746f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(g[0] == -(1.0f - 0.841344746f), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(l2_regularizer_penalty_and_gradient, B, backends) {
  const B device;
  auto w = dtrain_test::upload(device, {1.0f, -2.0f, 0.5f}), g = dtrain_test::upload(device, {0.0f, 1.0f, 0.0f});
  auto penalty = dtrain_test::upload(device, {1.0f});  // the penalty adds to what is there
  l2<0.1f>::apply(device, 3, pointer_t<B, const float>(w.data()), g.data(), 0.5f, penalty.data());
  BOOST_TEST(dtrain_test::download(device, penalty)[0] == 1.0f + 0.1f * (1 + 4 + 0.25f), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(dtrain_test::download(device, g)[1] == 1.0f + 0.5f * 2 * 0.1f * -2.0f, boost::test_tools::tolerance(1e-6f));
  // without gradients: the penalty alone
  l2<0.1f>::apply(device, 3, pointer_t<B, const float>(w.data()), pointer_t<B, float>{}, 0.5f, penalty.data());
  BOOST_TEST(dtrain_test::download(device, penalty)[0] == 1.0f + 0.2f * (1 + 4 + 0.25f), boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(l1_and_l1_l2_penalties_and_gradients, B, backends) {
  const B device;
  auto w = dtrain_test::upload(device, {1.0f, -2.0f, 0.0f}), g = dtrain_test::upload(device, {0.0f, 1.0f, 0.0f});
  auto penalty = dtrain_test::upload(device, {0.0f});
  l1<0.1f>::apply(device, 3, pointer_t<B, const float>(w.data()), g.data(), 0.5f, penalty.data());
  BOOST_TEST(dtrain_test::download(device, penalty)[0] == 0.1f * 3.0f, boost::test_tools::tolerance(1e-6f));
  const auto grads = dtrain_test::download(device, g);
  BOOST_TEST(grads[0] == 0.05f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grads[1] == 1.0f - 0.05f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grads[2] == 0.0f);  // sign(0) = 0
  // L1L2(0.1, 0.2): 0.1 * 3 + 0.2 * 5
  auto both = dtrain_test::upload(device, {0.0f});
  l1_l2<0.1f, 0.2f>::apply(device, 3, pointer_t<B, const float>(w.data()), pointer_t<B, float>{}, 1.0f, both.data());
  BOOST_TEST(dtrain_test::download(device, both)[0] == 0.3f + 1.0f, boost::test_tools::tolerance(1e-6f));
  static_assert(!l1_l2<>::active);
}

namespace {
/// d penalty / d params of the regularizers of layer spec `Spec` against central differences.
template <class Spec, class In, class B>
void check_penalty_gradient(const std::string& what) {
  using L = bind_t<Spec, In, B>;
  rng r(3);
  const B device;
  L layer;
  std::vector<float> params(param_count_v<L>);
  layer.initialize(params, r);
  for (auto& p : params) p += 0.3f * r.normal();  // biases away from zero (l1's kink)
  auto pd = device.template allocate<float>(params.size()), gd = device.template allocate<float>(params.size());
  auto pen = device.template allocate<float>(1);
  rng unused(1);
  layer_context<B> ctx{device, unused, true};
  auto f = [&]() -> double {
    device.upload(params.size(), params.data(), pd.data());
    device.fill(1, 0.0f, pen.data());
    layer.regularization(ctx, pointer_t<B, const float>(pd.data()), pointer_t<B, float>{}, 1.0f, pen.data());
    return dtrain_test::download(device, pen)[0];
  };
  f();
  device.fill(params.size(), 0.0f, gd.data());
  layer.regularization(ctx, pointer_t<B, const float>(pd.data()), gd.data(), 1.0f, pen.data());
  dtrain_test::check_gradient(what, params, dtrain_test::download(device, gd), f);
}
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(kernel_and_bias_regularizers_gradients, B, backends) {
  check_penalty_gradient<dense<3, relu, l1_l2<0.01f, 0.02f>, bias_regularizer<l1<0.05f>>>, shape<4>, B>("dense");
  check_penalty_gradient<conv2d<2, 3, linear, l1<0.01f>, bias_regularizer<l2<0.1f>>>, shape<5, 5, 2>, B>("conv2d");
  check_penalty_gradient<conv2d_transpose<2, 3, linear, bias_regularizer<l1_l2<0.1f, 0.1f>>>, shape<3, 3, 2>, B>(
      "conv2d_transpose");
  // the bias alone: a dense layer whose kernel is free has the bias' l1 penalty only
  using D = bind_t<dense<2, linear, bias_regularizer<l1<0.5f>>>, shape<3>, B>;
  const B device;
  auto p = dtrain_test::upload(device, {1, 1, 1, 1, 1, 1, 0.5f, -2.0f}), pen = dtrain_test::upload(device, {0.0f});
  rng unused(1);
  layer_context<B> ctx{device, unused, true};
  D{}.regularization(ctx, pointer_t<B, const float>(p.data()), pointer_t<B, float>{}, 1.0f, pen.data());
  BOOST_TEST(dtrain_test::download(device, pen)[0] == 0.5f * 2.5f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(time_distributed_applies_the_layer_to_every_step_alike, B, backends) {
  // a sequence of 4 frames of 5 x 5 x 2: each frame's output is the conv2d's output for that frame alone
  using frames = shape<4, 5, 5, 2>;
  using td = time_distributed<conv2d<3, 2, relu>>;
  using L = bind_t<td, frames>;
  static_assert(std::is_same_v<typename L::output_shape, shape<4, 4, 4, 3>>);
  static_assert(param_count_v<L> == 2 * 2 * 2 * 3 + 3);
  rng r(6);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  for (auto& v : p) v += 0.1f * r.normal();
  const std::size_t n = 2, frame_in = 5 * 5 * 2, frame_out = 4 * 4 * 3;
  const auto x = dtrain_test::random_vector(n * 4 * frame_in, r);
  const auto y = run_forward<td, frames, B>(x, n, p);
  for (std::size_t f = 0; f < n * 4; ++f) {
    const std::vector<float> one(x.begin() + std::ptrdiff_t(f * frame_in), x.begin() + std::ptrdiff_t((f + 1) * frame_in));
    const auto alone = run_forward<conv2d<3, 2, relu>, shape<5, 5, 2>, B>(one, 1, p);
    const std::vector<float> got(y.begin() + std::ptrdiff_t(f * frame_out), y.begin() + std::ptrdiff_t((f + 1) * frame_out));
    // (within float rounding: one frame and eight are GEMMs of other shapes, whose plans may differ)
    BOOST_TEST_CONTEXT("frame " << f) {
      BOOST_TEST(got == alone, boost::test_tools::tolerance(1e-5f) << boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(recurrent_layers_start_as_keras_starts_them) {
  // Keras' Orthogonal: the (units, 4 units) recurrent kernel has orthonormal rows; unit_forget_bias
  using L = bind_t<lstm<4>, shape<3, 2>>;
  std::vector<float> p(param_count_v<L>);
  rng r(2);
  L{}.initialize(p, r);
  const float* u = p.data() + L::recurrent;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      double dot = 0.0;
      for (std::size_t k = 0; k < 16; ++k) dot += double(u[i * 16 + k]) * u[j * 16 + k];
      BOOST_TEST(dot == (i == j ? 1.0 : 0.0), boost::test_tools::tolerance(1e-5));
    }
  const std::vector<float> bias(p.begin() + L::bias_at, p.end());
  BOOST_TEST((bias == std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}), boost::test_tools::per_element());
  using G = bind_t<gru<3>, shape<3, 2>>;
  static_assert(param_count_v<G> == 2 * 9 + 3 * 9 + 2 * 9);
  std::vector<float> q(param_count_v<G>);
  G{}.initialize(q, r);
  BOOST_TEST(std::all_of(q.begin() + G::bias_at, q.end(), [](float v) { return v == 0.0f; }));
}

BOOST_AUTO_TEST_SUITE_END()
