// Conan's test_package: a small model trained through the packaged headers and libraries, under the
// multi-worker strategy when the ring_tcp component is there (one worker without TF_CONFIG), so that its
// Asio and OpenSSL are linked too, and with DTRAIN_GEMM=blas when the blas component is.
#include <cstdio>
#include <cstdlib>

#include <dtrain/dtrain.hpp>
#ifdef DTRAIN_TEST_RING
#include <dtrain/distribute/comm/ring_tcp.hpp>
#endif

using net = dtrain::sequential<dtrain::input<4>, dtrain::dense<8, dtrain::relu>, dtrain::dense<2>>;

int main() {
#ifdef DTRAIN_TEST_BLAS
  setenv("DTRAIN_GEMM", "blas", 1);  // (read at the first product)
  const char* gemm = ", DTRAIN_GEMM=blas";
#else
  const char* gemm = "";
#endif
#ifdef DTRAIN_TEST_RING
  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy;
  auto model = strategy.make_model<net>();
  const char* how = "multi_worker_mirrored_strategy<ring_tcp>";
#else
  net model;
  const char* how = "single worker";
#endif
  model.compile({.optimizer = dtrain::sgd{{.learning_rate = 0.1f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}}});
  const dtrain::tensor x = dtrain::zeros({16, 4}), y = dtrain::zeros({16});
  const auto history = model.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8});
  std::printf("dtrain %s (%s%s): loss %.4f after %zu epochs\n", dtrain::version, how, gemm, history["loss"].back(),
              history["loss"].size());
}
