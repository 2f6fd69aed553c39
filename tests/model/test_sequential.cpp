// The model: layout, names, summary, compile/steps, training to near-zero loss, custom-loop
// gradients, determinism and run-time errors, on every backend of the suite.
#include <sstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"
#include "support/host_loss.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
using dtrain_test::to_host;
namespace tt = boost::test_tools;

using cnn = sequential<input<28, 28>, reshape<28, 28, 1>, conv2d<32, 3, relu>, flatten, dense<128, relu>, dense<10>>;
using small = sequential<input<6>, dense<8, dtrain::tanh, l2<0.01f>>, dropout<0.2f>, dense<8, gelu>, dense<3>>;
using pooled = sequential<input<8, 8, 2>, conv2d<3, 3, relu, padding::same, l2<0.001f>>, max_pooling2d<2>,
                          conv2d<4, 2, sigmoid, strides<2>>, average_pooling2d<2, padding::same>, flatten, dense<5>,
                          softmax>;

namespace {
/// A separable problem: class = argmax of three fixed projections of x.
std::pair<tensor, tensor> blobs(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  tensor x = zeros({n, 6}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = r.below(3);
    for (std::size_t j = 0; j < 6; ++j) x(i, j) = 0.3f * r.normal() + (j / 2 == c ? 1.5f : 0.0f);
    y(i) = float(c);
  }
  return {x, y};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(model)

BOOST_AUTO_TEST_CASE(layout_names_and_counts) {
  static_assert(cnn::param_count == 320 + 21632 * 128 + 128 + 1290);
  static_assert(std::is_same_v<cnn::output_shape, shape<10>>);
  cnn m;
  BOOST_TEST(m.count_params() == 2770634u);
  const auto ls = m.layers();
  BOOST_REQUIRE_EQUAL(ls.size(), 5u);
  BOOST_TEST(ls[1].name == "conv2d");
  BOOST_TEST(ls[3].name == "dense");
  BOOST_TEST(ls[4].name == "dense_1");
  BOOST_TEST(ls[4].output_shape == "(None, 10)");
  BOOST_TEST(ls[3].variables[0].name == "kernel");
  BOOST_TEST((ls[3].variables[0].shape == std::vector<std::size_t>{21632, 128}));
  // one contiguous buffer, layer after layer, kernel then bias
  BOOST_TEST(ls[3].offset == 320u);
  BOOST_TEST(ls[3].variables[1].offset == 320u + 21632 * 128);
  BOOST_TEST(ls[4].offset == ls[3].offset + ls[3].param_count);
  BOOST_TEST(m.parameters().size() == m.count_params());
  BOOST_TEST(m.layer_parameters<3>().data() == m.parameters().data() + 320);
  // the same layout in backend memory, and the same initial weights on every backend
  on<cnn, opaque> o;
  BOOST_TEST(o.parameters().size() == m.count_params());
  BOOST_TEST((o.layer_parameters<3>().data() == o.parameters().data() + 320));
  BOOST_TEST(o.get_weights() == m.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(summary_table) {
  cnn m;
  std::ostringstream os;
  m.summary(os);
  const std::string s = os.str();
  BOOST_TEST(s.find("Model: \"sequential\"") == 0u);
  BOOST_TEST(s.find(" conv2d (Conv2D)             (None, 26, 26, 32)        320") != std::string::npos);
  BOOST_TEST(s.find(" dense_1 (Dense)             (None, 10)                1290") != std::string::npos);
  BOOST_TEST(s.find("Total params: 2,770,634") != std::string::npos);
  BOOST_TEST(s.find("Non-trainable params: 0") != std::string::npos);
}

using normed = sequential<input<6>, dense<8>, batch_normalization<{.momentum = 0.9f}>, relu, dense<3>>;

BOOST_AUTO_TEST_CASE(non_trainable_weights_follow_the_trainable_ones) {
  static_assert(normed::param_count == 56 + 16 + 27 && normed::weight_count == 99 + 16);
  normed m;
  BOOST_TEST(m.count_params() == 115u);  // Keras counts every weight
  BOOST_TEST(m.parameters().size() == 99u);
  BOOST_TEST(m.get_weights().size() == 115u);
  const auto nt = to_host(m.non_trainable_weights());
  BOOST_TEST(nt == (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}), tt::per_element());
  const auto ls = m.layers();
  BOOST_REQUIRE_EQUAL(ls[1].variables.size(), 4u);
  BOOST_TEST(ls[1].name == "batch_normalization");
  BOOST_TEST(ls[1].param_count == 32u);
  BOOST_TEST(ls[1].variables[1].name == "beta");
  BOOST_TEST(ls[1].variables[1].trainable);
  BOOST_TEST(ls[1].variables[2].name == "moving_mean");
  BOOST_TEST(!ls[1].variables[2].trainable);
  BOOST_TEST(ls[1].variables[2].offset == 99u);
  BOOST_TEST(ls[1].variables[3].offset == 107u);
  std::ostringstream os;
  m.summary(os);
  const std::string s = os.str();
  BOOST_TEST(s.find(" batch_normalization (BatchN (None, 8)                 32") != std::string::npos, s);
  BOOST_TEST(s.find("Total params: 115") != std::string::npos);
  BOOST_TEST(s.find("Trainable params: 99") != std::string::npos);
  BOOST_TEST(s.find("Non-trainable params: 16") != std::string::npos);
  BOOST_TEST(dtrain_test::error_of([&] { m.set_weights(std::vector<float>(99)); }).find("99 values for a model of 115 weights") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(batch_normalization_model_trains_and_infers_with_moving_statistics, B, backends) {
  auto [x, y] = blobs(96, 4);
  on<normed, B> m(9);
  m.compile({.optimizer = adam{{.learning_rate = 0.02f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  // one step: the moving mean becomes 0.1 times the batch mean of the first dense layer's output,
  // computed here from the weights the step started from (the optimizer does not touch it)
  const std::vector<float> w0 = m.get_weights();
  m.train_step(x, y);
  std::vector<double> mean(8, 0.0);
  for (std::size_t i = 0; i < 96; ++i)
    for (std::size_t u = 0; u < 8; ++u) {
      double z = w0[48 + u];
      for (std::size_t j = 0; j < 6; ++j) z += double(x(i, j)) * w0[j * 8 + u];
      mean[u] += z / 96.0;
    }
  const std::vector<float> w1 = m.get_weights();
  for (std::size_t u = 0; u < 8; ++u) BOOST_TEST(w1[99 + u] == 0.1 * mean[u], tt::tolerance(1e-4));
  m.fit(x, y, {.epochs = 30, .verbose = 0, .batch_size = 16});
  // inference normalises by the moving statistics: the model still classifies, and a model with the
  // same trainable weights but the initial moving statistics does not give the same outputs
  BOOST_TEST(m.evaluate(x, y, {.verbose = 0})["accuracy"] > 0.9f);
  std::vector<float> w = m.get_weights();
  const tensor before = m.predict(x);
  std::copy_n(std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}.begin(), 16, w.begin() + 99);
  on<normed, B> fresh(1);
  fresh.set_weights(w);
  const tensor reset = fresh.predict(x);
  BOOST_TEST(std::abs(reset(0, 0) - before(0, 0)) > 1e-3f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(trains_to_near_zero_loss, B, backends) {
  on<small, B> m(3);
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}},
             .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  auto [x, y] = blobs(64, 1);
  logs first, last;
  for (int s = 0; s < 300; ++s) {
    m.reset_metrics();
    last = m.train_step(x, y);
    if (s == 0) first = last;
  }
  BOOST_TEST(first["loss"] > 0.5f);
  BOOST_TEST(last["accuracy"] == 1.0f);
  m.reset_metrics();
  const logs eval = m.test_step(x, y);
  // the data loss goes to ~0; what stays is the l2 penalty of the first layer
  BOOST_TEST(eval["loss"] - m.regularization_loss() < 0.02f);
  BOOST_TEST(eval["accuracy"] == 1.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(conv_pool_model_trains_and_predicts, B, backends) {
  on<pooled, B> m(5);
  m.compile({.optimizer = sgd{{.learning_rate = 0.5f, .momentum = 0.9f}}, .loss = sparse_categorical_crossentropy{},
             .metrics = {sparse_categorical_accuracy{}}});
  rng r(2);
  tensor x = zeros({10, 8, 8, 2}), y = zeros({10});
  for (std::size_t i = 0; i < 10; ++i) {
    y(i) = float(i % 5);
    for (std::size_t j = 0; j < 128; ++j) x.data()[i * 128 + j] = r.normal() + (j % 5 == i % 5 ? 1.0f : 0.0f);
  }
  float first = 0;
  logs l;
  for (int s = 0; s < 150; ++s) {
    m.reset_metrics();
    l = m.train_step(x, y);
    if (s == 0) first = l["loss"];
  }
  BOOST_TEST(l["loss"] < 0.1f * first);
  const tensor p = m.predict_on_batch(x);
  BOOST_TEST((extents_of(p) == extents{10, 5}));
  BOOST_TEST(xt::sum(xt::view(p, 0, xt::all()))() == 1.0f, tt::tolerance(1e-5f));  // softmax rows
}

BOOST_AUTO_TEST_CASE_TEMPLATE(value_and_gradients_matches_central_differences, B, backends) {
  // the custom-loop step: average over a global batch of 8 (this "replica" holds 4), l2 scaled by 2 replicas
  on<pooled, B> m(9);
  rng r(4);
  tensor x = zeros({4, 8, 8, 2}), y = zeros({4});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 4; ++i) y(i) = float(i);
  const any_loss loss = sparse_categorical_crossentropy{{.reduction = reduction::none}};
  m.value_and_gradients(x, y, loss, 8, 2);
  const std::vector<float> analytic = to_host(m.gradients());
  std::vector<float> params = m.get_weights();
  auto f = [&]() -> double {
    m.set_weights(params);
    const tensor per = sparse_categorical_crossentropy{{.reduction = reduction::none}}(y, m(x, true));
    return compute_average_loss(per, 8) + scale_regularization_loss(m.regularization_loss(), 2);
  };
  dtrain_test::check_gradient("model", params, analytic, f, 400);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(activity_regularizers_join_the_loss_and_its_gradient, B, backends) {
  // Keras 3: a layer's activity penalty, R(its output) / the batch's rows, joins the loss (evaluate's
  // too) and its gradient flows back through the layer and those before it; a custom-loop step of 2
  // replicas halves it, as every penalty. The reference computes the layers by hand from the weights.
  using net = sequential<input<4>, dense<5, dtrain::tanh, activity_regularizer<l2<0.05f>>>,
                         dense<3, linear, l2<0.01f>, activity_regularizer<l1_l2<0.02f, 0.03f>>>>;
  on<net, B> m(3);
  rng r(5);
  tensor x = zeros({6, 4}), y = zeros({6});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 6; ++i) y(i) = float(i % 3);
  const sparse_categorical_crossentropy ce{{.from_logits = true, .reduction = reduction::none}};
  // the loss of weights `w` over this batch: mean cross-entropy over `global` rows + penalties / replicas
  auto reference = [&](const std::vector<float>& w, double global, double replicas) {
    const float *w1 = w.data(), *b1 = w1 + 20, *w2 = b1 + 5, *b2 = w2 + 15;
    tensor z = zeros({6, 3});
    double hidden_sq = 0, out_abs = 0, out_sq = 0, kernel_sq = 0;
    for (std::size_t i = 0; i < 6; ++i) {
      double h[5];
      for (std::size_t u = 0; u < 5; ++u) {
        double a = b1[u];
        for (std::size_t k = 0; k < 4; ++k) a += double(x(i, k)) * w1[k * 5 + u];
        h[u] = std::tanh(a), hidden_sq += h[u] * h[u];
      }
      for (std::size_t c = 0; c < 3; ++c) {
        double a = b2[c];
        for (std::size_t u = 0; u < 5; ++u) a += h[u] * w2[u * 3 + c];
        z(i, c) = float(a), out_abs += std::abs(a), out_sq += a * a;
      }
    }
    for (std::size_t k = 0; k < 15; ++k) kernel_sq += double(w2[k]) * w2[k];
    const tensor per = ce(y, z);
    double sum = 0;
    for (float v : per) sum += v;
    const double penalty = 0.01 * kernel_sq + (0.05 * hidden_sq + 0.02 * out_abs + 0.03 * out_sq) / 6.0;
    return sum / global + penalty / replicas;
  };
  const std::vector<float> start = m.get_weights();
  const float got = m.value_and_gradients(x, y, any_loss(ce), 12, 2);
  BOOST_TEST(got == reference(start, 12, 2), tt::tolerance(1e-4));
  const std::vector<float> analytic = to_host(m.gradients());
  std::vector<float> params = start;
  dtrain_test::check_gradient("model", params, analytic, [&]() -> double { return reference(params, 12, 2); }, 400);
  m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  m.set_weights(start);
  BOOST_TEST(m.evaluate(x, y, {.verbose = 0})["loss"] == reference(start, 6, 1), tt::tolerance(1e-4));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(input_gradients_match_central_differences, B, backends) {
  // TF: with tape: tape.watch(x); loss = ...; tape.gradient(loss, x). The first layer (a reshape,
  // relabelled) passes the gradient through; the model has dropout, whose mask the generator fixes.
  using watched = sequential<input<12>, reshape<2, 2, 3>, conv2d<4, 2, dtrain::tanh, padding::same>, flatten,
                             dropout<0.25f>, dense<3>>;
  on<watched, B> m(2);
  rng r(6);
  tensor x = zeros({5, 12}), y = zeros({5});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 5; ++i) y(i) = float(i % 3);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true}};
  BOOST_TEST(dtrain_test::error_of([&] { m.input_gradients(); }).find("watch_inputs()") != std::string::npos);
  const rng start = m.generator();
  m.watch_inputs();
  m.value_and_gradients(x, y, loss);
  const tensor g = m.input_gradients();
  BOOST_TEST((extents_of(g) == extents{5, 12}));
  std::vector<float> xs(x.begin(), x.end());
  auto f = [&]() -> double {
    std::copy(xs.begin(), xs.end(), x.begin());
    m.generator() = start;  // the same dropout mask
    return loss(y, m(x, true))();
  };
  dtrain_test::check_gradient("d loss / d x", xs, {g.data(), g.size()}, f);
}

BOOST_AUTO_TEST_CASE(value_and_gradients_follows_the_loss_reduction) {
  // none: averaged over the global batch given (or this batch); sum: the sum; sum_over_batch_size: the
  // batch mean. The penalty's gradient is the same in all, so it comes out of the comparison.
  using plain = sequential<input<6>, dense<8, dtrain::tanh>, dense<3>>;
  rng r(8);
  tensor x = zeros({5, 6}), y = zeros({5});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 5; ++i) y(i) = float(i % 3);
  auto step = [&](reduction red, std::size_t global) {
    plain m(2);
    const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true, .reduction = red}};
    const float value = m.value_and_gradients(x, y, loss, global);
    const tensor per = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}}(y, m(x, true));
    return std::tuple{value, to_host(m.gradients()), double(xt::sum(per)())};
  };
  const auto [sum_value, sum_grads, total] = step(reduction::sum, 0);
  BOOST_TEST(sum_value == total, tt::tolerance(1e-5));
  const auto [mean_value, mean_grads, t1] = step(reduction::sum_over_batch_size, 20);  // the batch's mean
  BOOST_TEST(mean_value == total / 5, tt::tolerance(1e-5));
  const auto [none_value, none_grads, t2] = step(reduction::none, 20);  // over the global batch given
  BOOST_TEST(none_value == total / 20, tt::tolerance(1e-5));
  for (std::size_t i = 0; i < sum_grads.size(); ++i) {
    BOOST_TEST(sum_grads[i] == 5.0f * mean_grads[i], tt::tolerance(1e-4f));
    BOOST_TEST(sum_grads[i] == 20.0f * none_grads[i], tt::tolerance(1e-4f));
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(custom_loss_callable, B, backends) {
  on<small, B> m(1);
  tensor x = zeros({2, 6});
  // loss = sum of outputs: d loss / d outputs = 1
  const float l = m.value_and_gradients(x, [](const tensor& p, tensor& d) {
    d = xt::ones_like(p);
    return static_cast<float>(xt::sum(p)());
  });
  BOOST_TEST(std::isfinite(l));
  float gnorm = 0;
  for (float g : to_host(m.gradients())) gnorm += g * g;
  BOOST_TEST(gnorm > 0.0f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(same_seed_same_weights_bitwise, B, backends) {
  auto train = [](std::uint64_t seed) {
    on<small, B> m(seed);
    m.compile({.optimizer = rmsprop{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    auto [x, y] = blobs(16, 7);
    for (int s = 0; s < 5; ++s) m.train_step(x, y);
    return m.get_weights();
  };
  BOOST_TEST(train(1) == train(1), tt::per_element());
  BOOST_TEST(train(1) != train(2));
}

BOOST_AUTO_TEST_CASE(every_backend_trains_to_the_same_bits) {
  // the opaque backend runs the cpu kernels on its own buffers: a model whose inputs, targets, scalars
  // and state all travel through the backend seam ends where the cpu model ends
  auto train = []<class B>(B) {
    on<pooled, B> m(4);
    m.compile({.optimizer = adamw{}, .loss = sparse_categorical_crossentropy{}, .metrics = {accuracy{}}});
    rng r(6);
    tensor x = zeros({6, 8, 8, 2}), y = zeros({6});
    for (auto& v : x) v = r.normal();
    for (std::size_t i = 0; i < 6; ++i) y(i) = float(i % 5);
    logs l;
    for (int s = 0; s < 4; ++s) l = m.train_step(x, y);
    std::vector<float> out = m.get_weights(), state = m.optimizer().state().slots;
    out.insert(out.end(), state.begin(), state.end());
    out.push_back(l["loss"]), out.push_back(l["accuracy"]);
    return out;
  };
  BOOST_TEST(train(cpu{}) == train(opaque{}), tt::per_element());
}

/// A metric of the user's own, computed on the host: the model hands it host copies.
struct max_abs_error {
  std::string name() const { return "max_abs_error"; }
  metric_update update(batch_view t, batch_view p) const {
    double m = 0;
    for (std::size_t i = 0; i < p.size(); ++i) m = std::max(m, double(std::abs(p.data[i] - t.data[i])));
    return {m, 1.0};
  }
};

BOOST_AUTO_TEST_CASE_TEMPLATE(host_losses_and_metrics_train_on_any_backend, B, backends) {
  // half the squared error is mean_squared_error * c / 2: both losses give the same training with the
  // learning rate scaled to match
  using reg = basic_sequential<B, input<4>, dense<8, dtrain::tanh>, dense<2>>;
  rng r(2);
  tensor x = zeros({16, 4}), y = zeros({16, 2});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 16; ++i) y(i, 0) = x(i, 0) - x(i, 1), y(i, 1) = 0.5f * x(i, 2);
  reg host(1), kernel(1);
  host.compile({.optimizer = sgd{{.learning_rate = 0.1f}}, .loss = dtrain_test::half_squared_error{},
                .metrics = {max_abs_error{}}});
  kernel.compile({.optimizer = sgd{{.learning_rate = 0.1f}}, .loss = mean_squared_error{}});
  logs first, last;
  for (int s = 0; s < 200; ++s) {
    host.reset_metrics();
    last = host.train_step(x, y);
    kernel.train_step(x, y);
    if (s == 0) first = last;
  }
  BOOST_TEST(last["loss"] < 0.1f * first["loss"]);
  BOOST_TEST(last["max_abs_error"] < first["max_abs_error"]);
  // d(half squared error)/dp = e; d(mse)/dp = 2 e / c = e with c = 2: the same steps
  const auto a = host.get_weights(), b = kernel.get_weights();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], tt::tolerance(1e-4f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(run_time_errors_name_layer_loss_and_shapes, B, backends) {
  on<small, B> m;
  tensor x = zeros({4, 6}), y = zeros({4});
  BOOST_CHECK_THROW(m.train_step(x, y), usage_error);
  m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  try {
    m.train_step(zeros({4, 7}), y);
    BOOST_FAIL("expected shape_error");
  } catch (const shape_error& e) {
    const std::string s = e.what();
    BOOST_TEST(s.find("(4, 7)") != std::string::npos);
    BOOST_TEST(s.find("(None, 6)") != std::string::npos);
    BOOST_TEST(s.find("dense") != std::string::npos);
  }
  try {
    m.train_step(x, zeros({3}));
    BOOST_FAIL("expected shape_error");
  } catch (const shape_error& e) {
    const std::string s = e.what();
    BOOST_TEST(s.find("(4, 6)") != std::string::npos);
    BOOST_TEST(s.find("(3,)") != std::string::npos);
  }
  tensor bad = y;
  bad(2) = 3.0f;
  try {
    m.train_step(x, bad);
    BOOST_FAIL("expected value_error");
  } catch (const value_error& e) {
    const std::string s = e.what();
    BOOST_TEST(s.find("sparse_categorical_crossentropy") != std::string::npos);
    BOOST_TEST(s.find("label 3") != std::string::npos);
    BOOST_TEST(s.find("(4, 3)") != std::string::npos);
  }
  BOOST_CHECK_THROW(m.predict_on_batch(zeros({0, 6})), value_error);
  BOOST_CHECK_THROW(m.set_weights(std::vector<float>(3)), shape_error);
  BOOST_CHECK_THROW(m.compile({.optimizer = {}, .loss = mean_squared_error{}}), usage_error);
}

BOOST_AUTO_TEST_SUITE_END()
