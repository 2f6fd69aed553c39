// dtrain with a BLAS other than OpenBLAS: this program is built with DTRAIN_BLAS, links no BLAS library
// at all and brings its own column-major sgemm_ (the Fortran interface every BLAS exports), so OpenBLAS'
// thread controls are absent. Run with DTRAIN_GEMM=blas, it must link, train (the loss halves), hand a
// GEMM the direct kernels decline to its sgemm_, and take the cores as its thread budget.
#include <cstdio>
#include <thread>
#include <vector>

#include <dtrain/dtrain.hpp>

static int sgemm_calls = 0;

extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc) {
  ++sgemm_calls;
  const bool at = *ta == 'T' || *ta == 't', bt = *tb == 'T' || *tb == 't';
  for (int j = 0; j < *n; ++j)
    for (int i = 0; i < *m; ++i) {
      double s = 0;
      for (int p = 0; p < *k; ++p)
        s += double(at ? a[p + i * *lda] : a[i + p * *lda]) * double(bt ? b[j + p * *ldb] : b[p + j * *ldb]);
      float& out = c[i + j * *ldc];
      out = *beta == 0.0f ? float(*alpha * s) : float(*alpha * s + *beta * out);
    }
}

int main() {
  using namespace dtrain;
  rng r(3);
  tensor x = zeros({64, 5}), y = zeros({64});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 64; ++i) y(i) = x(i, 0) + x(i, 1) > 0 ? 1.0f : 0.0f;
  sequential<input<5>, dense<16, relu>, dense<2>> m(1);
  m.compile({.optimizer = adam{{.learning_rate = 0.02f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  const history h = m.fit(x, y, {.epochs = 20, .verbose = 0, .batch_size = 16});
  // 520 x 520 by 520 x 7: deeper and taller than the direct kernels take, so they decline it
  const std::size_t rows = 520, cols = 7;
  std::vector<float> a(rows * rows, 1.0f), b(rows * cols, 0.5f), c(rows * cols);
  detail::planned_gemm(transpose::no, transpose::no, rows, cols, rows, 1.0f, a.data(), rows, b.data(), cols, 0.0f,
                       c.data(), cols);
  const bool ok = h["loss"].back() < 0.5f * h["loss"].front() && sgemm_calls > 0 && c.back() == 260.0f &&
                  num_threads() == std::max(1, int(std::thread::hardware_concurrency()));
  std::printf("%s: loss %.4f -> %.4f, %d calls of this program's sgemm_, %d math threads without OpenBLAS\n",
              ok ? "PASS" : "FAIL", double(h["loss"].front()), double(h["loss"].back()), sgemm_calls, num_threads());
  return ok ? 0 : 1;
}
