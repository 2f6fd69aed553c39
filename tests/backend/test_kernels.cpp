// Every backend's kernels against loops written out here: the BLAS-like ones, the bias helpers, the
// counter-based dropout mask (the same bits on every backend), the losses' and metrics' reductions.
#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::download;
using dtrain_test::upload;
namespace tt = boost::test_tools;

namespace {
template <class B>
using cptr = pointer_t<B, const float>;
}  // namespace

BOOST_AUTO_TEST_SUITE(backend_kernels)

BOOST_AUTO_TEST_CASE_TEMPLATE(gemm_all_transposes_match_naive_loops, B, backends) {
  rng r(9);
  const std::size_t m = 5, n = 7, k = 3;
  for (auto ta : {transpose::no, transpose::yes})
    for (auto tb : {transpose::no, transpose::yes}) {
      auto a = dtrain_test::random_vector(m * k, r), b = dtrain_test::random_vector(k * n, r);
      auto c = dtrain_test::random_vector(m * n, r);
      auto expect = c;
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          double acc = 0;
          for (std::size_t p = 0; p < k; ++p) {
            const float av = ta == transpose::yes ? a[p * m + i] : a[i * k + p];
            const float bv = tb == transpose::yes ? b[j * k + p] : b[p * n + j];
            acc += double(av) * bv;
          }
          expect[i * n + j] = float(2.0 * acc + 0.5 * c[i * n + j]);
        }
      const B dev;
      auto ad = upload(dev, a), bd = upload(dev, b), cd = upload(dev, c);
      dev.gemm(ta, tb, m, n, k, 2.0f, cptr<B>(ad.data()), ta == transpose::yes ? m : k, cptr<B>(bd.data()),
               tb == transpose::yes ? k : n, 0.5f, cd.data(), n);
      BOOST_TEST(download(dev, cd) == expect, boost::test_tools::tolerance(1e-5f) << boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(blas_like_kernels, B, backends) {
  const B dev;
  auto x = upload(dev, {1, 2, 3, 4, 5, 6}), y = upload(dev, {1, 1, 1, 1, 1, 1}), z = dev.template allocate<float>(6);
  dev.axpy(6, 2.0f, cptr<B>(x.data()), y.data());
  BOOST_TEST((download(dev, y) == std::vector<float>{3, 5, 7, 9, 11, 13}), tt::per_element());
  dev.multiply(6, cptr<B>(x.data()), cptr<B>(y.data()), z.data());
  BOOST_TEST((download(dev, z) == std::vector<float>{3, 10, 21, 36, 55, 78}), tt::per_element());
  dev.fill(3, -1.0f, z.data() + 2);
  dev.copy(2, cptr<B>(x.data()) + 4, z.data());
  BOOST_TEST((download(dev, z) == std::vector<float>{5, 6, -1, -1, -1, 78}), tt::per_element());
  // x as 2 rows of 3: column sums, a row broadcast, the sum of everything
  auto cols = dev.template allocate<float>(3), total = dev.template allocate<float>(1);
  dev.column_sums(2, 3, cptr<B>(x.data()), cols.data());
  BOOST_TEST((download(dev, cols) == std::vector<float>{5, 7, 9}), tt::per_element());
  dev.broadcast_rows(2, 3, cptr<B>(cols.data()), z.data());
  BOOST_TEST((download(dev, z) == std::vector<float>{5, 7, 9, 5, 7, 9}), tt::per_element());
  dev.sum(6, cptr<B>(x.data()), total.data());
  BOOST_TEST(download(dev, total)[0] == 21.0f);
  // x as 2 rows of 3 (of a row stride 3) transposed into 3 rows of 2 with a row stride of 3
  auto t = upload(dev, std::vector<float>(9, -1.0f));
  dev.transpose_matrix(2, 3, cptr<B>(x.data()), 3, t.data(), 3);
  BOOST_TEST((download(dev, t) == std::vector<float>{1, 4, -1, 2, 5, -1, 3, 6, -1}), tt::per_element());
  // a block of 20 x 17 (past the CPU's 16 x 16 blocks) out of a wider matrix
  std::vector<float> big(20 * 19), want(17 * 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i);
  for (std::size_t i = 0; i < 20; ++i)
    for (std::size_t j = 0; j < 17; ++j) want[j * 20 + i] = big[i * 19 + j];
  auto bd = upload(dev, big), wd = dev.template allocate<float>(want.size());
  dev.transpose_matrix(20, 17, cptr<B>(bd.data()), 19, wd.data(), 20);
  BOOST_TEST(download(dev, wd) == want, tt::per_element());
}

// Sizes whose reductions take one, two and three levels of a GPU backend's tree (it adds at most 32
// values per thread and level), on small integers, so every order of addition gives the same float.
BOOST_AUTO_TEST_CASE_TEMPLATE(reductions_at_every_depth, B, backends) {
  const B dev;
  rng r(4);
  const auto integers = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = std::floor(r.uniform() * 7.0f) - 3.0f;
    return v;
  };
  for (std::size_t rows : {0, 1, 31, 33, 1025, 40000})
    for (std::size_t cols : {1, 3, 32}) {
      const auto x = integers(rows * cols);
      std::vector<float> expect(cols, 0.0f);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) expect[j] += x[i * cols + j];
      auto xd = upload(dev, x), yd = dev.template allocate<float>(cols);
      dev.column_sums(rows, cols, cptr<B>(xd.data()), yd.data());
      BOOST_TEST(download(dev, yd) == expect, "column sums of " << rows << " x " << cols << tt::per_element());
      // batch normalization's sums: of (x - mean)^2, and of dy xhat with dy's in one pass
      const auto mean = integers(cols), h = integers(rows * cols);
      std::vector<float> squares(cols, 0.0f), gradient(2 * cols, 0.0f);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          const float e = x[i * cols + j];
          squares[j] += (e - mean[j]) * (e - mean[j]);
          gradient[j] += e * h[i * cols + j], gradient[cols + j] += e;
        }
      auto md = upload(dev, mean), hd = upload(dev, h), sums = dev.template allocate<float>(2 * cols);
      dev.squared_deviation_sums(rows, cols, cptr<B>(xd.data()), cptr<B>(md.data()), yd.data());
      BOOST_TEST(download(dev, yd) == squares, "squared deviations of " << rows << " x " << cols << tt::per_element());
      dev.batch_normalization_gradient_sums(rows, cols, cptr<B>(xd.data()), cptr<B>(hd.data()), sums.data());
      BOOST_TEST(download(dev, sums) == gradient, "gradient sums of " << rows << " x " << cols << tt::per_element());
    }
  for (std::size_t n : {0, 1, 33, 1025, 40000, 70000}) {
    const auto x = integers(n);
    double sum = 0.0, squares = 0.0;
    for (float v : x) sum += v, squares += double(v) * v;
    auto xd = upload(dev, x), out = upload(dev, {1.0f});
    dev.sum(n, cptr<B>(xd.data()), out.data());
    BOOST_TEST(download(dev, out)[0] == float(sum), "sum of " << n);
    dev.l2(n, 0.5f, 1.0f, cptr<B>(xd.data()), pointer_t<B, float>{}, out.data());  // penalty += 0.5 sum(x^2)
    BOOST_TEST(download(dev, out)[0] == float(sum) + float(0.5 * squares), "l2 of " << n);
  }
  // 3000 rows of which every third is right: the hits summed over two levels
  std::vector<float> pred(3000 * 2), labels(3000);
  for (std::size_t i = 0; i < 3000; ++i) pred[2 * i + (i % 3 == 0)] = 1.0f, labels[i] = 1.0f;
  auto pd = upload(dev, pred), ld = upload(dev, labels), out = dev.template allocate<float>(1);
  dev.metric(op::sparse_categorical_accuracy{}, 3000, 2, cptr<B>(ld.data()), cptr<B>(pd.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 1000.0f);
}

// Each activation out of place (y from x, dx from dy, the inputs left as they were) gives the bits it gives
// in place; relu's against max(x, 0) and its mask, the rest checked by the layers' gradient checks.
template <activation_kind A, class B>
void check_activation_out_of_place(const B& dev) {
  rng r(21);
  const std::size_t rows = 7, cols = 5, n = rows * cols;
  const auto x = dtrain_test::random_vector(n, r), dy = dtrain_test::random_vector(n, r);
  auto xd = upload(dev, x), dyd = upload(dev, dy), y = dev.template allocate<float>(n), dx = dev.template allocate<float>(n);
  auto in_place = upload(dev, x), d_in_place = upload(dev, dy);
  dev.template activation_forward<A>(rows, cols, cptr<B>(xd.data()), y.data());
  dev.template activation_forward<A>(rows, cols, cptr<B>(in_place.data()), in_place.data());
  dev.template activation_backward<A>(rows, cols, cptr<B>(xd.data()), cptr<B>(y.data()), cptr<B>(dyd.data()), dx.data());
  dev.template activation_backward<A>(rows, cols, cptr<B>(xd.data()), cptr<B>(y.data()), cptr<B>(d_in_place.data()),
                                      d_in_place.data());
  BOOST_TEST(download(dev, xd) == x, tt::per_element());
  BOOST_TEST(download(dev, dyd) == dy, tt::per_element());
  const auto out = download(dev, y), grad = download(dev, dx);
  BOOST_TEST(out == download(dev, in_place), tt::per_element());
  BOOST_TEST(grad == download(dev, d_in_place), tt::per_element());
  if constexpr (A == activation_kind::relu)
    for (std::size_t i = 0; i < n; ++i) {
      BOOST_TEST(out[i] == std::max(x[i], 0.0f));
      BOOST_TEST(grad[i] == (x[i] > 0.0f ? dy[i] : 0.0f));
    }
  if constexpr (A == activation_kind::linear) {
    BOOST_TEST(out == x, tt::per_element());
    BOOST_TEST(grad == dy, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(activations_out_of_place_equal_in_place, B, backends) {
  const B dev;
  check_activation_out_of_place<activation_kind::linear>(dev);
  check_activation_out_of_place<activation_kind::relu>(dev);
  check_activation_out_of_place<activation_kind::sigmoid>(dev);
  check_activation_out_of_place<activation_kind::tanh>(dev);
  check_activation_out_of_place<activation_kind::softmax>(dev);
  check_activation_out_of_place<activation_kind::gelu>(dev);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dropout_mask_depends_on_the_key_and_position_only, B, backends) {
  const B dev;
  const std::size_t n = 4099;  // not a multiple of 4
  auto x = upload(dev, std::vector<float>(n, 2.0f)), y = dev.template allocate<float>(n), mask = dev.template allocate<float>(n);
  dev.dropout(n, 0.25f, 77, cptr<B>(x.data()), y.data(), mask.data());
  const auto m = download(dev, mask), out = download(dev, y);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float u = counter_uniform4(77, i / 4)[i % 4];  // the i-th uniform of key 77
    BOOST_REQUIRE_EQUAL(m[i], u >= 0.25f ? 1.0f / 0.75f : 0.0f);
    BOOST_REQUIRE_EQUAL(out[i], 2.0f * m[i]);
    dropped += m[i] == 0.0f;
  }
  BOOST_TEST(dropped > 900u);  // expected 1025 of 4099, sd ~28
  BOOST_TEST(dropped < 1150u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(metric_totals, B, backends) {
  const B dev;
  auto pred = upload(dev, {0.1f, 0.7f, 0.2f, 0.6f, 0.3f, 0.1f, 0.2f, 0.2f, 0.6f});  // argmax 1, 0, 2
  auto labels = upload(dev, {1, 1, 2}), onehot = upload(dev, {0, 1, 0, 0, 0, 1, 0, 0, 1});
  auto out = dev.template allocate<float>(1);
  dev.metric(op::sparse_categorical_accuracy{}, 3, 3, cptr<B>(labels.data()), cptr<B>(pred.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 2.0f);
  dev.metric(op::categorical_accuracy{}, 3, 3, cptr<B>(onehot.data()), cptr<B>(pred.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 2.0f);
  // row 0: both right; row 1: 0.5 is not above the threshold -> one of two
  auto prob = upload(dev, {0.7f, 0.2f, 0.5f, 0.9f}), bin = upload(dev, {1, 0, 1, 1});
  dev.metric(op::binary_accuracy{0.5f}, 2, 2, cptr<B>(bin.data()), cptr<B>(prob.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 1.5f);
  // labels 1, 1, 2: scores 0.7 (first), 0.3 (second, below 0.6), 0.6 (first): k = 1 two rows, k = 2 all
  dev.metric(op::sparse_top_k_categorical_accuracy{1}, 3, 3, cptr<B>(labels.data()), cptr<B>(pred.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 2.0f);
  dev.metric(op::sparse_top_k_categorical_accuracy{2}, 3, 3, cptr<B>(labels.data()), cptr<B>(pred.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 3.0f);
  // one-hot classes 1, 2, 2: scores 0.7 (first), 0.1 (third), 0.6 (first)
  dev.metric(op::top_k_categorical_accuracy{2}, 3, 3, cptr<B>(onehot.data()), cptr<B>(pred.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 2.0f);
  // ties count: (0.2, 0.2, 0.6) with label 0 is in the top 2 (only 0.6 above it)
  auto tie = upload(dev, {0.2f, 0.2f, 0.6f}), zero = upload(dev, {0});
  dev.metric(op::sparse_top_k_categorical_accuracy{2}, 1, 3, cptr<B>(zero.data()), cptr<B>(tie.data()), out.data());
  BOOST_TEST(download(dev, out)[0] == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
