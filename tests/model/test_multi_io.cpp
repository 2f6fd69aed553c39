// Functional models of several inputs and outputs (model/graph.hpp's inputs<...> and outputs<...>), on
// every backend of the suite: gradients against central differences with respect to the weights and to
// both inputs, through an output another node also takes; per-output losses, weights and metrics with
// Keras' log names and values checked against the losses of the predictions; fit on lists of arrays
// and on datasets of multi_example batches, evaluate and predict; and the errors a wrong batch gets.
#include <sstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
using dtrain_test::to_host;
namespace tt = boost::test_tools;

namespace {
struct image;
struct meta;
struct feat;
struct joined;
struct label;
struct score;
struct total;

// inputs = [Input((3, 3, 2)), Input((4,))]; feat = Dense(5, tanh)(Flatten()(image));
// joined = Concatenate()([feat, meta]); label = Dense(3)(joined); score = Dense(2)(joined);
// total = Dense(1)(Concatenate()([label, score])); Model(inputs, [label, total]): the first output is
// also taken by a later node, so its gradient is its loss' plus what flows back from the second.
using two_by_two = functional<inputs<node<image, input<3, 3, 2>>, node<meta, input<4>>>, flatten,
                              node<feat, dense<5, dtrain::tanh>>, node<joined, concatenate, feat, meta>,
                              node<label, dense<3>>, node<score, dense<2>, joined>, node<void, concatenate, label, score>,
                              node<total, dense<1>>, outputs<label, total>>;

static_assert(two_by_two::num_inputs == 2 && two_by_two::num_outputs == 2);
static_assert(std::is_same_v<two_by_two::output_shape_at<0>, shape<3>>);
static_assert(std::is_same_v<two_by_two::output_shape_at<1>, shape<1>>);
static_assert(std::is_same_v<two_by_two::input_shape_at<1>, shape<4>>);
static_assert(std::is_same_v<two_by_two::prediction_type, std::vector<tensor>>);
static_assert(two_by_two::param_count == (18 * 5 + 5) + (9 * 3 + 3) + (9 * 2 + 2) + (5 * 1 + 1));

// One input, two outputs (a shared trunk, two heads), and two inputs, one output.
using two_heads = functional<input<4>, node<feat, dense<6, relu>>, node<label, dense<3>>, node<score, dense<1>, feat>,
                             outputs<label, score>>;
using two_inputs = functional<inputs<node<image, input<3, 3, 2>>, node<meta, input<4>>>, flatten, node<feat, dense<4>>,
                              node<void, add, feat, meta>, dense<3>>;
static_assert(std::is_same_v<two_inputs::prediction_type, tensor>);
static_assert(std::is_same_v<two_heads::input_gradient_type, tensor>);

/// n samples: an image and 4 side features; the class is where the image is bright, the score a linear
/// function of the side features.
struct problem {
  std::vector<tensor> x, y;
};
problem make_problem(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  tensor img = zeros({n, 3, 3, 2}), side = zeros({n, 4}), cls = zeros({n}), sc = zeros({n, 1});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = r.below(3);
    for (std::size_t a = 0; a < 3; ++a)
      for (std::size_t b = 0; b < 3; ++b)
        for (std::size_t ch = 0; ch < 2; ++ch) img(i, a, b, ch) = 0.3f * r.normal() + (a == c ? 1.0f : 0.0f);
    for (std::size_t j = 0; j < 4; ++j) side(i, j) = r.normal();
    cls(i) = float(c);
    sc(i, 0) = 0.5f * side(i, 0) - side(i, 2);
  }
  return {{img, side}, {cls, sc}};
}

const any_loss sce = sparse_categorical_crossentropy{{.from_logits = true}};
const any_loss mse = mean_squared_error{};

/// The loss of predictions `p` against targets `y` (a tensor's mean).
double value(const any_loss& l, const tensor& y, const tensor& p) { return l(y, p)(); }
// Cross-attention: a query of 3 steps attends to a value of 5 (the key too), then, causally, to the
// value with a key of its own; their sum through a dense head.
struct query_in;
struct value_in;
struct key_in;
struct cross;
struct keyed;
using attending = functional<inputs<node<query_in, input<3, 4>>, node<value_in, input<5, 6>>, node<key_in, input<5, 2>>>,
                             node<cross, multi_head_attention<2, 3>, query_in, value_in>,
                             node<keyed, multi_head_attention<2, 2, value_dim<3>, use_causal_mask<true>>, cross, value_in, key_in>,
                             node<void, add, cross, keyed>, flatten, dense<3>>;
static_assert(std::is_same_v<attending::layer_type<0>::output_shape, shape<3, 4>>);
static_assert(attending::layer_type<0>::arity == 2 && attending::layer_type<1>::arity == 3);
// the query's, key's and value's kernels of the second attention have their inputs' widths: 4, 2, 6
static_assert(param_count_v<attending::layer_type<1>> == (4 * 4 + 4) + (2 * 4 + 4) + (6 * 6 + 6) + (6 * 4 + 4));
}  // namespace

BOOST_AUTO_TEST_SUITE(multi_io_models)

BOOST_AUTO_TEST_CASE_TEMPLATE(gradients_reach_every_weight_and_both_inputs, B, backends) {
  on<two_by_two, B> m(4);
  auto [x, y] = make_problem(5, 2);
  // a loss of both outputs written by hand: sum(c * label) + sum(total^2) / 2
  rng r(9);
  std::vector<float> coef(15);
  for (float& v : coef) v = r.normal();
  auto f = [&](const std::vector<tensor>& p, std::vector<tensor>& d) -> float {
    double l = 0.0;
    for (std::size_t i = 0; i < 15; ++i) l += coef[i] * p[0].data()[i], d[0].data()[i] = coef[i];
    for (std::size_t i = 0; i < 5; ++i) l += 0.5 * p[1].data()[i] * p[1].data()[i], d[1].data()[i] = p[1].data()[i];
    return float(l);
  };
  m.watch_inputs();
  m.value_and_gradients(x, f);
  const std::vector<float> analytic = to_host(m.gradients());
  const std::vector<tensor> dx = m.input_gradients();
  BOOST_REQUIRE_EQUAL(dx.size(), 2u);
  std::vector<float> params = m.get_weights(), x0(x[0].begin(), x[0].end()), x1(x[1].begin(), x[1].end());
  auto loss = [&]() -> double {
    m.set_weights(params);
    std::copy(x0.begin(), x0.end(), x[0].begin());
    std::copy(x1.begin(), x1.end(), x[1].begin());
    std::vector<tensor> p = m(x, true), d{zeros({5, 3}), zeros({5, 1})};
    return f(p, d);
  };
  dtrain_test::check_gradient("two_by_two d/dweights", params, analytic, loss, 400);
  dtrain_test::check_gradient("two_by_two d/dimage", x0, {dx[0].data(), dx[0].size()}, loss);
  dtrain_test::check_gradient("two_by_two d/dmeta", x1, {dx[1].data(), dx[1].size()}, loss);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(cross_attention_gradients_reach_the_query_the_key_and_the_value, B, backends) {
  on<attending, B> m(3);
  rng r(5);
  std::vector<tensor> x{zeros({2, 3, 4}), zeros({2, 5, 6}), zeros({2, 5, 2})};
  for (auto& t : x)
    for (auto& v : t) v = r.normal();
  tensor y = zeros({2});
  y(0) = 1, y(1) = 2;
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true}};
  m.watch_inputs();
  m.value_and_gradients(x, y, loss);
  const std::vector<float> analytic = to_host(m.gradients());
  const std::vector<tensor> dx = m.input_gradients();
  BOOST_REQUIRE_EQUAL(dx.size(), 3u);
  std::vector<float> params = m.get_weights();
  std::vector<std::vector<float>> xs;
  for (const auto& t : x) xs.emplace_back(t.begin(), t.end());
  auto f = [&]() -> double {
    m.set_weights(params);
    for (std::size_t k = 0; k < 3; ++k) std::copy(xs[k].begin(), xs[k].end(), x[k].begin());
    return loss(y, m(x, true))();
  };
  dtrain_test::check_gradient("cross-attention d/dweights", params, analytic, f, 400);
  dtrain_test::check_gradient("d/dquery", xs[0], {dx[0].data(), dx[0].size()}, f);
  dtrain_test::check_gradient("d/dvalue", xs[1], {dx[1].data(), dx[1].size()}, f);
  dtrain_test::check_gradient("d/dkey", xs[2], {dx[2].data(), dx[2].size()}, f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weighted_losses_and_per_output_metrics_are_logged_as_keras_names_them, B, backends) {
  on<two_by_two, B> m(5);
  auto [x, y] = make_problem(8, 3);
  // lr 0: the step computes and logs, the weights stay, so the logs are the predictions' losses
  m.compile({.optimizer = sgd{{.learning_rate = 0.0f}}, .losses = {sce, mse}, .loss_weights = {0.5f, 2.0f},
             .output_metrics = {{sparse_categorical_accuracy{}}, {}}});
  const logs l = m.train_step(x, y);
  const std::vector<tensor> p = m(x);
  const double l0 = value(sce, y[0], p[0]), l1 = value(mse, y[1], p[1]);
  // as Keras 3.15 logs them: each output's loss unweighted under its layer's name (dense_1, dense_3),
  // "loss" the weighted sum
  BOOST_TEST(l.at("dense_1_loss") == l0, tt::tolerance(1e-5));
  BOOST_TEST(l.at("dense_3_loss") == l1, tt::tolerance(1e-5));
  BOOST_TEST(l.at("loss") == 0.5 * l0 + 2.0 * l1, tt::tolerance(1e-5));
  std::size_t right = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    const float* row = p[0].data() + 3 * i;
    right += std::size_t(std::max_element(row, row + 3) - row) == std::size_t(y[0](i));
  }
  BOOST_TEST(l.at("dense_1_sparse_categorical_accuracy") == double(right) / 8.0, tt::tolerance(1e-6));
  BOOST_TEST(!l.contains("dense_3_sparse_categorical_accuracy"));
  // the gradients are those of the weighted sum
  const std::vector<float> analytic = to_host(m.gradients());
  std::vector<float> params = m.get_weights();
  auto f = [&]() -> double {
    m.set_weights(params);
    const std::vector<tensor> q = m(x, true);
    return 0.5 * value(sce, y[0], q[0]) + 2.0 * value(mse, y[1], q[1]);
  };
  dtrain_test::check_gradient("weighted losses d/dweights", params, analytic, f, 300);
  // evaluate reports the same names; a flat metric list goes to every output
  m.compile({.optimizer = sgd{}, .loss = mse, .metrics = {binary_accuracy{}}});
  const logs e = m.evaluate(x, std::vector<tensor>{dtrain::zeros({8, 3}), y[1]}, {.verbose = 0});
  for (const char* k : {"loss", "dense_1_loss", "dense_3_loss", "dense_1_binary_accuracy", "dense_3_binary_accuracy"})
    BOOST_TEST(e.contains(k), k);
}

BOOST_AUTO_TEST_CASE(fit_on_lists_of_arrays_and_on_multi_example_datasets_learns_both_outputs) {
  auto [x, y] = make_problem(240, 4);
  two_by_two m(6);
  m.compile({.optimizer = adam{{.learning_rate = 0.02f}}, .losses = {sce, mse},
             .output_metrics = {{sparse_categorical_accuracy{}}, {}}});
  const logs before = m.evaluate(x, y, {.verbose = 0});
  const history h = m.fit(x, y, {.epochs = 12, .verbose = 0, .batch_size = 16, .validation_split = 0.25});
  const logs after = m.evaluate(x, y, {.verbose = 0});
  BOOST_TEST(after.at("dense_1_loss") < 0.3 * before.at("dense_1_loss"));
  BOOST_TEST(after.at("dense_3_loss") < 0.3 * before.at("dense_3_loss"));
  BOOST_TEST(after.at("dense_1_sparse_categorical_accuracy") > 0.9);
  BOOST_TEST(h.history.count("val_dense_3_loss") == 1u);
  BOOST_TEST(h.history.at("val_loss").size() == 12u);

  // predict over a dataset of x lists: every output, in order, as the model computes them
  const std::vector<tensor> p = m.predict(data::from_tensor_slices(x) | data::batch(7));
  const std::vector<tensor> direct = m(x);
  BOOST_REQUIRE_EQUAL(p.size(), 2u);
  for (std::size_t o = 0; o < 2; ++o) {
    BOOST_TEST(extents_of(p[o]) == extents_of(direct[o]), tt::per_element());
    BOOST_TEST(dtrain_test::scaled_difference(p[o], direct[o]) < 1e-5);  // batches of 7 against one product
  }

  // a dataset of multi_example batches trains a fresh model exactly as the same batches of arrays
  two_by_two a(7), b(7);
  for (auto* mm : {&a, &b}) mm->compile({.optimizer = sgd{{.learning_rate = 0.05f}}, .losses = {sce, mse}});
  a.fit(data::from_tensor_slices(x, y) | data::batch(32), {.epochs = 2, .verbose = 0});
  b.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 32, .shuffle = false});
  BOOST_TEST(a.get_weights() == b.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(one_input_two_heads_and_two_inputs_one_output_take_mixed_arguments) {
  auto [x, y] = make_problem(12, 5);
  two_heads heads(1);
  heads.compile({.optimizer = sgd{}, .losses = {sce, mse}});
  const tensor side = x[1];
  BOOST_TEST(std::isfinite(heads.train_step(side, y).at("loss")));  // x a tensor, y a list
  const std::vector<tensor> p = heads(side);
  BOOST_TEST(p.size() == 2u);

  two_inputs joined(2);
  joined.compile({.optimizer = sgd{}, .loss = sce});
  BOOST_TEST(std::isfinite(joined.train_step(x, y[0]).at("loss")));  // x a list, y a tensor
  const tensor q = joined.predict(x, {.batch_size = 5});
  BOOST_TEST(extents_of(q) == (extents{12, 3}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_wrong_batch_or_compile_says_what_is_wrong) {
  auto [x, y] = make_problem(6, 6);
  two_by_two m(1);
  BOOST_CHECK_EXCEPTION(m.compile({.optimizer = sgd{}, .losses = {sce}}), usage_error, [](const usage_error& e) {
    return std::string(e.what()).find(".losses has 1 entries but the model has 2 outputs") != std::string::npos;
  });
  BOOST_CHECK_THROW(m.compile({.optimizer = sgd{}, .loss = sce, .losses = {sce, mse}}), usage_error);
  BOOST_CHECK_THROW(m.compile({.optimizer = sgd{}, .loss = sce, .loss_weights = {1.0f}}), usage_error);
  m.compile({.optimizer = sgd{}, .losses = {sce, mse}});
  BOOST_CHECK_EXCEPTION(m.train_step(x[0], y), shape_error, [](const shape_error& e) {
    return std::string(e.what()).find("got 1 input arrays but the model takes 2") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(m.train_step(x, y[0]), shape_error, [](const shape_error& e) {
    return std::string(e.what()).find("got 1 target arrays but the model has 2 outputs") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(m.train_step(std::vector<tensor>{x[1], x[0]}, y), shape_error, [](const shape_error& e) {
    return std::string(e.what()).find("does not match the model's input 0 (None, 3, 3, 2) (layer 'flatten'") !=
           std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(m.train_step(std::vector<tensor>{x[0], dtrain::zeros({5, 4})}, y), shape_error,
                        [](const shape_error& e) {
                          return std::string(e.what()).find("input 0 has 6 samples but input 1 has shape (5, 4)") !=
                                 std::string::npos;
                        });
  // the targets swapped: the loss' complaint names the output
  BOOST_CHECK_EXCEPTION(m.train_step(x, std::vector<tensor>{y[1], y[0]}), error, [](const error& e) {
    return std::string(e.what()).find("output 0 ('dense_1')") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(summary_lists_every_input_layer_and_what_each_layer_is_connected_to) {
  two_by_two m(1);
  std::ostringstream os;
  m.summary(os);
  const std::string s = os.str();
  BOOST_TEST(s.find("input_layer (InputLayer)") != std::string::npos);
  BOOST_TEST(s.find("input_layer_1 (InputLayer)") != std::string::npos);
  BOOST_TEST(s.find(" concatenate (Concatenate)   (None, 9)                 0          dense[0][0],") != std::string::npos, s);
  BOOST_TEST(s.find(std::string(65, ' ') + " input_layer_1[0][0]") != std::string::npos, s);
  const auto ls = m.layers();
  BOOST_TEST(ls[0].inbound == std::vector<std::string>{"input_layer"}, tt::per_element());
  BOOST_TEST(m.output_name(0) == "dense_1");
  BOOST_TEST(m.output_name(1) == "dense_3");
}

BOOST_AUTO_TEST_SUITE_END()
