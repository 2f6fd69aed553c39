// A user's program: a small model trained under the multi-worker strategy (one worker here; the same
// binary joins a cluster when TF_CONFIG is set). It exits 0 when it learned the toy problem.
#include <cstdio>

#include <dtrain/dtrain.hpp>
#include <dtrain/distribute/comm/ring_tcp.hpp>

using net = dtrain::sequential<dtrain::input<4>, dtrain::dense<16, dtrain::relu>, dtrain::dense<2>>;

int main() {
  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy;
  auto model = strategy.make_model<net>();
  model.compile({.optimizer = dtrain::adam{{.learning_rate = 0.01f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});

  dtrain::rng gen(7);
  dtrain::tensor x = dtrain::zeros({256, 4}), y = dtrain::zeros({256});
  for (std::size_t i = 0; i < 256; ++i) {
    for (std::size_t j = 0; j < 4; ++j) x(i, j) = gen.uniform();
    y(i) = x(i, 0) > x(i, 1) ? 1.0f : 0.0f;  // which of the first two features is larger
  }
  model.fit(x, y, {.epochs = 40, .verbose = 0, .batch_size = 32});
  const auto logs = model.evaluate(x, y, {.verbose = 0});
  std::printf("consumer: %d replica(s), loss %.4f, accuracy %.4f\n", strategy.num_replicas_in_sync(), logs["loss"],
              logs["accuracy"]);
  return logs["accuracy"] >= 0.9f ? 0 : 1;
}
