// The cpu backend's conv2d works in blocks of output rows spread over the thread budget, and sums its
// kernel and bias gradients over fixed slices of the rows. On a batch with many blocks and every slice in use, its
// forward and backward must match direct loops, and 1 and 2 threads must give the same bits.
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

BOOST_AUTO_TEST_SUITE_END()
