// fit / evaluate / predict with Keras' epoch semantics, validation, callbacks and arrays (the loops
// that see the model through its API only, so the ones that train run on every backend of the suite).
#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
namespace tt = boost::test_tools;

namespace {
using net = sequential<input<4>, dense<8, relu>, dense<3>>;

/// 3 separable classes; x's last feature also carries the sample's index for bookkeeping tests.
std::pair<tensor, tensor> problem(std::size_t n, std::uint64_t seed = 1) {
  rng r(seed);
  tensor x = zeros({n, 4}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i % 3;
    for (std::size_t j = 0; j < 3; ++j) x(i, j) = 0.3f * r.normal() + (j == c ? 2.0f : 0.0f);
    x(i, 3) = float(i) * 1e-3f;
    y(i) = float(c);
  }
  return {x, y};
}
template <class B = cpu>
on<net, B> compiled(std::uint64_t seed = 3) {
  on<net, B> m(seed);
  m.compile({.optimizer = adam{{.learning_rate = 0.02f}},
             .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  return m;
}
struct counts {
  int train_begin = 0, train_end = 0, epoch_begin = 0, epoch_end = 0, batch_end = 0;
};
callback_ref counter(counts& c) {
  return lambda_callback({.on_train_begin = [&c](const logs&) { ++c.train_begin; },
                          .on_train_end = [&c](const logs&) { ++c.train_end; },
                          .on_epoch_begin = [&c](int, const logs&) { ++c.epoch_begin; },
                          .on_epoch_end = [&c](int, const logs&) { ++c.epoch_end; },
                          .on_train_batch_end = [&c](std::int64_t, const logs&) { ++c.batch_end; }});
}
}  // namespace

BOOST_AUTO_TEST_SUITE(fit)

BOOST_AUTO_TEST_CASE_TEMPLATE(full_passes_learn_and_call_every_hook, B, backends) {
  auto [x, y] = problem(96);
  auto m = compiled<B>();
  counts c;
  const history h = m.fit(data::from_tensor_slices(x, y) | data::shuffle(96) | data::batch(16),
                          {.epochs = 4, .callbacks = {counter(c)}, .verbose = 0});
  BOOST_TEST(h["loss"].size() == 4u);
  BOOST_TEST(h["loss"].back() < h["loss"].front());
  BOOST_TEST(h["accuracy"].back() > 0.9f);
  BOOST_TEST(c.train_begin == 1);
  BOOST_TEST(c.train_end == 1);
  BOOST_TEST(c.epoch_begin == 4);
  BOOST_TEST(c.epoch_end == 4);
  BOOST_TEST(c.batch_end == 4 * 6);
  BOOST_TEST(m.optimizer().iterations() == 24);
}

BOOST_AUTO_TEST_CASE(steps_per_epoch_continues_one_iterator_across_epochs) {
  auto [x, y] = problem(12);
  auto m = compiled();
  std::vector<float> seen;  // which samples each step trained on, through a map stage
  auto ds = data::from_tensor_slices(x, y) | data::repeat() | data::map([&seen](data::example e) {
              seen.push_back(std::round(e.first(3) * 1e3f));
              return e;
            }) |
            data::batch(4);
  m.fit(ds, {.epochs = 2, .steps_per_epoch = 2, .verbose = 0});
  BOOST_REQUIRE_EQUAL(seen.size(), 16u);
  BOOST_TEST(seen[8] == 8.0f);  // epoch 2 starts where epoch 1 stopped, not at sample 0
  BOOST_TEST(seen[12] == 0.0f);  // and wraps through repeat()
}

BOOST_AUTO_TEST_CASE(running_out_of_data_stops_training_with_a_warning) {
  auto [x, y] = problem(20);
  auto m = compiled();
  const history h = m.fit(data::from_tensor_slices(x, y) | data::batch(4), {.epochs = 3, .steps_per_epoch = 3, .verbose = 0});
  // 5 batches: epoch 0 takes 3, epoch 1 gets 2 and ends training
  BOOST_TEST(h.epochs == (std::vector<int>{0, 1}), tt::per_element());
  BOOST_TEST(m.optimizer().iterations() == 5);
  BOOST_CHECK_THROW(m.fit(data::from_tensor_slices(x, y) | data::repeat() | data::batch(4), {.verbose = 0}),
                    usage_error);
}

BOOST_AUTO_TEST_CASE(validation_frequency_and_initial_epoch) {
  auto [x, y] = problem(60);
  auto [xv, yv] = problem(30, 9);
  auto m = compiled();
  const history h = m.fit(data::from_tensor_slices(x, y) | data::batch(20),
                          {.epochs = 5, .initial_epoch = 1, .validation_data = data::from_tensor_slices(xv, yv) | data::batch(10),
                           .validation_freq = 2, .verbose = 0});
  BOOST_TEST(h.epochs == (std::vector<int>{1, 2, 3, 4}), tt::per_element());
  BOOST_TEST(h["val_loss"].size() == 2u);  // after epochs 1 and 3 (numbered from 0): (epoch + 1) % 2 == 0
  // the last validation equals evaluate() at the same weights
  const logs e = m.evaluate(data::from_tensor_slices(xv, yv) | data::batch(10), {.verbose = 0});
  BOOST_TEST(e.contains("accuracy"));
  BOOST_CHECK_THROW(m.fit(data::from_tensor_slices(x, y) | data::batch(20), {.verbose = 0, .validation_split = 0.2}),
                    usage_error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(arrays_with_validation_split_take_the_tail, B, backends) {
  auto [x, y] = problem(50);
  auto m = compiled<B>();
  const history h = m.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8, .validation_split = 0.2});
  BOOST_REQUIRE_EQUAL(h["val_loss"].size(), 2u);
  // validation ran on rows 40..49 with the final weights
  const logs tail = m.evaluate(detail::rows_of(x, 40, 50), detail::rows_of(y, 40, 50), {.verbose = 0, .batch_size = 8});
  BOOST_TEST(tail["loss"] == h["val_loss"].back(), tt::tolerance(1e-6f));
  BOOST_CHECK_THROW(m.fit(x, y, {.verbose = 0, .validation_split = 1.5}), value_error);
  BOOST_CHECK_THROW(m.fit(x, detail::rows_of(y, 0, 10), {.verbose = 0}), shape_error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(predict_concatenates_batches_and_early_stopping_stops_fit, B, backends) {
  auto [x, y] = problem(21);
  auto m = compiled<B>();
  const tensor p = m.predict(x, {.batch_size = 8});
  BOOST_TEST((extents_of(p) == extents{21, 3}));
  const tensor q = m.predict_on_batch(x);
  // the same rows in the same order; not bitwise, since a GPU's BLAS may choose its kernel by row count
  float worst = 0.0f, largest = 0.0f;
  for (std::size_t i = 0; i < p.size(); ++i)
    worst = std::max(worst, std::abs(p.data()[i] - q.data()[i])), largest = std::max(largest, std::abs(q.data()[i]));
  BOOST_TEST(worst <= 1e-5f * largest);
  // patience 0 on a metric that cannot improve after epoch 0 (lr 0): stops after epoch 1
  on<net, B> frozen(1);
  frozen.compile({.optimizer = sgd{{.learning_rate = 0.0f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  const history h = frozen.fit(x, y, {.epochs = 10, .callbacks = {early_stopping({.monitor = "loss"})}, .verbose = 0,
                                      .shuffle = false});
  BOOST_TEST(h.epochs.size() == 2u);
  BOOST_CHECK_THROW((on<net, B>{}.fit(x, y, {.verbose = 0})), usage_error);
}

BOOST_AUTO_TEST_CASE(a_pipeline_stored_as_any_dataset_trains_like_the_pipeline) {
  auto [x, y] = problem(40);
  const auto pipeline = data::from_tensor_slices(x, y) | data::batch(8);
  const data::any_dataset<data::example> stored = pipeline;
  auto a = compiled(), b = compiled();
  a.fit(pipeline, {.epochs = 2, .verbose = 0});
  b.fit(stored, {.epochs = 2, .validation_data = stored, .verbose = 0});
  BOOST_TEST(a.get_weights() == b.get_weights(), tt::per_element());
  BOOST_TEST(b.evaluate(stored, {.verbose = 0}).at("loss") == a.evaluate(pipeline, {.verbose = 0}).at("loss"));
}

BOOST_AUTO_TEST_SUITE_END()
