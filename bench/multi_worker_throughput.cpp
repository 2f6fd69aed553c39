// Training throughput of the tutorial's CNN (or a small MLP) under multi_worker_mirrored_strategy, per
// worker and in total, and the share of a step spent waiting for gradient communication that backward
// did not hide. `step` times a loop of train_step; `fit` times model.fit, whose steps also carry the
// global batch logs, the stop and preemption flags and the callbacks. Run it with the launcher for 1
// and 2 workers:
//   dtrain-launch -n 1 -- multi_worker_throughput [steps] [per-worker batch] [step|fit] [cnn|mlp] [none|bf16|fp16]
//   dtrain-launch -n 2 -- multi_worker_throughput [steps] [per-worker batch] [step|fit] [cnn|mlp] [none|bf16|fp16]
// The last argument is the gradients' format on the wire (communication_options::gradient_compression).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <dtrain/dtrain.hpp>
#include <dtrain/distribute/comm/ring_tcp.hpp>

using cnn = dtrain::sequential<dtrain::input<28, 28>, dtrain::reshape<28, 28, 1>, dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten, dtrain::dense<128, dtrain::relu>, dtrain::dense<10>>;
using mlp = dtrain::sequential<dtrain::input<28, 28>, dtrain::flatten, dtrain::dense<128, dtrain::relu>, dtrain::dense<10>>;

template <class Net, class Strategy>
int run(Strategy& strategy, int steps, std::size_t batch, bool with_fit, const char* name, const char* wire) {
  const std::size_t workers = std::size_t(strategy.num_replicas_in_sync()), global = batch * workers;
  auto model = strategy.template make_model<Net>(1);
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
  if (with_fit) {
    model.fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
  } else {
    for (int i = 0; i < steps; ++i) {
      auto b = it.next();
      model.train_step(b->first, b->second);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double exposed = strategy.stats().exposed_seconds - before.exposed_seconds;
  if (strategy.is_chief())
    std::printf("%s %s  gradients %s  workers %zu  batch/worker %zu  ms/step %.3f  samples/s/worker %.0f  samples/s "
                "total %.0f  exposed communication %.2f ms/step (%.1f%% of the step)\n",
                name, with_fit ? "fit" : "step", wire, workers, batch, 1e3 * s / steps, double(batch * steps) / s,
                double(global * steps) / s, 1e3 * exposed / steps, 100.0 * exposed / s);
  return 0;
}

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const std::size_t batch = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 64;
  const std::string mode = argc > 3 ? argv[3] : "step", model = argc > 4 ? argv[4] : "cnn",
                    wire = argc > 5 ? argv[5] : "none";
  if ((mode != "step" && mode != "fit") || (model != "cnn" && model != "mlp") ||
      (wire != "none" && wire != "bf16" && wire != "fp16")) {
    std::fprintf(stderr, "usage: multi_worker_throughput [steps] [per-worker batch] [step|fit] [cnn|mlp] [none|bf16|fp16]\n");
    return 2;
  }
  dtrain::communication_options o;
  o.gradient_compression = wire == "bf16"   ? dtrain::compression::bf16
                           : wire == "fp16" ? dtrain::compression::fp16
                                            : dtrain::compression::none;
  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy(o);
  if (model == "mlp") return run<mlp>(strategy, steps, batch, mode == "fit", "mlp", wire.c_str());
  return run<cnn>(strategy, steps, batch, mode == "fit", "cnn", wire.c_str());
} catch (const dtrain::comm_error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return dtrain::peer_failure_exit_code;
}
