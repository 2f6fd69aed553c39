// The cpu backend's conv2d works in blocks of output rows spread over the thread budget, and sums its
// kernel and bias gradients over fixed slices of the rows (im2col) or samples (the direct convolution). On a
// batch with many blocks and every slice in use, its forward and backward must match loops written out
// here, and 1 and 2 threads must give the same bits; the direct convolution must match im2col + GEMM on
// every geometry it takes.
#include "support/gradcheck.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {

using L = bind_t<conv2d<8, 3, relu, padding::same>, shape<12, 11, 2>>;
constexpr std::size_t H = 12, W = 11, C = 2, F = 8, K = 3;
constexpr std::size_t batch = 130;  // 130 * 132 rows: more than 8 slices of 2048-row blocks

struct pass {
  std::vector<float> y, grads, dx;
};

pass run(int threads, const std::vector<float>& x, const std::vector<float>& p, const std::vector<float>& dy) {
  const int before = num_threads();
  set_num_threads(threads);
  rng r(1);
  cpu dev;
  layer_context<cpu> ctx{dev, r, true};
  L l;
  pass out{std::vector<float>(batch * L::output_shape::size), std::vector<float>(p.size()),
           std::vector<float>(x.size())};
  l.forward(ctx, x.data(), out.y.data(), batch, p.data());
  auto d = dy;
  l.backward(ctx, x.data(), out.y.data(), d.data(), out.dx.data(), batch, p.data(), out.grads.data());
  set_num_threads(before);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_blocked_conv)

BOOST_AUTO_TEST_CASE(conv2d_blocks_and_slices_match_direct_loops) {
  rng r(5);
  std::vector<float> p(param_count_v<L>);
  L{}.initialize(p, r);
  for (std::size_t f = 0; f < F; ++f) p[K * K * C * F + f] = 0.05f * r.normal();
  const auto x = dtrain_test::random_vector(batch * H * W * C, r);
  const auto dy = dtrain_test::random_vector(batch * H * W * F, r);
  const pass one = run(1, x, p, dy);

  // direct loops in double: same padding, pad 1 on each side for a 3x3 window at stride 1
  std::vector<double> gw(K * K * C * F), gb(F), dx(x.size());
  std::size_t bad_y = 0, bad_dx = 0;
  for (std::size_t s = 0; s < batch; ++s)
    for (std::size_t oy = 0; oy < H; ++oy)
      for (std::size_t ox = 0; ox < W; ++ox)
        for (std::size_t f = 0; f < F; ++f) {
          double z = p[K * K * C * F + f];
          auto tap = [&](auto&& g) {
            for (std::size_t ky = 0; ky < K; ++ky)
              for (std::size_t kx = 0; kx < K; ++kx) {
                const long iy = long(oy + ky) - 1, ix = long(ox + kx) - 1;
                if (iy < 0 || ix < 0 || iy >= long(H) || ix >= long(W)) continue;
                for (std::size_t c = 0; c < C; ++c)
                  g(((s * H + std::size_t(iy)) * W + std::size_t(ix)) * C + c, ((ky * K + kx) * C + c) * F + f);
              }
          };
          tap([&](std::size_t xi, std::size_t wi) { z += double(x[xi]) * p[wi]; });
          const std::size_t o = ((s * H + oy) * W + ox) * F + f;
          const double y = z > 0 ? z : 0;
          if (!(std::abs(one.y[o] - y) <= 1e-4 * (1 + std::abs(y)))) ++bad_y;
          const double dz = z > 0 ? dy[o] : 0.0;
          gb[f] += dz;
          tap([&](std::size_t xi, std::size_t wi) {
            gw[wi] += dz * x[xi];
            dx[xi] += dz * p[wi];
          });
        }
  BOOST_TEST(bad_y == 0u);
  for (std::size_t i = 0; i < gw.size(); ++i) BOOST_TEST(one.grads[i] == gw[i], tt::tolerance(1e-3));
  for (std::size_t f = 0; f < F; ++f) BOOST_TEST(one.grads[gw.size() + f] == gb[f], tt::tolerance(1e-3));
  for (std::size_t i = 0; i < dx.size(); ++i)
    if (!(std::abs(one.dx[i] - dx[i]) <= 1e-4 * (1 + std::abs(dx[i])))) ++bad_dx;
  BOOST_TEST(bad_dx == 0u);

  const pass two = run(2, x, p, dy);
  BOOST_TEST(two.y == one.y);
  BOOST_TEST(two.grads == one.grads);  // fixed slices: the same sums whatever the thread count
  BOOST_TEST(two.dx == one.dx);
}

namespace {

/// Forward, then backward with every gradient, of the conv2d kernels K of window G, on `threads` threads:
/// y, the kernel and bias gradients and dx, one after the other.
template <class K, window_geometry G, activation_kind A>
std::vector<float> conv_pass(int threads, std::size_t n, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, const std::vector<float>& dy0) {
  const int before = num_threads();
  set_num_threads(threads);
  std::vector<float> y(n * G.out_size()), z(needs_input(A) ? y.size() : 0), work(K::workspace(n)),
      scratch(K::backward_workspace(n, true)), gw(G.kernel_values()), gb(G.f), dx(x.size()), dy = dy0;
  K::forward(n, x.data(), w.data(), b.data(), y.data(), needs_input(A) ? z.data() : nullptr, work.data());
  K::backward(n, needs_input(A) ? z.data() : nullptr, y.data(), dy.data(), w.data(), work.data(), scratch.data(),
              gw.data(), gb.data(), dx.data());
  set_num_threads(before);
  std::vector<float> all = y;
  for (const auto* v : {&gw, &gb, &dx}) all.insert(all.end(), v->begin(), v->end());
  return all;
}

template <window_geometry G, activation_kind A>
void direct_matches_im2col(std::size_t n) {
  static_assert(detail::direct_conv2d_eligible(G));
  rng r(G.h * 100 + G.kw * 10 + G.f);
  const auto x = dtrain_test::random_vector(n * G.in_size(), r), w = dtrain_test::random_vector(G.kernel_values(), r);
  const auto b = dtrain_test::random_vector(G.f, r), dy = dtrain_test::random_vector(n * G.out_size(), r);
  const auto want = conv_pass<detail::conv2d_kernels<G, A>, G, A>(1, n, x, w, b, dy);
  const auto one = conv_pass<detail::direct_conv2d_kernels<G, A>, G, A>(1, n, x, w, b, dy);
  const auto three = conv_pass<detail::direct_conv2d_kernels<G, A>, G, A>(3, n, x, w, b, dy);
  BOOST_TEST(one == three, tt::per_element());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) wrong += !(std::abs(one[i] - want[i]) <= 2e-4f * (1 + std::abs(want[i])));
  BOOST_TEST(wrong == 0u);
}

}  // namespace

BOOST_AUTO_TEST_CASE(direct_conv2d_matches_im2col) {
  using enum activation_kind;
  // same 3 x 3 (ResNets' convolution), valid, 5 x 5 same, a 3 x 2 kernel (same pads 1 row above, none left),
  // 1 x 1; filters that fill whole vectors and ones that do not; activations with and without their input
  direct_matches_im2col<window_geometry{9, 8, 3, 3, 3, 1, 1, 1, 1, 9, 8, 16}, relu>(11);
  direct_matches_im2col<window_geometry{9, 8, 5, 3, 3, 1, 1, 0, 0, 7, 6, 12}, linear>(10);
  direct_matches_im2col<window_geometry{7, 7, 4, 5, 5, 1, 1, 2, 2, 7, 7, 8}, gelu>(3);
  direct_matches_im2col<window_geometry{6, 7, 3, 3, 2, 1, 1, 1, 0, 6, 7, 5}, linear>(4);
  direct_matches_im2col<window_geometry{5, 5, 7, 1, 1, 1, 1, 0, 0, 5, 5, 33}, sigmoid>(2);
}

BOOST_AUTO_TEST_SUITE_END()
