// Training throughput of the tutorial's CNN under multi_worker_mirrored_strategy, per worker and in
// total, and the share of a step spent waiting for gradient communication that backward did not hide.
// Run it with the launcher for 1 and 2 workers:
//   dtrain-launch -n 1 -- multi_worker_throughput [steps] [per-worker batch]
//   dtrain-launch -n 2 -- multi_worker_throughput [steps] [per-worker batch]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <dtrain/dtrain.hpp>
#include <dtrain/distribute/comm/ring_tcp.hpp>

using cnn = dtrain::sequential<dtrain::input<28, 28>, dtrain::reshape<28, 28, 1>, dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten, dtrain::dense<128, dtrain::relu>, dtrain::dense<10>>;

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const std::size_t batch = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 64;
  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy;
  const std::size_t workers = std::size_t(strategy.num_replicas_in_sync()), global = batch * workers;
  auto model = strategy.make_model<cnn>(1);
  model.compile({.optimizer = dtrain::adam{}, .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});
  dtrain::rng r(7);
  dtrain::tensor x = dtrain::zeros({global * 4, 28, 28}), y = dtrain::zeros({global * 4});
  for (auto& v : x) v = r.uniform();
  for (auto& v : y) v = float(r.below(10));
  auto ds = strategy.distribute_dataset(dtrain::data::from_tensor_slices(x, y) | dtrain::data::repeat() |
                                        dtrain::data::batch(global));
  auto it = dtrain::data::make_iterator(ds);
  for (int i = 0; i < 10; ++i) {  // warm-up
    auto b = it.next();
    model.train_step(b->first, b->second);
  }
  const auto before = strategy.stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    auto b = it.next();
    model.train_step(b->first, b->second);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double exposed = strategy.stats().exposed_seconds - before.exposed_seconds;
  if (strategy.is_chief())
    std::printf("workers %zu  batch/worker %zu  ms/step %.2f  samples/s/worker %.0f  samples/s total %.0f  "
                "exposed communication %.2f ms/step (%.1f%% of the step)\n",
                workers, batch, 1e3 * s / steps, double(batch * steps) / s, double(global * steps) / s,
                1e3 * exposed / steps, 100.0 * exposed / s);
  return 0;
} catch (const dtrain::comm_error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return dtrain::peer_failure_exit_code;
}
