// dtrain with a BLAS other than OpenBLAS: this program links no BLAS library at all and brings its own
// column-major sgemm_ (the Fortran interface every BLAS exports), so OpenBLAS' thread controls are
// absent. It must link, train (the loss halves), and take the cores as its thread budget.
#include <cstdio>
#include <thread>

#include <dtrain/dtrain.hpp>

extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc) {
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
  const bool ok = h["loss"].back() < 0.5f * h["loss"].front() &&
                  num_threads() == std::max(1, int(std::thread::hardware_concurrency()));
  std::printf("%s: loss %.4f -> %.4f, %d math threads without OpenBLAS\n", ok ? "PASS" : "FAIL",
              double(h["loss"].front()), double(h["loss"].back()), num_threads());
  return ok ? 0 : 1;
}
