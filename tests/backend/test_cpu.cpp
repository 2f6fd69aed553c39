// The cpu backend's own choices: GEMM plans by shape, results that do not depend on the thread count, and
// the vector activations.
#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/backend/opaque.hpp>

#include <limits>
#include <numbers>

using namespace dtrain;

BOOST_AUTO_TEST_SUITE(cpu_backend)

namespace {
/// Whether this BLAS computes each element of C the same way whatever block of C a call covers: then
/// the `split` plan (one block of C per thread) gives the same bits for any thread count. OpenBLAS'
/// AVX-512 kernels do; its Zen (AVX2) kernels do not: there a split GEMM can differ in the last bits.
bool blas_is_split_invariant() {
  const std::size_t m = 40, n = 333, k = 300;
  rng r(5);
  const auto a = dtrain_test::random_vector(m * k, r), b = dtrain_test::random_vector(k * n, r);
  std::vector<float> whole(m * n), halves(m * n);
  detail::sgemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, whole.data(), n);
  detail::sgemm(transpose::no, transpose::no, m, 160, k, 1.0f, a.data(), k, b.data(), n, 0.0f, halves.data(), n);
  detail::sgemm(transpose::no, transpose::no, m, n - 160, k, 1.0f, a.data(), k, b.data() + 160, n, 0.0f,
                halves.data() + 160, n);
  return whole == halves;
}
}  // namespace

// With DTRAIN_GEMM=blas: shapes that take each of the cpu backend's BLAS plans (one call, row blocks, k
// slices, C split by rows or by columns over the pool), every transpose, leading dimensions wider than
// the operands: the result matches a double-precision loop, and 1 and 2 threads give the same bits (for
// the split plan, where the BLAS itself is split-invariant).
BOOST_AUTO_TEST_CASE(cpu_gemm_every_plan_matches_naive_loops_and_any_thread_count) {
  const detail::gemm_engine engine = detail::gemm_engine_in_use();
  detail::gemm_engine_in_use() = detail::gemm_engine::blas;
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
  set_num_threads(1);
  const bool split_invariant = blas_is_split_invariant();
  if (!split_invariant)
    BOOST_TEST_MESSAGE("this BLAS rounds a GEMM differently when C is split: the split "
                       "plan's bits depend on the thread count here, and are checked against the loop only");
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
          if (plan != detail::gemm_plan::split || split_invariant)
            BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
        }
    }
  }
  set_num_threads(before);
  detail::gemm_engine_in_use() = engine;
}

// dtrain's own GEMM (the default engine) takes every shape the direct GEMM declines, on each instruction
// set this CPU has and the baseline: alpha other than 1, beta other than 0 or 1, B transposed into a big
// C (a convolution's input gradient), both operands transposed, a C narrower than a vector (a
// classifier's 10 columns), a C wide enough for several column blocks, k and alpha zero. Each matches a
// double-precision loop, leaves C's padding alone, and gives the same bits on 1, 2 and 3 threads.
BOOST_AUTO_TEST_CASE(own_gemm_matches_naive_loops_on_every_instruction_set_and_thread_count) {
  struct own_case {
    transpose ta, tb;
    std::size_t m, n, k;
    float alpha, beta;
  };
  const own_case cases[] = {{transpose::no, transpose::no, 64, 128, 300, 2.0f, 0.0f},
                            {transpose::no, transpose::no, 64, 128, 300, 1.0f, 0.5f},
                            {transpose::no, transpose::yes, 64, 128, 300, 1.0f, 1.0f},
                            {transpose::no, transpose::yes, 1500, 144, 16, 1.0f, 0.0f},
                            {transpose::yes, transpose::yes, 37, 45, 70, 1.5f, -1.0f},
                            {transpose::no, transpose::no, 70, 10, 300, 1.0f, 0.0f},
                            {transpose::yes, transpose::no, 256, 10, 64, 1.0f, 1.0f},
                            {transpose::no, transpose::no, 40, 1100, 70, 1.0f, 0.0f},
                            {transpose::no, transpose::no, 9, 7, 0, 1.0f, 0.5f},
                            {transpose::no, transpose::no, 9, 7, 5, 0.0f, 0.0f}};
  std::vector<detail::cpu_isa> isas{detail::cpu_isa::baseline};
  if (detail::detected_cpu_isa() != detail::cpu_isa::baseline) isas.push_back(detail::cpu_isa::avx2);
  if (detail::detected_cpu_isa() == detail::cpu_isa::avx512) isas.push_back(detail::cpu_isa::avx512);
  const int before = num_threads();
  rng r(19);
  for (auto isa : isas)
    for (const auto& [ta, tb, m, n, k, alpha, beta] : cases) {
      BOOST_TEST_CONTEXT("isa " << detail::name_of(isa) << " ta " << int(ta) << " tb " << int(tb) << " m " << m
                                << " n " << n << " k " << k << " alpha " << alpha << " beta " << beta) {
        const std::size_t lda = (ta == transpose::yes ? m : k) + 3, ldb = (tb == transpose::yes ? k : n) + 2,
                          ldc = n + 5;
        const auto a = dtrain_test::random_vector((ta == transpose::yes ? k : m) * lda + 1, r);
        const auto b = dtrain_test::random_vector((tb == transpose::yes ? n : k) * ldb + 1, r);
        const auto c0 = dtrain_test::random_vector(m * ldc, r);
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          auto c = c0;
          detail::own_gemm(isa, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          results.push_back(c);
        }
        std::size_t wrong = 0, padding_touched = 0;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < ldc; ++j) {
            const std::size_t at = i * ldc + j;
            if (j >= n) {
              padding_touched += results[0][at] != c0[at];
              continue;
            }
            double acc = 0, mag = 0;
            for (std::size_t p = 0; p < k; ++p) {
              const double av = ta == transpose::yes ? a[p * lda + i] : a[i * lda + p];
              const double bv = tb == transpose::yes ? b[j * ldb + p] : b[p * ldb + j];
              acc += av * bv, mag += std::abs(av * bv);
            }
            const double want = alpha * acc + beta * double(c0[at]);
            wrong += std::abs(results[0][at] - want) > 1e-5 * (std::abs(alpha) * mag + std::abs(beta * c0[at]) + 1.0);
          }
        BOOST_TEST(wrong == 0u);
        BOOST_TEST(padding_touched == 0u);
        BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
        BOOST_TEST(results[0] == results[2], boost::test_tools::per_element());
      }
    }
  set_num_threads(before);
}

// The column sums and batch normalization's passes run over the thread budget, the sums in slices fixed
// by the shape: the same bits for 1, 2 and 3 threads, and within rounding of a float64 reference.
BOOST_AUTO_TEST_CASE(column_sums_and_batch_normalization_do_not_depend_on_the_thread_count) {
  const int before = num_threads();
  rng r(23);
  const cpu dev;
  for (std::size_t rows : {1, 100, 5000, 70000})
    for (std::size_t cols : {3, 16, 64}) {
      BOOST_TEST_CONTEXT(rows << " x " << cols) {
        const auto x = dtrain_test::random_vector(rows * cols, r), dy = dtrain_test::random_vector(rows * cols, r);
        const auto mean = dtrain_test::random_vector(cols, r), gamma = dtrain_test::random_vector(cols, r);
        std::vector<float> variance(cols, 0.5f), beta(cols, 0.25f);
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          std::vector<float> sums(cols), squares(cols), gradient(2 * cols), y(rows * cols), xhat(rows * cols),
              inv_std(cols), dx(rows * cols);
          dev.column_sums(rows, cols, x.data(), sums.data());
          dev.squared_deviation_sums(rows, cols, x.data(), mean.data(), squares.data());
          dev.batch_normalization_forward(rows, cols, 1e-3f, x.data(), mean.data(), variance.data(), gamma.data(),
                                          beta.data(), y.data(), xhat.data(), inv_std.data());
          dev.batch_normalization_gradient_sums(rows, cols, dy.data(), xhat.data(), gradient.data());
          dev.batch_normalization_backward(rows, cols, 1.0f / float(rows), xhat.data(), inv_std.data(), gamma.data(),
                                           gradient.data(), dy.data(), dx.data());
          std::vector<float> all;
          for (const auto* v : {&sums, &squares, &gradient, &y, &xhat, &dx}) all.insert(all.end(), v->begin(), v->end());
          results.push_back(all);
          if (threads > 1) continue;
          std::size_t wrong = 0;
          for (std::size_t j = 0; j < cols; ++j) {
            double s = 0, sq = 0, sx = 0, sd = 0, mag = 0;
            for (std::size_t i = 0; i < rows; ++i) {
              const double e = x[i * cols + j], d = dy[i * cols + j], h = xhat[i * cols + j];
              s += e, sq += (e - mean[j]) * (e - mean[j]), sx += d * h, sd += d, mag += std::abs(e) + std::abs(d);
            }
            const double tol = 1e-4 * (mag + 1.0);
            wrong += std::abs(sums[j] - s) > tol;
            wrong += std::abs(squares[j] - sq) > tol * (1.0 + std::abs(mean[j]));
            wrong += std::abs(gradient[j] - sx) > tol * 4.0;
            wrong += std::abs(gradient[cols + j] - sd) > tol;
          }
          BOOST_TEST(wrong == 0u);
        }
        BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
        BOOST_TEST(results[0] == results[2], boost::test_tools::per_element());
      }
    }
  set_num_threads(before);
}

// DTRAIN_GEMM names the engine: dtrain's kernels (also when unset) or BLAS, in a program built with one;
// another word, or blas without one, is named.
BOOST_AUTO_TEST_CASE(gemm_engine_from_the_environment) {
  using detail::gemm_engine;
  BOOST_TEST((detail::gemm_engine_from_env(nullptr) == gemm_engine::dtrain));
  BOOST_TEST((detail::gemm_engine_from_env("") == gemm_engine::dtrain));
  BOOST_TEST((detail::gemm_engine_from_env("dtrain", false) == gemm_engine::dtrain));
  BOOST_TEST((detail::gemm_engine_from_env("blas", true) == gemm_engine::blas));
  const auto rejected = [](const char* value, bool with_blas) -> std::string {
    try {
      detail::gemm_engine_from_env(value, with_blas);
    } catch (const config_error& e) {
      return e.what();
    }
    return "accepted";
  };
  BOOST_TEST(rejected("openblas", true) == "DTRAIN_GEMM=\"openblas\": expected dtrain or blas");
  BOOST_TEST(rejected("blas", false).starts_with("DTRAIN_GEMM=blas: this program was built without a BLAS"));
}

// The direct GEMM (backend/cpu/direct_gemm.hpp) on each instruction set this CPU has, for the shapes it
// takes: a dense layer's forward pass (A as is, B as is, C accumulated or not), its kernel gradient (A
// transposed) and its input gradient (B transposed: C^T transposed in registers), with partial tiles on
// every side, k across several depth blocks, padded leading dimensions. Each matches a double-precision
// loop, leaves C's padding alone, and gives the same bits on 1, 2 and 3 threads.
BOOST_AUTO_TEST_CASE(direct_gemm_matches_naive_loops_on_every_instruction_set_and_thread_count) {
  struct direct_case {
    transpose ta, tb;
    std::size_t m, n, k;
    float beta;
  };
  const direct_case cases[] = {{transpose::no, transpose::no, 13, 120, 700, 0.0f},
                               {transpose::no, transpose::no, 13, 120, 700, 1.0f},
                               {transpose::no, transpose::no, 301, 64, 45, 1.0f},
                               {transpose::yes, transpose::no, 300, 120, 37, 0.0f},
                               {transpose::yes, transpose::no, 7, 128, 530, 1.0f},
                               {transpose::no, transpose::yes, 30, 333, 50, 0.0f},
                               {transpose::no, transpose::yes, 64, 64, 300, 0.0f},
                               // a convolution's few filters: AVX-512's tiles of 1 and 2 vectors, whole and partial
                               {transpose::no, transpose::no, 301, 16, 144, 0.0f},
                               {transpose::no, transpose::no, 77, 13, 300, 1.0f},
                               {transpose::no, transpose::no, 250, 32, 288, 1.0f},
                               {transpose::yes, transpose::no, 144, 27, 600, 0.0f}};
  std::vector<detail::cpu_isa> isas;
  if (detail::detected_cpu_isa() != detail::cpu_isa::baseline) isas.push_back(detail::cpu_isa::avx2);
  if (detail::detected_cpu_isa() == detail::cpu_isa::avx512) isas.push_back(detail::cpu_isa::avx512);
  if (isas.empty()) BOOST_TEST_MESSAGE("this CPU has neither AVX2 with FMA nor AVX-512: no direct GEMM to test");
  const int before = num_threads();
  rng r(17);
  for (auto isa : isas)
    for (const auto& [ta, tb, m, n, k, beta] : cases) {
      BOOST_TEST_CONTEXT("isa " << int(isa) << " ta " << int(ta) << " tb " << int(tb) << " m " << m << " n " << n
                                << " k " << k << " beta " << beta) {
        const std::size_t lda = (ta == transpose::yes ? m : k) + 3, ldb = (tb == transpose::yes ? k : n) + 2,
                          ldc = n + 5;
        const auto a = dtrain_test::random_vector((ta == transpose::yes ? k : m) * lda, r);
        const auto b = dtrain_test::random_vector((tb == transpose::yes ? n : k) * ldb, r);
        const auto c0 = dtrain_test::random_vector(m * ldc, r);
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          auto c = c0;
          BOOST_TEST(detail::direct_gemm(isa, ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc));
          results.push_back(c);
        }
        std::size_t wrong = 0, padding_touched = 0;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < ldc; ++j) {
            const std::size_t at = i * ldc + j;
            if (j >= n) {
              padding_touched += results[0][at] != c0[at];
              continue;
            }
            double acc = beta * double(c0[at]), mag = std::abs(acc);
            for (std::size_t p = 0; p < k; ++p) {
              const double av = ta == transpose::yes ? a[p * lda + i] : a[i * lda + p];
              const double bv = tb == transpose::yes ? b[j * ldb + p] : b[p * ldb + j];
              acc += av * bv, mag += std::abs(av * bv);
            }
            wrong += std::abs(results[0][at] - acc) > 1e-5 * (mag + 1.0);
          }
        BOOST_TEST(wrong == 0u);
        BOOST_TEST(padding_touched == 0u);
        BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
        BOOST_TEST(results[0] == results[2], boost::test_tools::per_element());
      }
    }
  set_num_threads(before);
}

// A long k (a dense layer after a conv: k = 21,632 in the tutorial's CNN) of positive terms, where a
// single running sum's rounding error grows with k: the direct GEMM sums each block of k in registers
// from zero and adds the blocks, and stays within 2e-6 of a float64 sum (one running sum: 7.6e-6 here;
// OpenBLAS 3.6e-7). Keras' logits on weights dtrain trained depend on it (tests/interop/check_keras.py).
BOOST_AUTO_TEST_CASE(direct_gemm_keeps_a_long_sum_accurate) {
  const std::size_t m = 8, n = 64, k = 20000;
  rng r(3);
  std::vector<float> a(m * k), b(k * n);
  for (auto& v : a) v = r.uniform();
  for (auto& v : b) v = r.uniform();
  std::vector<detail::cpu_isa> isas;
  if (detail::detected_cpu_isa() != detail::cpu_isa::baseline) isas.push_back(detail::cpu_isa::avx2);
  if (detail::detected_cpu_isa() == detail::cpu_isa::avx512) isas.push_back(detail::cpu_isa::avx512);
  for (auto isa : isas) {
    std::vector<float> c(m * n, 1.0f);
    BOOST_TEST(detail::direct_gemm(isa, transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f,
                                   c.data(), n));
    double worst = 0;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double s = 1.0;
        for (std::size_t p = 0; p < k; ++p) s += double(a[i * k + p]) * b[p * n + j];
        worst = std::max(worst, std::abs(c[i * n + j] - s) / s);
      }
    BOOST_TEST(worst <= 2e-6, "isa " << int(isa) << ": relative error " << worst);
  }
}

// What the direct GEMM leaves to BLAS, it leaves untouched: alpha other than 1, beta other than 0 or 1,
// a transposed B into an accumulated C, a big square product, a C too narrow for whole vectors.
BOOST_AUTO_TEST_CASE(direct_gemm_declines_the_shapes_it_is_not_for) {
  const auto isa = detail::detected_cpu_isa();
  if (isa == detail::cpu_isa::baseline) {
    BOOST_TEST_MESSAGE("no direct GEMM on this CPU");
    return;
  }
  std::vector<float> a(700 * 700, 1.0f), b(700 * 700, 1.0f), c(700 * 700, 3.0f);
  auto call = [&](transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, float beta) {
    return detail::direct_gemm(isa, ta, tb, m, n, k, alpha, a.data(), 700, b.data(), 700, beta, c.data(), 700);
  };
  BOOST_TEST(!call(transpose::no, transpose::no, 64, 128, 300, 2.0f, 0.0f));
  BOOST_TEST(!call(transpose::no, transpose::no, 64, 128, 300, 1.0f, 0.5f));
  BOOST_TEST(!call(transpose::no, transpose::yes, 64, 128, 300, 1.0f, 1.0f));
  BOOST_TEST(!call(transpose::no, transpose::no, 600, 600, 600, 1.0f, 0.0f));
  BOOST_TEST(!call(transpose::no, transpose::no, 64, 3, 300, 1.0f, 0.0f));
  BOOST_TEST(std::all_of(c.begin(), c.end(), [](float v) { return v == 3.0f; }));
  BOOST_TEST(call(transpose::no, transpose::no, 64, 128, 300, 1.0f, 0.0f));  // and takes the one it is for
  BOOST_TEST(c[0] == 300.0f);
}

// DTRAIN_CPU_ISA picks the kernels' set: any set up to the CPU's; one above it, or a misspelt one, is named.
// The bfloat16 GEMM (AVX512_BF16): operands rounded to bfloat16 to nearest even (B after alpha), products
// summed in float32. Every transpose, odd k, k over several depth blocks, columns over several passes and
// not whole vectors, wider leading dimensions, alpha and beta: within float32 rounding of a float64 sum of
// the rounded operands' products, measurably off the unrounded product (the rounding happens), padding
// untouched, the same bits for 1, 2 and 3 threads, and a NaN reaching only its row.
BOOST_AUTO_TEST_CASE(bf16_gemm_rounds_its_operands_and_sums_in_float32) {
  if (!detail::bf16_gemm_available()) {
    BOOST_TEST_MESSAGE("skipped: this CPU has no AVX512_BF16 (or DTRAIN_CPU_ISA is set below avx512)");
    return;
  }
  struct bf16_case {
    transpose ta, tb;
    std::size_t m, n, k;
    float alpha, beta;
  };
  const bf16_case cases[] = {{transpose::no, transpose::no, 64, 128, 301, 1.0f, 0.0f},
                             {transpose::no, transpose::yes, 64, 130, 600, 1.0f, 1.0f},
                             {transpose::yes, transpose::no, 300, 10, 64, 2.0f, 0.5f},
                             {transpose::yes, transpose::yes, 37, 45, 7, 1.5f, -1.0f},
                             {transpose::no, transpose::no, 20, 1100, 33, 1.0f, 0.0f},
                             {transpose::no, transpose::no, 1, 1, 1, 1.0f, 0.0f},
                             {transpose::no, transpose::no, 9, 7, 0, 1.0f, 0.5f},
                             {transpose::no, transpose::no, 9, 7, 5, 0.0f, 0.0f}};
  const int before = num_threads();
  rng r(23);
  const auto bf = [](double v) { return double(round_as(dtype::bfloat16, float(v))); };
  for (const auto& [ta, tb, m, n, k, alpha, beta] : cases) {
    BOOST_TEST_CONTEXT("ta " << int(ta) << " tb " << int(tb) << " m " << m << " n " << n << " k " << k << " alpha "
                             << alpha << " beta " << beta) {
      const std::size_t lda = (ta == transpose::yes ? m : k) + 3, ldb = (tb == transpose::yes ? k : n) + 2,
                        ldc = n + 5;
      const auto a = dtrain_test::random_vector((ta == transpose::yes ? k : m) * lda + 1, r);
      const auto b = dtrain_test::random_vector((tb == transpose::yes ? n : k) * ldb + 1, r);
      const auto c0 = dtrain_test::random_vector(m * ldc, r);
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        auto c = c0;
        BOOST_TEST(detail::bf16_gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc));
        results.push_back(c);
      }
      std::size_t wrong = 0, unrounded_off = 0, padding_touched = 0;
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < ldc; ++j) {
          const std::size_t at = i * ldc + j;
          if (j >= n) {
            padding_touched += results[0][at] != c0[at];
            continue;
          }
          double acc = 0, mag = 0, plain = 0;
          for (std::size_t p = 0; p < k; ++p) {
            const double av = ta == transpose::yes ? a[p * lda + i] : a[i * lda + p];
            const double bv = tb == transpose::yes ? b[j * ldb + p] : b[p * ldb + j];
            acc += bf(av) * bf(alpha * bv), mag += std::abs(av * alpha * bv), plain += av * alpha * bv;
          }
          const double tolerance = 1e-5 * (mag + std::abs(beta * c0[at]) + 1.0);
          wrong += std::abs(results[0][at] - (acc + beta * double(c0[at]))) > tolerance;
          unrounded_off += std::abs(results[0][at] - (plain + beta * double(c0[at]))) > tolerance;
        }
      BOOST_TEST(wrong == 0u);
      if (k > 0 && alpha != 0.0f) BOOST_TEST(unrounded_off > 0u);
      BOOST_TEST(padding_touched == 0u);
      BOOST_TEST(results[0] == results[1], boost::test_tools::per_element());
      BOOST_TEST(results[0] == results[2], boost::test_tools::per_element());
    }
  }
  set_num_threads(before);
  // a NaN in A spoils its row of C only
  const std::size_t m = 4, n = 20, k = 9;
  auto a = dtrain_test::random_vector(m * k, r);
  const auto b = dtrain_test::random_vector(k * n, r);
  a[2 * k + 3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> c(m * n);
  detail::bf16_gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) BOOST_TEST(std::isnan(c[i * n + j]) == (i == 2));
}

// A cpu backend value `with_gemm_dtype(bfloat16)` sends its GEMMs and convolutions to the bfloat16 kernels
// (where the CPU has them: else the float32 ones); float32 values keep float32 products; the opaque
// backend's value gives the cpu backend's bits.
BOOST_AUTO_TEST_CASE(with_gemm_dtype_reaches_gemms_and_convolutions) {
  rng r(29);
  const std::size_t m = 16, n = 24, k = 40;
  const auto a = dtrain_test::random_vector(m * k, r), b = dtrain_test::random_vector(k * n, r);
  std::vector<float> plain(m * n), reduced(m * n), direct(m * n);
  const cpu fp32, bf16 = fp32.with_gemm_dtype(dtype::bfloat16);
  BOOST_TEST(int(bf16.gemm_dtype()) == int(dtype::bfloat16));
  BOOST_TEST(int(fp32.gemm_dtype()) == int(dtype::float32));
  fp32.gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, plain.data(), n);
  bf16.gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, reduced.data(), n);
  const bool available = detail::bf16_gemm_available();
  if (available)
    detail::bf16_gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, direct.data(), n);
  else
    direct = plain;
  BOOST_TEST(reduced == direct, boost::test_tools::per_element());
  BOOST_TEST((reduced != plain) == available);

  // convolutions: a strided one (im2col + GEMM) and a direct one (stride 1, an even channel count; its
  // input gradient too): the bfloat16 device's results within float32 rounding of the float32 device's
  // on operands rounded first, and off the unrounded ones (where the CPU has the unit; else the same)
  auto rounded = [](std::vector<float> v) {
    for (float& e : v) e = round_as(dtype::bfloat16, e);
    return v;
  };
  auto check = [&](const std::vector<float>& got, const std::vector<float>& on_rounded,
                   const std::vector<float>& on_plain) {
    std::size_t far = 0, off = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      far += std::abs(got[i] - on_rounded[i]) > 1e-5f * (std::abs(on_rounded[i]) + 1.0f);
      off += std::abs(got[i] - on_plain[i]) > 1e-4f * (std::abs(on_plain[i]) + 1.0f);
    }
    BOOST_TEST(far == 0u);
    if (available) BOOST_TEST(off > 0u);
    else BOOST_TEST(got == on_plain, boost::test_tools::per_element());
  };
  const std::size_t batch = 2;
  auto forward_of = [&]<window_geometry G>() {
    const auto x = dtrain_test::random_vector(batch * G.in_size(), r);
    const auto w = dtrain_test::random_vector(G.kernel_values(), r);
    auto conv = [&](const cpu& dev, const std::vector<float>& xs, const std::vector<float>& ws) {
      std::vector<float> y(batch * G.out_size()), work(dev.conv2d_workspace<G>(batch));
      dev.conv2d_forward<G, activation_kind::linear>(batch, xs.data(), ws.data(), nullptr, y.data(), nullptr,
                                                      work.data());
      return y;
    };
    check(conv(bf16, x, w), conv(fp32, rounded(x), rounded(w)), conv(fp32, x, w));
  };
  forward_of.operator()<window_geometry{7, 7, 4, 3, 3, 2, 2, 1, 1, 4, 4, 6}>();     // im2col
  forward_of.operator()<window_geometry{6, 5, 8, 3, 3, 1, 1, 1, 1, 6, 5, 80}>();    // direct, 80 filters: tiles of 32
  {
    constexpr window_geometry G{6, 5, 4, 3, 3, 1, 1, 1, 1, 6, 5, 18};  // direct, dx: 18 filters pack in pairs
    const auto x = dtrain_test::random_vector(batch * G.in_size(), r);
    const auto w = dtrain_test::random_vector(G.kernel_values(), r);
    const auto dy = dtrain_test::random_vector(batch * G.out_size(), r);
    auto dx_of = [&](const cpu& dev, const std::vector<float>& ws, std::vector<float> d) {
      std::vector<float> y(batch * G.out_size()), work(dev.conv2d_workspace<G>(batch)),
          scratch(dev.conv2d_backward_workspace<G>(batch, true)), gw(G.kernel_values()), dx(batch * G.in_size());
      dev.conv2d_forward<G, activation_kind::linear>(batch, x.data(), ws.data(), nullptr, y.data(), nullptr,
                                                      work.data());
      dev.conv2d_backward<G, activation_kind::linear>(batch, nullptr, y.data(), d.data(), ws.data(), work.data(),
                                                       scratch.data(), gw.data(), nullptr, dx.data());
      return dx;
    };
    check(dx_of(bf16, w, dy), dx_of(fp32, rounded(w), rounded(dy)), dx_of(fp32, w, dy));
  }

  opaque o;
  const opaque ob = o.with_gemm_dtype(dtype::bfloat16);
  auto pa = o.allocate<float>(m * k), pb = o.allocate<float>(k * n), pc = o.allocate<float>(m * n);
  o.upload(m * k, a.data(), pa.data());
  o.upload(k * n, b.data(), pb.data());
  ob.gemm(transpose::no, transpose::no, m, n, k, 1.0f, pa.data(), k, pb.data(), n, 0.0f, pc.data(), n);
  std::vector<float> via_opaque(m * n);
  o.download(m * n, pc.data(), via_opaque.data());
  BOOST_TEST(via_opaque == reduced, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(cpu_isa_from_the_environment_is_checked_against_the_cpu) {
  using detail::cpu_isa;
  BOOST_TEST(int(detail::cpu_isa_from_env(nullptr, cpu_isa::avx2)) == int(cpu_isa::avx2));
  BOOST_TEST(int(detail::cpu_isa_from_env("", cpu_isa::avx512)) == int(cpu_isa::avx512));
  BOOST_TEST(int(detail::cpu_isa_from_env("baseline", cpu_isa::avx512)) == int(cpu_isa::baseline));
  BOOST_TEST(int(detail::cpu_isa_from_env("avx2", cpu_isa::avx512)) == int(cpu_isa::avx2));
  BOOST_TEST(int(detail::cpu_isa_from_env("avx512", cpu_isa::avx512)) == int(cpu_isa::avx512));
  auto message = [](const char* v, cpu_isa detected) {
    return dtrain_test::error_of([&] { detail::cpu_isa_from_env(v, detected); });
  };
  BOOST_TEST(message("avx512", cpu_isa::avx2) == "DTRAIN_CPU_ISA=avx512: this CPU has only avx2");
  BOOST_TEST(message("AVX2", cpu_isa::avx512) == "DTRAIN_CPU_ISA=\"AVX2\": expected baseline, avx2 or avx512");
  BOOST_TEST(int(detail::best_cpu_isa()) <= int(detail::detected_cpu_isa()));
}

// Sigmoid, tanh and GELU (and GELU's derivative) as every instruction set's loops compute them, against
// double-precision libm over [-30, 30] and at the extremes: within a few float32 ulps (absolute near 0).
BOOST_AUTO_TEST_CASE(vector_activations_match_libm_on_every_instruction_set) {
  std::vector<float> x;
  for (int i = -30000; i <= 30000; i += 7) x.push_back(float(i) / 1000.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.624f, 0.626f, -0.6249f, 88.5f, -88.5f, 100.0f, -100.0f, 1e30f, -1e30f})
    x.push_back(v);
  const std::size_t n = x.size();
  std::vector<float> dy(n);
  for (std::size_t i = 0; i < n; ++i) dy[i] = 0.5f + float(i % 7) / 7.0f;
  auto check = [&]<class V>(V, const char* isa) {
    std::vector<float> s(n), t(n), g(n), dg(n);
    V::sigmoid(n, x.data(), s.data());
    V::tanh(n, x.data(), t.data());
    V::gelu(n, x.data(), g.data());
    V::gelu_backward(n, x.data(), dy.data(), dg.data());
    for (std::size_t i = 0; i < n; ++i) {
      const double v = x[i], phi = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      const double want_s = 1.0 / (1.0 + std::exp(-v)), want_t = std::tanh(v), want_g = v * phi,
                   want_dg = dy[i] * (phi + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi));
      auto close = [](double got, double want, double scale) {
        return std::abs(got - want) <= 4e-7 * std::max(1.0, std::abs(want)) * scale || got == want;
      };
      BOOST_TEST_CONTEXT(isa << " at x = " << v) {
        BOOST_TEST(close(s[i], want_s, 1.0), s[i] << " for " << want_s);
        BOOST_TEST(close(t[i], want_t, 1.0), t[i] << " for " << want_t);
        BOOST_TEST(close(g[i], want_g, 1.0), g[i] << " for " << want_g);
        BOOST_TEST(close(dg[i], want_dg, 2.0), dg[i] << " for " << want_dg);
      }
    }
  };
  check(detail::baseline::activations{}, "baseline");
#if DTRAIN_CPU_AVX
  if (detail::detected_cpu_isa() != detail::cpu_isa::baseline) check(detail::avx2::activations{}, "avx2");
  if (detail::detected_cpu_isa() == detail::cpu_isa::avx512) check(detail::avx512::activations{}, "avx512");
#endif
  // not-a-number stays one; the saturated ends are exact
  const float nan = std::numeric_limits<float>::quiet_NaN(), ends[] = {nan, 1e30f, -1e30f};
  float out[3];
  detail::baseline::activations::sigmoid(3, ends, out);
  BOOST_TEST(std::isnan(out[0]));
  BOOST_TEST(out[1] == 1.0f);
  BOOST_TEST(out[2] >= 0.0f);
  BOOST_TEST(out[2] < 1e-37f);
  detail::baseline::activations::tanh(3, ends, out);
  BOOST_TEST(std::isnan(out[0]));
  BOOST_TEST(out[1] == 1.0f);
  BOOST_TEST(out[2] == -1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
