#include <numeric>

#include "support/gradcheck.hpp"

using namespace dtrain;

BOOST_AUTO_TEST_SUITE(core)

BOOST_AUTO_TEST_CASE(rng_is_seeded_and_its_state_round_trips) {
  rng a(42), b(42), c(43);
  BOOST_TEST(a.next() == b.next());
  BOOST_TEST(a.next() != c.next());
  // The standard fixes mt19937_64's 10000th output for the default seed 5489.
  rng d(5489);
  std::uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = d.next();
  BOOST_TEST(v == 9981545732273789042ull);
  const std::string saved = a.state();
  const float u1 = a.uniform(), n1 = a.normal();
  a.set_state(saved);
  BOOST_TEST(a.uniform() == u1);
  BOOST_TEST(a.normal() == n1);
  BOOST_CHECK_THROW(a.set_state("not a state"), value_error);
}

BOOST_AUTO_TEST_CASE(rng_distributions) {
  rng r(1);
  double s = 0, s2 = 0;
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 20000; ++i) {
    const float u = r.uniform();
    BOOST_REQUIRE(u >= 0.0f);
    BOOST_REQUIRE(u < 1.0f);
    const double z = r.normal();
    s += z, s2 += z * z;
    ++hist[r.below(7)];
  }
  BOOST_TEST(std::abs(s / 20000) < 0.05);
  BOOST_TEST(std::abs(s2 / 20000 - 1.0) < 0.05);
  for (int h : hist) BOOST_TEST(std::abs(h - 20000 / 7.0) < 300);
}

BOOST_AUTO_TEST_CASE(shapes) {
  static_assert(shape<28, 28, 1>::size == 784 && shape<28, 28, 1>::rank == 3);
  BOOST_TEST((shape<26, 26, 32>::str() == "(None, 26, 26, 32)"));
  BOOST_TEST(shape_str(std::vector<std::size_t>{32}) == "(32,)");
  BOOST_TEST(shape_str(std::vector<std::size_t>{2, 3}) == "(2, 3)");
}

BOOST_AUTO_TEST_CASE(cpu_gemm_all_transposes_match_naive_loops) {
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
      cpu{}.gemm(ta, tb, m, n, k, 2.0f, a.data(), ta == transpose::yes ? m : k, b.data(),
                 tb == transpose::yes ? k : n, 0.5f, c.data(), n);
      BOOST_TEST(c == expect, boost::test_tools::tolerance(1e-5f) << boost::test_tools::per_element());
    }
}

// Shapes that take each of the cpu backend's plans (one call, row blocks, k slices, C split by rows or
// by columns over the pool), every transpose, leading dimensions wider than the operands: the result
// matches a double-precision loop, and 1 and 2 threads give the same bits.
BOOST_AUTO_TEST_CASE(cpu_gemm_every_plan_matches_naive_loops_and_any_thread_count) {
  struct gemm_case {
    std::size_t m, n, k;
    detail::gemm_plan plan;
  };
  const gemm_case cases[] = {{5, 7, 3, detail::gemm_plan::one},
                             {2048, 128, 64, detail::gemm_plan::rows},
                             {8, 32, 8192, detail::gemm_plan::depth},
                             {300, 100, 200, detail::gemm_plan::split},
                             {40, 333, 300, detail::gemm_plan::split}};
  const int before = num_threads();
  rng r(11);
  for (const auto& [m, n, k, plan] : cases) {
    BOOST_TEST_CONTEXT("m " << m << " n " << n << " k " << k) {
      BOOST_TEST((detail::plan_gemm(m, n, k) == plan));
      for (auto ta : {transpose::no, transpose::yes})
        for (auto tb : {transpose::no, transpose::yes}) {
          const std::size_t lda = (ta == transpose::yes ? m : k) + 3, ldb = (tb == transpose::yes ? k : n) + 2,
                            ldc = n + 1;
          const auto a = dtrain_test::random_vector((ta == transpose::yes ? k : m) * lda, r);
          const auto b = dtrain_test::random_vector((tb == transpose::yes ? n : k) * ldb, r);
          const auto c0 = dtrain_test::random_vector(m * ldc, r);
          std::vector<double> expect(m * ldc), bound(m * ldc);
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) {
              double acc = 0, mag = 0;
              for (std::size_t p = 0; p < k; ++p) {
                const double av = ta == transpose::yes ? a[p * lda + i] : a[i * lda + p];
                const double bv = tb == transpose::yes ? b[j * ldb + p] : b[p * ldb + j];
                acc += av * bv, mag += std::abs(av * bv);
              }
              expect[i * ldc + j] = 2.0 * acc + 0.5 * c0[i * ldc + j];
              bound[i * ldc + j] = 1e-5 * (2.0 * mag + 1.0);
            }
          std::vector<std::vector<float>> results;
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            auto c = c0;
            cpu{}.gemm(ta, tb, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
            results.push_back(c);
          }
          std::size_t wrong = 0, padding_touched = 0;
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < ldc; ++j) {
              const std::size_t at = i * ldc + j;
              if (j >= n) padding_touched += results[0][at] != c0[at];
              else wrong += std::abs(results[0][at] - expect[at]) > bound[at];
            }
          BOOST_TEST(wrong == 0u);
          BOOST_TEST(padding_touched == 0u);
          BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
        }
    }
  }
  set_num_threads(before);
}

BOOST_AUTO_TEST_CASE(tensor_helpers) {
  tensor a = from_span(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  tensor b = from_span(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2});
  tensor c = matmul(a, b);
  BOOST_TEST(c(0, 0) == 4.0f);
  BOOST_TEST(c(1, 1) == 11.0f);
  BOOST_CHECK_THROW(matmul(a, a), shape_error);
  BOOST_CHECK_THROW(from_span(std::vector<float>{1, 2, 3}, {2, 2}), shape_error);
  BOOST_TEST((extents_of(zeros({4, 1, 2})) == extents{4, 1, 2}));
}

BOOST_AUTO_TEST_CASE(errors_share_one_base) {
  BOOST_CHECK_THROW(throw shape_error("x"), error);
  BOOST_CHECK_THROW(throw io_error("x"), error);
  BOOST_CHECK_THROW(throw config_error("x"), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(thread_budget) {
  const int before = num_threads();
  set_num_threads(1);
  BOOST_TEST(num_threads() == 1);
  set_num_threads(0);  // clamped
  BOOST_TEST(num_threads() == 1);
  set_num_threads(before);
}

BOOST_AUTO_TEST_SUITE_END()
