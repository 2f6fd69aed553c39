#pragma once
// What the strategy tests train on several workers and compare with one: a small classifier, a seeded
// 3-class problem of 6 features, and weight equality up to the rounding of a different summation order.
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

#include <dtrain/dtrain.hpp>

namespace dtrain_test {

using small_net = dtrain::sequential<dtrain::input<6>, dtrain::dense<16, dtrain::tanh, dtrain::l2<0.001f>>, dtrain::dense<3>>;

/// n examples of 6 normal features and a label in 0..2 (the same for a given n on every worker).
inline std::pair<dtrain::tensor, dtrain::tensor> three_class_problem(std::size_t n) {
  dtrain::rng r(5);
  dtrain::tensor x = dtrain::zeros({n, 6}), y = dtrain::zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x(i, j) = r.normal();
    y(i) = float(r.below(3));
  }
  return {x, y};
}

/// Whether every weight of `a` is within float rounding of `b`: |a - b| <= 1e-5 + 1e-4 |b| (the
/// replicas' gradients are summed in another order than one worker's GEMMs sum them), or within
/// `absolute` + `relative` |b|.
inline bool weights_close(const std::vector<float>& a, const std::vector<float>& b, float absolute = 1e-5f,
                          float relative = 1e-4f) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > absolute + relative * std::abs(b[i])) return false;
  return true;
}

/// What `crash_and_resume` saw: the weights and step count of an uninterrupted fit, of one resumed from
/// the backup of a fit that crashed, and the weights of a fit with another seed.
struct resume_outcome {
  std::pair<std::vector<float>, std::int64_t> straight, resumed;
  bool crashed = false;
  std::vector<float> other_seed;
};

/// A fit of 3 epochs under strategy S on "/cpu:0".."/cpu:2", with dropout (each replica its own masks,
/// seeded from the model's generator) and Adam: straight; then with a backup every 2 steps in `dir` and a
/// crash at the 7th batch; then anew (another seed) resuming from that backup.
template <class S>
resume_outcome crash_and_resume(const std::filesystem::path& dir) {
  using namespace dtrain;
  using dnet = sequential<input<6>, dense<16, dtrain::tanh>, dropout<0.25f>, dense<3>>;
  struct crash_after : callback {
    std::int64_t limit, seen = 0;
    explicit crash_after(std::int64_t l) : limit(l) {}
    void on_train_batch_end(std::int64_t, const logs&) override {
      if (++seen == limit) throw std::runtime_error("simulated crash");
    }
  };
  auto [x, y] = three_class_problem(40);
  auto run = [&](std::uint64_t seed, std::vector<callback_ref> cbs) {
    S s({"/cpu:0", "/cpu:1", "/cpu:2"});
    auto m = s.template make_model<dnet>(seed);
    m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    m.fit(data::from_tensor_slices(x, y) | data::shuffle(40, 3) | data::batch(8),
          {.epochs = 3, .callbacks = callback_list(std::move(cbs)), .verbose = 0});
    return std::pair{m.get_weights(), m.optimizer().iterations()};
  };
  resume_outcome o;
  o.straight = run(1, {});
  try {
    run(1, {backup_and_restore({.backup_dir = dir, .save_freq = std::int64_t(2)}), crash_after(7)});
  } catch (const std::runtime_error&) {
    o.crashed = true;
  }
  o.resumed = run(9, {backup_and_restore({.backup_dir = dir, .save_freq = std::int64_t(2)})});
  o.other_seed = run(2, {}).first;
  return o;
}

}  // namespace dtrain_test
