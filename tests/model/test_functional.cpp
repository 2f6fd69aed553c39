// Functional models (model/graph.hpp): named nodes, skip connections, fan-out and merge layers, on every
// backend of the suite: shapes at compile time, gradients against central differences (with respect to
// the weights and to the inputs), training, names and the summary's "Connected to" column, a chain
// written as a functional model training bitwise like the same sequential, and checkpoints.
#include <sstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
using dtrain_test::to_host;
namespace tt = boost::test_tools;

namespace {
struct c1;
struct bn;
struct a;
struct b;
struct gate;
struct mixed;

// A residual block as a ResNet has it: conv -> batch normalization, added to the first conv's output.
using residual = functional<input<6, 6, 2>, node<c1, conv2d<4, 3, relu, padding::same>>,
                            conv2d<4, 3, linear, padding::same>, node<bn, batch_normalization<>>,
                            node<void, add, c1, bn>, relu, global_average_pooling2d<>, dense<3>>;

// Fan-out from the input and from nodes, every merge: two dense branches of the input, their product as
// a gate added to one branch, concatenated with the other, through a relabelling reshape to a dense head.
using merges = functional<input<5>, node<a, dense<4, dtrain::tanh>>, node<b, dense<4, sigmoid>, model_input>,
                          node<gate, multiply, a, b>, node<mixed, add, gate, a>, node<void, concatenate, mixed, b>,
                          reshape<2, 4>, flatten, dense<3>>;

// The same model written with blocks (nested, one empty): they splice into the same graph, the same type.
template <class Out>
using conv_bn = block<conv2d<4, 3, linear, padding::same>, node<Out, batch_normalization<>>>;
using residual_in_blocks = functional<input<6, 6, 2>, block<node<c1, conv2d<4, 3, relu, padding::same>>>,
                                      block<conv_bn<bn>, block<>, node<void, add, c1, bn>>, relu,
                                      global_average_pooling2d<>, dense<3>>;
static_assert(std::is_same_v<residual_in_blocks, residual>);

static_assert(std::is_same_v<residual::output_shape, shape<3>>);
static_assert(residual::param_count == (3 * 3 * 2 * 4 + 4) + (3 * 3 * 4 * 4 + 4) + 2 * 4 + 4 * 3 + 3);
static_assert(residual::weight_count == residual::param_count + 2 * 4);
static_assert(std::is_same_v<merges::layer_type<4>::output_shape, shape<8>>);  // the concatenation
static_assert(std::is_same_v<merges::output_shape, shape<3>>);

// A one-block causal transformer as GPT has it: tokens and positions embedded and added, causal
// self-attention added back to its input, layer normalization, a dense head per step.
struct tokens;
struct positions;
struct embedded;
struct attended;
constexpr std::size_t steps = 6, vocab = 5;
using transformer = functional<input<steps>, node<tokens, embedding<vocab, 8>>, node<positions, position_embedding<steps>>,
                               node<embedded, add, tokens, positions>,
                               node<attended, multi_head_attention<2, 4, use_causal_mask<true>>>,
                               node<void, add, embedded, attended>, layer_normalization<>, dense<vocab>>;
static_assert(std::is_same_v<transformer::output_shape, shape<steps, vocab>>);

/// Random token sequences and, at every step, the token one step back (the first step's own): only
/// attention to the step before tells it.
std::pair<tensor, tensor> previous_tokens(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  tensor x = zeros({n, steps}), y = zeros({n, steps});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < steps; ++t) x(i, t) = float(r.below(vocab));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < steps; ++t) y(i, t) = x(i, t == 0 ? 0 : t - 1);
  return {x, y};
}

std::pair<tensor, tensor> problem(std::size_t n, std::size_t features, std::uint64_t seed) {
  rng r(seed);
  tensor x = zeros({n, features}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = r.below(3);
    for (std::size_t j = 0; j < features; ++j) x(i, j) = 0.5f * r.normal() + (j % 3 == c ? 1.0f : 0.0f);
    y(i) = float(c);
  }
  return {x, y};
}
tensor images(const tensor& flat) {  // (n, 72) -> (n, 6, 6, 2)
  tensor x = zeros({flat.shape()[0], 6, 6, 2});
  std::copy(flat.begin(), flat.end(), x.begin());
  return x;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(functional_models)

BOOST_AUTO_TEST_CASE_TEMPLATE(gradients_through_fan_out_and_merges_match_central_differences, B, backends) {
  on<merges, B> m(4);
  auto [x, y] = problem(6, 5, 2);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true}};
  m.watch_inputs();
  m.value_and_gradients(x, y, loss);
  const std::vector<float> analytic = to_host(m.gradients());
  const tensor dx = m.input_gradients();
  std::vector<float> params = m.get_weights(), xs(x.begin(), x.end());
  auto f = [&]() -> double {
    m.set_weights(params);
    std::copy(xs.begin(), xs.end(), x.begin());
    return loss(y, m(x, true))();
  };
  dtrain_test::check_gradient("merges d/dweights", params, analytic, f, 400);
  dtrain_test::check_gradient("merges d/dx", xs, {dx.data(), dx.size()}, f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_residual_block_has_its_gradients_and_trains, B, backends) {
  on<residual, B> m(3);
  auto [flat, y] = problem(8, 72, 5);
  tensor x = images(flat);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true}};
  m.value_and_gradients(x, y, loss);
  const std::vector<float> analytic = to_host(m.gradients());
  const std::vector<float> w0 = m.get_weights();
  // the trainable ones; the moving statistics do not enter training outputs
  std::vector<float> params(w0.begin(), w0.begin() + residual::param_count);
  const std::vector<float> moving(w0.begin() + residual::param_count, w0.end());
  auto f = [&]() -> double {
    std::vector<float> w = params;
    w.insert(w.end(), moving.begin(), moving.end());
    m.set_weights(w);
    return loss(y, m(x, true))();
  };
  dtrain_test::check_gradient("residual", params, analytic, f, 400);
  // and it learns: 64 examples of 3 classes
  on<residual, B> t(3);
  auto [flat2, y2] = problem(64, 72, 6);
  const tensor x2 = images(flat2);
  t.compile({.optimizer = adam{{.learning_rate = 0.02f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  const auto first = t.evaluate(x2, y2, {.verbose = 0});
  t.fit(x2, y2, {.epochs = 25, .verbose = 0, .batch_size = 16});
  const auto last = t.evaluate(x2, y2, {.verbose = 0});
  BOOST_TEST(last["loss"] < 0.5f * first["loss"]);
  BOOST_TEST(last["accuracy"] > 0.9f);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_causal_transformer_block_has_its_gradients_and_learns_the_previous_token, B, backends) {
  on<transformer, B> m(2);
  auto [x, y] = previous_tokens(4, 3);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true}};
  m.value_and_gradients(x, y, loss);
  const std::vector<float> analytic = to_host(m.gradients());
  std::vector<float> params = m.get_weights();
  auto f = [&]() -> double {
    m.set_weights(params);
    return loss(y, m(x, true))();
  };
  dtrain_test::check_gradient("transformer", params, analytic, f, 400);
  // a loss per step; the previous token is learnt at every step
  on<transformer, B> t(2);
  auto [x2, y2] = previous_tokens(256, 4);
  t.compile({.optimizer = adam{{.learning_rate = 0.02f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  t.fit(x2, y2, {.epochs = 30, .verbose = 0, .batch_size = 32});
  BOOST_TEST(t.evaluate(x2, y2, {.verbose = 0})["accuracy"] > 0.95f);
}

BOOST_AUTO_TEST_CASE(a_chain_written_as_a_functional_model_trains_bitwise_like_the_sequential) {
  using chain = sequential<input<6>, dense<8, dtrain::tanh>, dropout<0.2f>, dense<3>>;
  using same = functional<input<6>, dense<8, dtrain::tanh>, dropout<0.2f>, dense<3>>;
  chain s(7);
  same f(7);
  auto [x, y] = problem(32, 6, 3);
  s.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  f.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  s.fit(x, y, {.epochs = 3, .verbose = 0, .batch_size = 8});
  f.fit(x, y, {.epochs = 3, .verbose = 0, .batch_size = 8});
  BOOST_TEST(f.get_weights() == s.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(names_summary_and_checkpoints) {
  residual m(1);
  const auto ls = m.layers();
  BOOST_REQUIRE_EQUAL(ls.size(), 7u);
  BOOST_TEST(ls[0].name == "conv2d");
  BOOST_TEST(ls[1].name == "conv2d_1");
  BOOST_TEST((ls[0].inbound == std::vector<std::string>{"input_layer"}));
  BOOST_TEST((ls[3].inbound == std::vector<std::string>{"conv2d", "batch_normalization"}));
  BOOST_TEST(ls[3].class_name == "Add");
  std::ostringstream os;
  m.summary(os);
  const std::string s = os.str();
  BOOST_TEST(s.find("Model: \"functional\"") == 0u);
  BOOST_TEST(s.find(" input_layer (InputLayer)    (None, 6, 6, 2)           0          -") != std::string::npos, s);
  // Keras lists a merge's inputs one per line
  BOOST_TEST(s.find(" add (Add)                   (None, 6, 6, 4)           0          conv2d[0][0],") != std::string::npos, s);
  BOOST_TEST(s.find("\n" + std::string(65, ' ') + " batch_normalization[0][0]") !=
                 std::string::npos,
             s);
  BOOST_TEST(s.find("Non-trainable params: 8") != std::string::npos);
  // saved and loaded under Keras' names, into another functional model of the same graph
  dtrain_test::temp_dir t;
  checkpoint::save_weights(m, t.path / "r.safetensors");
  residual other(2);
  checkpoint::load_weights(other, t.path / "r.safetensors");
  BOOST_TEST(other.get_weights() == m.get_weights(), tt::per_element());
  const auto f = checkpoint::load_safetensors(t.path / "r.safetensors");
  BOOST_TEST(f.find("layers/conv2d_1/vars/0"));
  BOOST_TEST(f.find("layers/batch_normalization/vars/3"));
}

BOOST_AUTO_TEST_SUITE_END()
