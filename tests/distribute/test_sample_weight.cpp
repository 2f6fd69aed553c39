// Sample and class weights across replicas: the weights are split with their rows, so workers over
// real loopback sockets (odd numbers, a short last batch that leaves one without rows) and mirrored
// replicas train like one worker with the global batch and report the same weighted loss.
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;
using dtrain_test::weights_close;

namespace {
using net = sequential<input<6>, dense<8, dtrain::tanh>, dense<3>>;

/// 50 samples in global batches of 12 (the last has 2 rows), weighted 0.5, 1, 1.5, 2, 0.5, ...
struct weighted_data {
  tensor x, y, w;
};
weighted_data problem() {
  auto [x, y] = dtrain_test::three_class_problem(50);
  tensor w = zeros({50});
  for (std::size_t i = 0; i < 50; ++i) w(i) = 0.5f * float(1 + i % 4);
  return {x, y, w};
}
template <class Model>
void compile(Model& m) {
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
}
struct run {
  std::vector<float> weights;
  float loss = 0.0f, val_loss = 0.0f;
};
/// fit on p workers: weighted batches, or class weights.
std::vector<run> train_workers(int p, bool class_weights) {
  std::vector<run> out(static_cast<std::size_t>(p));
  dtrain_test::on_workers(p, [&](auto& s, int r) {
    auto model = s.template make_model<net>(3);
    compile(model);
    const auto [x, y, w] = problem();
    const auto val = data::from_tensor_slices(x, y, w) | data::batch(12);
    const history h = class_weights
                          ? model.fit(data::from_tensor_slices(x, y) | data::batch(12),
                                      {.epochs = 2, .verbose = 0, .class_weight = {{0, 0.5f}, {1, 3.0f}}})
                          : model.fit(data::from_tensor_slices(x, y, w) | data::batch(12),
                                      {.epochs = 2, .validation_data = val, .verbose = 0});
    run& mine = out[std::size_t(r)];
    mine.weights = model.get_weights();
    mine.loss = h.history.at("loss").back();
    if (!class_weights) mine.val_loss = h.history.at("val_loss").back();
  });
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(sample_weight_across_replicas)

BOOST_AUTO_TEST_CASE(workers_train_on_weighted_batches_like_one_worker) {
  for (bool class_weights : {false, true}) {
    const auto one = train_workers(1, class_weights);
    for (int p : {2, 3}) {
      BOOST_TEST_CONTEXT("workers = " << p << ", class_weight = " << class_weights) {
        const auto many = train_workers(p, class_weights);
        BOOST_TEST(weights_close(many[0].weights, one[0].weights));
        for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)].weights == many[0].weights, tt::per_element());
        BOOST_TEST(many[std::size_t(p - 1)].loss == one[0].loss, tt::tolerance(1e-4f));
        BOOST_TEST(many[std::size_t(p - 1)].val_loss == one[0].val_loss, tt::tolerance(1e-4f));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mirrored_replicas_split_the_weights_with_their_rows) {
  auto train = [](int n) {
    std::vector<std::string> devices;
    for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
    mirrored_strategy<> s(devices);
    auto model = s.make_model<net>(3);
    compile(model);
    const auto [x, y, w] = problem();
    const history h = model.fit(s.distribute_dataset(data::from_tensor_slices(x, y, w) | data::batch(12)),
                                {.epochs = 2, .verbose = 0});
    // a step outside strategy.run splits a weighted batch among the replicas
    const float step_loss = model.train_step(detail::rows_of(x, 0, 7), detail::rows_of(y, 0, 7), detail::rows_of(w, 0, 7)).at("loss");
    return std::pair{model.get_weights(), std::pair{h.history.at("loss").back(), step_loss}};
  };
  const auto one = train(1);
  for (int n : {2, 3}) {
    BOOST_TEST_CONTEXT("replicas = " << n) {
      const auto many = train(n);
      BOOST_TEST(weights_close(many.first, one.first));
      BOOST_TEST(many.second.first == one.second.first, tt::tolerance(1e-4f));
      BOOST_TEST(many.second.second == one.second.second, tt::tolerance(1e-4f));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
