// A model of two inputs and two outputs under both strategies, over real loopback sockets and in
// mirrored_strategy's in-process replicas: datasets of multi_example batches are split among the
// workers input by input and output by output (a short last batch leaves a worker without rows), the
// replicas train like one worker with the global batch, and predict gathers every output in order.
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;
using dtrain_test::weights_close;

namespace {
struct x_in;
struct side;
struct feat;
struct joined;
struct label;
struct score;
using two_by_two = functional<inputs<node<x_in, input<6>>, node<side, input<2>>>, node<feat, dense<8, dtrain::tanh>>,
                              node<joined, concatenate, feat, side>, node<label, dense<3>>,
                              node<score, dense<1>, joined>, outputs<label, score>>;

/// 50 samples (6 features and 2 side features; a class and a score) in global batches of 12: the last
/// batch of an epoch has 2 rows, so with 3 workers one of them has none in that step.
std::pair<std::vector<tensor>, std::vector<tensor>> arrays() {
  auto [x, y] = dtrain_test::three_class_problem(50);
  tensor s = zeros({50, 2}), sc = zeros({50, 1});
  for (std::size_t i = 0; i < 50; ++i) s(i, 0) = x(i, 0) * x(i, 1), s(i, 1) = 1.0f - x(i, 2), sc(i, 0) = x(i, 3) - s(i, 1);
  return {{x, s}, {y, sc}};
}
auto dataset() {
  auto [x, y] = arrays();
  return data::from_tensor_slices(x, y) | data::batch(12);
}
template <class Model>
void compile(Model& m) {
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}},
             .losses = {sparse_categorical_crossentropy{{.from_logits = true}}, mean_squared_error{}},
             .loss_weights = {1.0f, 0.5f}, .output_metrics = {{sparse_categorical_accuracy{}}, {}}});
}

struct run {
  std::vector<float> weights;
  logs last;
  std::vector<tensor> predictions;
};
std::vector<run> train_workers(int p) {
  std::vector<run> out(static_cast<std::size_t>(p));
  dtrain_test::on_workers(p, [&](auto& s, int r) {
    auto model = s.template make_model<two_by_two>(3);
    compile(model);
    const history h = model.fit(dataset(), {.epochs = 2, .verbose = 0});
    run& mine = out[std::size_t(r)];
    mine.weights = model.get_weights();
    for (const auto& [k, v] : h.history) mine.last.set(k, v.back());
    mine.predictions = model.predict(data::from_tensor_slices(arrays().first) | data::batch(8));
  });
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(multi_io_across_replicas)

BOOST_AUTO_TEST_CASE(workers_train_and_predict_like_one_worker_with_the_global_batch) {
  const auto one = train_workers(1);
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("workers = " << p) {
      const auto many = train_workers(p);
      BOOST_TEST(weights_close(many[0].weights, one[0].weights));
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)].weights == many[0].weights, tt::per_element());
      // every worker reports the global logs, per output too
      for (const char* k : {"loss", "dense_1_loss", "dense_2_loss", "dense_1_sparse_categorical_accuracy"})
        BOOST_TEST(many[std::size_t(p - 1)].last.at(k) == one[0].last.at(k), tt::tolerance(1e-4f) << k);
      // each worker returns every output of all 50 samples, in order
      for (std::size_t o = 0; o < 2; ++o) {
        const tensor& got = many[std::size_t(p - 1)].predictions[o];
        const tensor& want = one[0].predictions[o];
        BOOST_TEST(extents_of(got) == extents_of(want), tt::per_element());
        BOOST_TEST(weights_close(std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end())));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mirrored_replicas_train_like_one_replica) {
  auto train = [](int n) {
    std::vector<std::string> devices;
    for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
    mirrored_strategy<> s(devices);
    auto model = s.make_model<two_by_two>(3);
    compile(model);
    model.fit(s.distribute_dataset(dataset()), {.epochs = 2, .verbose = 0});
    return model.get_weights();
  };
  const auto one = train(1);
  for (int n : {2, 3}) BOOST_TEST_CONTEXT("replicas = " << n) { BOOST_TEST(weights_close(train(n), one)); }
}

BOOST_AUTO_TEST_CASE(distribute_dataset_splits_every_input_and_output_by_rows) {
  auto [x, y] = arrays();
  for (std::size_t r = 0; r < 3; ++r) {
    distributed_dataset d(data::from_tensor_slices(x, y) | data::batch(12) | data::take(1), 3, int(r));
    auto it = d.iterate(0);
    const auto b = it.next();
    BOOST_REQUIRE(b);
    BOOST_REQUIRE_EQUAL(b->first.size(), 2u);
    BOOST_REQUIRE_EQUAL(b->second.size(), 2u);
    for (const auto* list : {&b->first, &b->second})
      for (std::size_t c = 0; c < 2; ++c) {
        const tensor& part = (*list)[c];
        const tensor& whole = (list == &b->first ? x : y)[c];
        const tensor want = dtrain::detail::rows_of(whole, 4 * r, 4 * r + 4);
        BOOST_TEST(std::vector<float>(part.begin(), part.end()) == std::vector<float>(want.begin(), want.end()),
                   tt::per_element());
      }
  }
}

BOOST_AUTO_TEST_SUITE_END()
