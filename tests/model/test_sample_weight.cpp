// Keras' sample_weight and class_weight: each sample's loss (and gradient) is multiplied by its
// weight and the batch mean still divides by the rows; checked against the loss computed row by row, and
// against training on fewer rows, on every backend of the suite; class_weight is the sample weight of
// each sample's class; arrays, datasets of (x, y, sample_weight) and validation data agree; bad weights
// are errors that name them.
#include "support/gradcheck.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
namespace tt = boost::test_tools;

namespace {
using net = sequential<input<4>, dense<8, relu>, dense<3>>;

std::pair<tensor, tensor> problem(std::size_t n, std::uint64_t seed = 1) {
  rng r(seed);
  tensor x = zeros({n, 4}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i % 3;
    for (std::size_t j = 0; j < 4; ++j) x(i, j) = 0.5f * r.normal() + (j == c ? 1.0f : 0.0f);
    y(i) = float(c);
  }
  return {x, y};
}
tensor weights(std::size_t n) {
  tensor w = zeros({n});
  for (std::size_t i = 0; i < n; ++i) w(i) = 0.25f + 0.5f * float(i % 4);
  return w;
}
template <class B = cpu>
on<net, B> compiled(float learning_rate = 0.1f) {
  on<net, B> m(7);
  m.compile({.optimizer = sgd{{.learning_rate = learning_rate}},
             .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {sparse_categorical_accuracy{}}});
  return m;
}
/// The mean over the batch of weight times loss, computed row by row from the predictions.
double weighted_mean_loss(const tensor& p, const tensor& y, const tensor& w) {
  const tensor per = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}}(y, p);
  double s = 0.0;
  for (std::size_t i = 0; i < per.size(); ++i) s += double(w(i)) * double(per(i));
  return s / double(per.size());
}
std::vector<float> flat(const tensor& t) { return {t.begin(), t.end()}; }
}  // namespace

BOOST_AUTO_TEST_SUITE(sample_weight)

BOOST_AUTO_TEST_CASE_TEMPLATE(the_loss_is_the_mean_of_each_rows_loss_times_its_weight, B, backends) {
  auto [x, y] = problem(12);
  const tensor w = weights(12);
  auto m = compiled<B>();
  const double want = weighted_mean_loss(m.predict(x), y, w);
  BOOST_TEST(m.test_step(x, y, w).at("loss") == want, tt::tolerance(1e-5));
  BOOST_TEST(m.evaluate(x, y, {.verbose = 0, .batch_size = 12, .sample_weight = {w}}).at("loss") == want,
             tt::tolerance(1e-5));
  // (n, 1) weights are the same; the metrics are not weighted (Keras' `metrics=`)
  tensor w1 = w;
  w1.reshape({12, 1});
  const logs l = m.test_step(x, y, w1);
  BOOST_TEST(l.at("loss") == want, tt::tolerance(1e-5));
  BOOST_TEST(l.at("sparse_categorical_accuracy") == m.test_step(x, y).at("sparse_categorical_accuracy"));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_weight_scales_the_rows_gradient, B, backends) {
  auto [x, y] = problem(12);
  // weight 2 everywhere: the step of twice the learning rate
  auto a = compiled<B>(0.1f), b = compiled<B>(0.2f);
  tensor two = zeros({12});
  std::fill(two.begin(), two.end(), 2.0f);
  a.train_step(x, y, two);
  b.train_step(x, y);
  BOOST_TEST(dtrain_test::weights_close(a.get_weights(), b.get_weights()));
  // weight 0 on the last 8 rows: the step on the first 4 rows, its mean scaled by 4 / 12
  auto c = compiled<B>(0.3f), d = compiled<B>(0.1f);
  tensor first = zeros({12});
  std::fill_n(first.begin(), 4, 1.0f);
  c.train_step(x, y, first);
  d.train_step(detail::rows_of(x, 0, 4), detail::rows_of(y, 0, 4));
  BOOST_TEST(dtrain_test::weights_close(c.get_weights(), d.get_weights()));
  BOOST_TEST(!dtrain_test::weights_close(c.get_weights(), compiled<B>(0.3f).get_weights()));  // it trained
}

BOOST_AUTO_TEST_CASE(class_weight_is_the_weight_of_each_samples_class) {
  auto [x, y] = problem(30);
  const std::map<int, float> cw{{0, 2.0f}, {2, 0.5f}};  // class 1 is not listed: weight 1
  tensor w = zeros({30});
  for (std::size_t i = 0; i < 30; ++i) w(i) = y(i) == 0.0f ? 2.0f : y(i) == 2.0f ? 0.5f : 1.0f;
  auto a = compiled(), b = compiled();
  const history ha = a.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8, .class_weight = cw});
  const history hb = b.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8, .sample_weight = {w}});
  BOOST_TEST(a.get_weights() == b.get_weights(), tt::per_element());
  BOOST_TEST(ha.history.at("loss") == hb.history.at("loss"), tt::per_element());
  // one-hot labels: the class is the largest value's index
  tensor onehot = zeros({30, 3});
  for (std::size_t i = 0; i < 30; ++i) onehot(i, std::size_t(y(i))) = 1.0f;
  BOOST_TEST(flat(detail::class_sample_weights(onehot, cw)) == flat(w), tt::per_element());
  tensor column = y;
  column.reshape({30, 1});
  BOOST_TEST(flat(detail::class_sample_weights(column, cw)) == flat(w), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_dataset_of_weighted_batches_trains_like_weighted_arrays) {
  auto [x, y] = problem(30);
  const tensor w = weights(30);
  auto a = compiled(), b = compiled();
  a.fit(data::from_tensor_slices(x, y, w) | data::batch(8), {.epochs = 2, .verbose = 0});
  b.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 8, .shuffle = false, .sample_weight = {w}});
  BOOST_TEST(a.get_weights() == b.get_weights(), tt::per_element());
  // shuffled, the weights travel with their samples: the same as shuffling whole examples
  auto c = compiled(), d = compiled();
  c.fit(data::from_tensor_slices(x, y, w) | data::shuffle(30, 5) | data::batch(8), {.epochs = 1, .verbose = 0});
  tensor xs = zeros({30, 4}), ys = zeros({30}), ws = zeros({30});
  std::size_t i = 0;
  for (auto it = (data::from_tensor_slices(x, y, w) | data::shuffle(30, 5)).iterate(0); auto e = it.next(); ++i) {
    std::copy(std::get<0>(*e).begin(), std::get<0>(*e).end(), xs.begin() + std::ptrdiff_t(4 * i));
    ys(i) = std::get<1>(*e)(), ws(i) = std::get<2>(*e)();
  }
  d.fit(xs, ys, {.epochs = 1, .verbose = 0, .batch_size = 8, .shuffle = false, .sample_weight = {ws}});
  BOOST_TEST(c.get_weights() == d.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(validation_data_is_weighted_too) {
  auto [x, y] = problem(40);
  const tensor w = weights(40);
  auto m = compiled();
  const history h = m.fit(x, y, {.epochs = 1, .verbose = 0, .batch_size = 40, .validation_split = 0.25,
                                 .sample_weight = {w}});
  const double want = weighted_mean_loss(m.predict(detail::rows_of(x, 30, 40)), detail::rows_of(y, 30, 40), detail::rows_of(w, 30, 40));
  BOOST_TEST(h.history.at("val_loss").back() == want, tt::tolerance(1e-5));
  const auto val = data::from_tensor_slices(detail::rows_of(x, 30, 40), detail::rows_of(y, 30, 40), detail::rows_of(w, 30, 40));
  const history h2 = compiled().fit(x, y, {.epochs = 1, .validation_data = val | data::batch(4), .verbose = 0});
  BOOST_TEST(h2.history.count("val_loss") == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weighted_metrics_weigh_each_sample, B, backends) {
  auto [x, y] = problem(12);
  const tensor w = weights(12);
  on<net, B> m(7);
  m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {sparse_categorical_accuracy{}},
             .weighted_metrics = {sparse_categorical_accuracy{}, sparse_top_k_categorical_accuracy{.k = 2}}});
  const tensor p = m.predict(x);
  double hits = 0.0, top2 = 0.0, total = 0.0, plain = 0.0;
  for (std::size_t i = 0; i < 12; ++i) {
    std::size_t best = 0;
    for (std::size_t c = 1; c < 3; ++c)
      if (p(i, c) > p(i, best)) best = c;
    const std::size_t label = std::size_t(y(i));
    std::size_t above = 0;  // classes scored above the label's
    for (std::size_t c = 0; c < 3; ++c) above += p(i, c) > p(i, label) ? 1 : 0;
    hits += best == label ? w(i) : 0.0, top2 += above < 2 ? w(i) : 0.0, total += w(i), plain += best == label;
  }
  const logs l = m.test_step(x, y, w);
  // the unweighted metric keeps its name, the weighted one of the same name is "weighted_..."
  BOOST_TEST(l.at("sparse_categorical_accuracy") == plain / 12.0, tt::tolerance(1e-6));
  BOOST_TEST(l.at("weighted_sparse_categorical_accuracy") == hits / total, tt::tolerance(1e-6));
  BOOST_TEST(l.at("sparse_top_k_categorical_accuracy") == top2 / total, tt::tolerance(1e-6));
  BOOST_TEST(hits / total != plain / 12.0);  // the weights matter here
  // without sample weights a weighted metric is the plain one
  m.reset_metrics();
  const logs u = m.test_step(x, y);
  BOOST_TEST(u.at("weighted_sparse_categorical_accuracy") == u.at("sparse_categorical_accuracy"));
  // per-row weights cannot weigh a metric of samples
  tensor rows = zeros({12, 3});
  BOOST_CHECK_THROW(m.test_step(x, y, rows), shape_error);
}

BOOST_AUTO_TEST_CASE(weighted_metrics_are_in_the_compile_config) {
  net m(7);
  m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{}, .metrics = {accuracy{}},
             .weighted_metrics = {auc{}}});
  const auto config = checkpoint::compile_config(m);
  BOOST_REQUIRE(config);
  const auto s = checkpoint::compile_settings_from(*config, 1, "model.safetensors");
  BOOST_REQUIRE_EQUAL(s.output_metrics.at(0).size(), 2u);
  BOOST_TEST(!s.output_metrics[0][0].weighted());
  BOOST_TEST(s.output_metrics[0][1].weighted());
  BOOST_TEST(s.output_metrics[0][1].name() == "auc");
}

BOOST_AUTO_TEST_CASE(bad_weights_are_errors_that_name_them) {
  auto [x, y] = problem(12);
  auto m = compiled();
  const auto before = m.get_weights();
  BOOST_CHECK_EXCEPTION(m.train_step(x, y, weights(10)), shape_error, [](const shape_error& e) {
    return std::string(e.what()).find("sample_weight of shape (10,)") != std::string::npos;
  });
  tensor nan = weights(12);
  nan(5) = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_EXCEPTION(m.train_step(x, y, nan), value_error, [](const value_error& e) {
    return std::string(e.what()).find("at index 5 is not finite") != std::string::npos;
  });
  BOOST_TEST(m.get_weights() == before, tt::per_element());  // nothing was trained
  BOOST_CHECK_THROW(m.fit(x, y, {.verbose = 0, .sample_weight = {weights(11)}}), shape_error);
  BOOST_CHECK_THROW(m.fit(x, y, {.verbose = 0, .sample_weight = {weights(12)}, .class_weight = {{0, 2.0f}}}), value_error);
  BOOST_CHECK_THROW(m.fit(data::from_tensor_slices(x, y) | data::batch(4), {.verbose = 0, .sample_weight = {weights(12)}}),
                    usage_error);
  BOOST_CHECK_THROW(m.evaluate(data::from_tensor_slices(x, y) | data::batch(4), {.verbose = 0, .sample_weight = {weights(12)}}),
                    usage_error);
  BOOST_CHECK_THROW(m.fit(x, y, {.verbose = 0, .class_weight = {{1, std::numeric_limits<float>::infinity()}}}), value_error);
}

BOOST_AUTO_TEST_SUITE_END()
