// Golden values from PyTorch (float64; attention by its scaled_dot_product_attention) for layers (forward
// and backward), losses (value and gradient) and
// optimizers (two steps), computed on every backend of the suite. The reference is tests/golden/golden.json, written by tests/golden/make_golden.py
// (its header says how to run it and the conventions it follows).
#include "support/gradcheck.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::download;
using dtrain_test::upload;
using json = nlohmann::json;

namespace {

// Tolerances: |got - expected| <= atol + rtol * |expected|, element by element.
// Layers: dtrain computes in float32 (sums of up to 27 products, erf/exp/tanh in float), the reference in
// float64 from the same float32 inputs; values are O(1), so float32 rounding stays well below these.
constexpr double layer_rtol = 1e-4, layer_atol = 1e-5;
// Losses: float32 logs/exps of O(1) values; gradients are scaled by 1 / batch (and 1 / classes), so O(0.1).
constexpr double loss_rtol = 1e-4, loss_atol = 1e-6;
// Optimizers: Keras (and dtrain) place epsilon differently from torch.optim -- Adam uses
// lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps) where torch adds eps to sqrt(v) / sqrt(1 - b2^t);
// RMSprop divides by sqrt(v + eps) where torch divides by sqrt(v) + eps. With eps = 1e-7 and gradients of
// magnitude 0.1 .. 1 the two forms differ by < 1e-6 absolute on these parameters (make_golden.py prints
// the exact distance: at most 6.7e-7), plus float32 rounding of O(1) parameters (~1e-7). Hence:
constexpr double opt_rtol = 1e-5, opt_atol = 5e-6;

const json& golden() {
  static const json j = [] {
    // the tests' folder as built, or DTRAIN_TEST_SOURCE_DIR (a test binary carried to another machine)
    const char* dir = std::getenv("DTRAIN_TEST_SOURCE_DIR") ? std::getenv("DTRAIN_TEST_SOURCE_DIR") : DTRAIN_TEST_SOURCE_DIR;
    const std::string path = std::string(dir) + "/golden/golden.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

std::vector<float> floats(const json& j) { return j.get<std::vector<float>>(); }
std::vector<double> doubles(const json& j) { return j.get<std::vector<double>>(); }
extents dims(const json& j) { return j.get<extents>(); }

/// Element-wise comparison; reports up to 5 offending entries and one summary check.
void expect_close(const std::string& what, std::span<const float> got, const std::vector<double>& want, double rtol,
                  double atol) {
  BOOST_REQUIRE_MESSAGE(got.size() == want.size(),
                        what << ": " << got.size() << " values, the reference has " << want.size());
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    const double allowed = atol + rtol * std::abs(want[i]);
    worst = std::max(worst, err / allowed);
    if (!(err <= allowed) && ++bad <= 5)
      BOOST_ERROR(what << "[" << i << "]: got " << got[i] << ", PyTorch " << want[i] << " (|diff| " << err << ")");
  }
  BOOST_TEST_MESSAGE(what << ": worst error / allowed = " << worst);
  BOOST_CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << want.size()
                                     << " values outside the tolerance (worst error / allowed = " << worst << ")");
}

// ---- layers --------------------------------------------------------------------------------------------

/// Forward and backward of bound layer bind_t<Spec, In, B> on the case's x, params and dy.
template <class B, class Spec, class In>
void check_layer(const json& c) {
  using L = bind_t<Spec, In, B>;
  using Out = typename L::output_shape;
  const std::string name = c.at("name");
  const extents xs = dims(c.at("x_shape")), ys = dims(c.at("y_shape"));
  const std::size_t n = xs.at(0);
  extents want_xs{n}, want_ys{n};
  for (std::size_t i = 0; i < In::rank; ++i) want_xs.push_back(In::dims[i]);
  for (std::size_t i = 0; i < Out::rank; ++i) want_ys.push_back(Out::dims[i]);
  BOOST_REQUIRE_MESSAGE(xs == want_xs, name << ": the reference input shape does not match the bound layer");
  BOOST_CHECK_MESSAGE(ys == want_ys, name << ": output shape differs from PyTorch's");

  const std::vector<float> params = floats(c.at("params"));
  BOOST_REQUIRE_EQUAL(params.size(), param_count_v<L>);
  const B device;
  auto x = upload(device, floats(c.at("x"))), p = upload(device, params), dy = upload(device, floats(c.at("dy")));
  auto y = device.template allocate<float>(n * Out::size), dx = device.template allocate<float>(n * In::size);
  auto grads = upload(device, std::vector<float>(params.size(), -1.0f));
  rng r(1);
  // non-trainable variables: the case's (moving statistics), else the layer's initial ones
  auto state = c.contains("state") ? upload(device, floats(c.at("state"))) : dtrain_test::layer_state<L>(device);
  BOOST_REQUIRE_EQUAL(state.size(), state_count_v<L>);
  layer_context<B> ctx{device, r, c.value("training", true), state.data()};
  L layer;
  layer.forward(ctx, x.data(), y.data(), n, p.data());
  expect_close(name + " y", download(device, y), doubles(c.at("y")), layer_rtol, layer_atol);
  if (c.contains("state_after"))
    expect_close(name + " moving statistics", download(device, state), doubles(c.at("state_after")), layer_rtol,
                 layer_atol);
  layer.backward(ctx, x.data(), y.data(), dy.data(), dx.data(), n, p.data(), grads.data());  // dy is scratch
  if (c.contains("dx"))  // (an embedding's indices have none)
    expect_close(name + " dx", download(device, dx), doubles(c.at("dx")), layer_rtol, layer_atol);
  if (!params.empty())
    expect_close(name + " d(kernel, bias)", download(device, grads), doubles(c.at("dparams")), layer_rtol, layer_atol);
}

using dense_in = shape<5>;
using conv_in = shape<6, 5, 3>;
using act_in = shape<7>;

template <class B>
const std::map<std::string, std::function<void(const json&)>> layer_checks{
    {"dense_linear", check_layer<B, dense<4, linear>, dense_in>},
    {"dense_relu", check_layer<B, dense<4, relu>, dense_in>},
    {"dense_sigmoid", check_layer<B, dense<4, sigmoid>, dense_in>},
    {"dense_tanh", check_layer<B, dense<4, dtrain::tanh>, dense_in>},
    {"dense_softmax", check_layer<B, dense<4, softmax>, dense_in>},
    {"dense_gelu", check_layer<B, dense<4, gelu>, dense_in>},
    {"conv2d_valid_s1", check_layer<B, conv2d<4, 3, linear, strides<1>, padding::valid>, conv_in>},
    {"conv2d_same_s1", check_layer<B, conv2d<4, 3, linear, strides<1>, padding::same>, conv_in>},
    {"conv2d_same_s2", check_layer<B, conv2d<4, 3, linear, strides<2>, padding::same>, conv_in>},
    {"conv2d_valid_s2", check_layer<B, conv2d<4, 3, linear, strides<2>, padding::valid>, conv_in>},
    {"max_pooling2d_p2_valid", check_layer<B, max_pooling2d<2>, conv_in>},
    {"max_pooling2d_p3_s2_same", check_layer<B, max_pooling2d<3, strides<2>, padding::same>, conv_in>},
    {"average_pooling2d_p2_valid", check_layer<B, average_pooling2d<2>, conv_in>},
    {"average_pooling2d_p3_s2_same", check_layer<B, average_pooling2d<3, strides<2>, padding::same>, conv_in>},
    {"activation_relu", check_layer<B, relu, act_in>},
    {"activation_sigmoid", check_layer<B, sigmoid, act_in>},
    {"activation_tanh", check_layer<B, dtrain::tanh, act_in>},
    {"activation_softmax", check_layer<B, softmax, act_in>},
    {"activation_gelu", check_layer<B, gelu, act_in>},
    {"global_average_pooling2d", check_layer<B, global_average_pooling2d<>, conv_in>},
    {"global_max_pooling2d", check_layer<B, global_max_pooling2d<>, conv_in>},
    {"zero_padding2d_1", check_layer<B, zero_padding2d<>, conv_in>},
    {"zero_padding2d_0_1_3_2", check_layer<B, zero_padding2d<0, 1, 3, 2>, conv_in>},
    {"leaky_relu_0.3", check_layer<B, leaky_relu<0.3f>, act_in>},
    {"layer_normalization", check_layer<B, layer_normalization<1e-3f>, shape<2, 5>>},
    {"conv1d_causal_dilation2", check_layer<B, conv1d<4, 3, linear, padding::causal, dilation_rate<2>>, shape<7, 3>>},
    {"conv1d_same_s2", check_layer<B, conv1d<4, 4, linear, strides<2>, padding::same>, shape<7, 3>>},
    {"global_average_pooling1d", check_layer<B, global_average_pooling1d<>, shape<7, 3>>},
    {"multi_head_attention", check_layer<B, multi_head_attention<2, 3, value_dim<2>>, shape<4, 6>>},
    {"multi_head_attention_causal",
     check_layer<B, multi_head_attention<2, 3, value_dim<2>, use_causal_mask<true>>, shape<4, 6>>},
    {"lstm", check_layer<B, lstm<4>, shape<5, 3>>},
    {"lstm_sequences", check_layer<B, lstm<4, return_sequences<true>>, shape<5, 3>>},
    {"gru", check_layer<B, gru<4>, shape<5, 3>>},
    {"gru_sequences", check_layer<B, gru<4, return_sequences<true>>, shape<5, 3>>},
    {"batch_normalization_training", check_layer<B, batch_normalization<{.momentum = 0.9f}>, shape<3, 2, 3>>},
    {"batch_normalization_inference", check_layer<B, batch_normalization<{.momentum = 0.9f}>, shape<3, 2, 3>>},
    {"embedding", check_layer<B, embedding<6, 3>, shape<4>>},
    {"depthwise_conv2d_same_s2_x2",
     check_layer<B, depthwise_conv2d<3, linear, strides<2>, padding::same, depth_multiplier<2>>, conv_in>},
    {"separable_conv2d_same", check_layer<B, separable_conv2d<4, 3, linear, padding::same>, conv_in>},
    {"up_sampling2d_2", check_layer<B, up_sampling2d<>, conv_in>},
    {"up_sampling2d_3_2", check_layer<B, up_sampling2d<3, 2>, conv_in>},
    {"conv2d_same_s1_no_bias", check_layer<B, conv2d<4, 3, linear, padding::same, use_bias<false>>, conv_in>},
    {"dense_relu_no_bias", check_layer<B, dense<4, relu, use_bias<false>>, dense_in>},
    {"conv2d_k3x2_s2x1", check_layer<B, conv2d<4, kernel_size{3, 2}, linear, strides<2, 1>>, conv_in>},
    {"conv2d_same_dilation2", check_layer<B, conv2d<4, 3, linear, dilation_rate<2>, padding::same>, conv_in>},
    {"conv2d_same_groups2", check_layer<B, conv2d<6, 3, relu, padding::same, groups<2>>, shape<5, 4, 4>>},
    {"conv2d_transpose_valid_s2", check_layer<B, conv2d_transpose<4, 3, linear, strides<2>>, shape<3, 4, 3>>},
    {"conv2d_transpose_same_s2",
     check_layer<B, conv2d_transpose<4, 3, linear, strides<2>, padding::same>, shape<3, 4, 3>>},
    {"conv2d_transpose_k2x3_s3x2_relu",
     check_layer<B, conv2d_transpose<4, kernel_size{2, 3}, relu, strides<3, 2>>, shape<3, 4, 3>>},
    {"depthwise_conv2d_same_x2_relu_no_bias",
     check_layer<B, depthwise_conv2d<3, relu, padding::same, depth_multiplier<2>, use_bias<false>>, conv_in>},
    {"conv2d_transpose_same_dilation2_no_bias",
     check_layer<B, conv2d_transpose<4, 3, linear, dilation_rate<2>, padding::same, use_bias<false>>, shape<3, 4, 3>>},
    {"conv2d_transpose_same_s2_output_padding1",
     check_layer<B, conv2d_transpose<4, 3, linear, strides<2>, padding::same, output_padding<1>>, shape<3, 4, 3>>},
    {"conv2d_transpose_same_k2x3_s2_output_padding1x0",
     check_layer<B, conv2d_transpose<4, kernel_size{2, 3}, linear, strides<2>, padding::same, output_padding<1, 0>>,
                 shape<3, 4, 3>>},
    {"conv2d_transpose_valid_k2x3_s3x2_output_padding2x1",
     check_layer<B, conv2d_transpose<4, kernel_size{2, 3}, linear, strides<3, 2>, output_padding<2, 1>>,
                 shape<3, 4, 3>>},
};

// ---- losses --------------------------------------------------------------------------------------------

/// The backend's loss kernel with scale 1 / batch: the mean of the rows is the sum_over_batch_size value
/// and d_pred its gradient. Also checks the loss' call operator (its own reduction) against the same value.
template <class B, class Loss>
void check_loss(const json& c, const Loss& loss) {
  const std::string name = c.at("name");
  const std::vector<float> t = floats(c.at("y_true")), p = floats(c.at("y_pred"));
  const extents te = dims(c.at("true_shape")), pe = dims(c.at("pred_shape"));
  const std::size_t rows = pe.at(0);
  loss.validate({t.data(), te}, {p.data(), pe});
  const B device;
  auto td = upload(device, t), pd = upload(device, p);
  auto perd = device.template allocate<float>(rows), dd = device.template allocate<float>(p.size());
  device.loss(loss.kernel(), rows, pe.back(), 1.0f / static_cast<float>(rows), td.data(), pd.data(), perd.data(),
              dd.data());
  const std::vector<float> per = download(device, perd), d = download(device, dd);
  double mean = 0.0;
  for (float v : per) mean += v;
  mean /= static_cast<double>(rows);
  const std::vector<double> want{c.at("value").get<double>()};
  const float got = static_cast<float>(mean);
  expect_close(name + " value", {&got, 1}, want, loss_rtol, loss_atol);
  expect_close(name + " d value / d y_pred", d, doubles(c.at("grad")), loss_rtol, loss_atol);
  const tensor called = loss(from_span(t, te), from_span(p, pe));
  const float got_call = called();
  expect_close(name + " value via operator()", {&got_call, 1}, want, loss_rtol, loss_atol);
}

template <class B>
const std::map<std::string, std::function<void(const json&)>> loss_checks{
    {"sparse_categorical_crossentropy_logits",
     [](const json& c) { check_loss<B>(c, sparse_categorical_crossentropy{{.from_logits = true}}); }},
    {"sparse_categorical_crossentropy_probs",
     [](const json& c) { check_loss<B>(c, sparse_categorical_crossentropy{{.from_logits = false}}); }},
    {"categorical_crossentropy_logits",
     [](const json& c) { check_loss<B>(c, categorical_crossentropy{{.from_logits = true}}); }},
    {"categorical_crossentropy_probs",
     [](const json& c) { check_loss<B>(c, categorical_crossentropy{{.from_logits = false}}); }},
    {"binary_crossentropy_logits", [](const json& c) { check_loss<B>(c, binary_crossentropy{{.from_logits = true}}); }},
    {"binary_crossentropy_probs", [](const json& c) { check_loss<B>(c, binary_crossentropy{{.from_logits = false}}); }},
    {"mean_squared_error", [](const json& c) { check_loss<B>(c, mean_squared_error{}); }},
};

// ---- optimizers ----------------------------------------------------------------------------------------

/// Two apply_gradients steps from p0 (g1, then g2) on backend memory, compared after each.
template <class B, class Opt>
void check_optimizer(const json& c, Opt opt) {
  const std::string name = c.at("name");
  const B device;
  const std::vector<float> p0 = floats(c.at("p0"));
  auto p = upload(device, p0), g1 = upload(device, floats(c.at("g1"))), g2 = upload(device, floats(c.at("g2")));
  const device_span<float, B> params(device, p.data(), p0.size());
  opt.apply_gradients(device_span<float, B>(device, g1.data(), p0.size()), params);
  expect_close(name + " after step 1", download(device, p), doubles(c.at("p1")), opt_rtol, opt_atol);
  opt.apply_gradients(device_span<float, B>(device, g2.data(), p0.size()), params);
  expect_close(name + " after step 2", download(device, p), doubles(c.at("p2")), opt_rtol, opt_atol);
}

template <class B>
const std::map<std::string, std::function<void(const json&)>> optimizer_checks{
    {"sgd", [](const json& c) { check_optimizer<B>(c, sgd{{.learning_rate = 0.1f}}); }},
    {"sgd_momentum", [](const json& c) { check_optimizer<B>(c, sgd{{.learning_rate = 0.1f, .momentum = 0.9f}}); }},
    {"sgd_nesterov",
     [](const json& c) { check_optimizer<B>(c, sgd{{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}}); }},
    {"adam", [](const json& c) { check_optimizer<B>(c, adam{{.learning_rate = 0.01f, .epsilon = 1e-7f}}); }},
    {"adam_amsgrad",
     [](const json& c) { check_optimizer<B>(c, adam{{.learning_rate = 0.01f, .epsilon = 1e-7f, .amsgrad = true}}); }},
    {"rmsprop",
     [](const json& c) { check_optimizer<B>(c, rmsprop{{.learning_rate = 0.01f, .rho = 0.9f, .epsilon = 1e-7f}}); }},
    {"rmsprop_momentum",
     [](const json& c) {
       check_optimizer<B>(c, rmsprop{{.learning_rate = 0.01f, .rho = 0.9f, .momentum = 0.5f, .epsilon = 1e-7f}});
     }},
    {"rmsprop_centered",
     [](const json& c) {
       check_optimizer<B>(c, rmsprop{{.learning_rate = 0.01f, .rho = 0.9f, .epsilon = 1e-7f, .centered = true}});
     }},
    {"adamw",
     [](const json& c) {
       check_optimizer<B>(c, adamw{{.learning_rate = 0.01f, .weight_decay = 0.004f, .epsilon = 1e-7f}});
     }},
};

/// Runs every case of golden()[family] through its check; every case must have a check and vice versa.
void run_family(const char* family, const std::map<std::string, std::function<void(const json&)>>& checks) {
  std::set<std::string> seen;
  for (const json& c : golden().at(family)) {
    const std::string name = c.at("name");
    BOOST_TEST_CONTEXT("golden " << family << " case " << name) {
      const auto it = checks.find(name);
      if (it == checks.end()) {
        BOOST_ERROR("no C++ check for golden case " << name);
        continue;
      }
      seen.insert(name);
      it->second(c);
    }
  }
  for (const auto& [name, check] : checks)
    BOOST_CHECK_MESSAGE(seen.count(name), "golden.json has no " << family << " case " << name);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(golden_pytorch)

BOOST_AUTO_TEST_CASE_TEMPLATE(layers_match_pytorch, B, backends) { run_family("layers", layer_checks<B>); }
BOOST_AUTO_TEST_CASE_TEMPLATE(losses_match_pytorch, B, backends) { run_family("losses", loss_checks<B>); }
BOOST_AUTO_TEST_CASE_TEMPLATE(optimizers_match_pytorch, B, backends) { run_family("optimizers", optimizer_checks<B>); }

BOOST_AUTO_TEST_SUITE_END()
