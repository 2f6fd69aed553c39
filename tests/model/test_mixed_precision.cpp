// Mixed precision (Keras' dtype policies): the backends' round_to against core/float16.hpp's rounding, and
// what a model under a mixed policy computes: its layers read cast inputs and weights, their outputs and
// gradients are cast, float32 where Keras keeps float32 (the model's outputs, normalization layers).
#include <cmath>
#include <sstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

using namespace dtrain;
using dtrain_test::backends;
using dtrain_test::on;
using dtrain_test::to_host;
namespace tt = boost::test_tools;

namespace {
/// Floats that exercise rounding: a stride through every bit pattern, ties and their neighbours in both
/// formats, the float16 overflow and subnormal boundaries, zeros, infinities and NaNs.
std::vector<float> rounding_cases() {
  std::vector<float> v;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 0x10001ull * 97) v.push_back(std::bit_cast<float>(std::uint32_t(u)));
  for (float base : {1.0f, 3.0f, 1e-5f, 6e-8f, 65504.0f, 1e30f})
    for (std::uint32_t low : {0x8000u, 0x18000u, 0x1000u, 0x3000u})  // bfloat16 and float16 ties
      for (int d : {-1, 0, 1})
        for (float sign : {1.0f, -1.0f}) {
          const std::uint32_t b = std::bit_cast<std::uint32_t>(base) & ~0x1ffffu;
          v.push_back(sign * std::bit_cast<float>(b + low + std::uint32_t(d)));
        }
  for (float f : {0.0f, -0.0f, 65519.99f, 65520.0f, 65536.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                  2.9802326e-08f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f})
    v.push_back(f);
  return v;
}
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}
bool representable(dtype d, const std::vector<float>& v) {
  for (float f : v)
    if (!same_bits(round_as(d, f), f)) return false;
  return true;
}

using net = sequential<input<4>, dense<8, relu>, dense<3>>;
using normalized = sequential<input<4>, dense<8>, batch_normalization<>, relu, dense<3>>;

std::pair<tensor, tensor> problem(std::size_t n) {
  rng r(5);
  tensor x = zeros({n, 4}), y = zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i % 3;
    for (std::size_t j = 0; j < 4; ++j) x(i, j) = 0.3f * r.normal() + (j == c ? 2.0f : 0.0f);
    y(i) = float(c);
  }
  return {x, y};
}
template <class M>
void compile(M& m) {
  m.compile({.optimizer = adam{{.learning_rate = 0.02f}},
             .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
}
}  // namespace

BOOST_AUTO_TEST_SUITE(mixed_precision)

BOOST_AUTO_TEST_CASE(policies_go_by_keras_names_and_refuse_others) {
  BOOST_TEST(dtype_policy().name() == std::string("float32"));
  BOOST_TEST(!dtype_policy().mixed());
  BOOST_TEST((dtype_policy("mixed_bfloat16").compute_dtype() == dtype::bfloat16));
  BOOST_TEST((dtype_policy("mixed_float16").compute_dtype() == dtype::float16));
  BOOST_TEST((dtype_policy("mixed_float16").variable_dtype() == dtype::float32));
  BOOST_TEST((dtype_policy("mixed_bfloat16") == dtype_policy::mixed_bfloat16()));
  BOOST_TEST(dtype_policy::mixed_float16().name() == std::string("mixed_float16"));
  const std::string e = dtrain_test::error_of([] { dtype_policy("bfloat16"); });
  BOOST_TEST(e.find("\"bfloat16\"") != std::string::npos);
  BOOST_TEST(e.find("mixed_bfloat16") != std::string::npos);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(round_to_rounds_as_the_formats_do, B, backends) {
  const B b{};
  const std::vector<float> in = rounding_cases();
  const auto x = dtrain_test::upload(b, in);
  auto y = b.template allocate<float>(in.size());
  for (dtype d : {dtype::bfloat16, dtype::float16, dtype::float32}) {
    b.round_to(in.size(), d, pointer_t<B, const float>(x.data()), y.data());
    const std::vector<float> out = dtrain_test::download(b, y);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < in.size(); ++i) wrong += !same_bits(out[i], round_as(d, in[i]));
    BOOST_TEST(wrong == 0u, name_of(d) << ": " << wrong << " of " << in.size() << " values rounded otherwise");
  }
  // in place
  auto z = dtrain_test::upload(b, in);
  b.round_to(in.size(), dtype::float16, pointer_t<B, const float>(z.data()), z.data());
  BOOST_TEST(representable(dtype::float16, dtrain_test::download(b, z)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_layer_reads_its_input_and_weights_cast, B, backends) {
  // one dense layer, the model's output: y = cast(x) cast(kernel) + cast(bias), summed in float32
  using one = on<sequential<input<4>, dense<3>>, B>;
  one m(7);
  m.set_dtype_policy(dtype_policy::mixed_bfloat16());
  const auto [x, y] = problem(6);
  const std::vector<float> w = m.get_weights();
  const tensor p = m.predict(x);
  double worst = 0, uncast = 0;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      double want = round_as(dtype::bfloat16, w[12 + j]), plain = w[12 + j];
      for (std::size_t k = 0; k < 4; ++k) {
        want += double(round_as(dtype::bfloat16, x(i, k))) * round_as(dtype::bfloat16, w[k * 3 + j]);
        plain += double(x(i, k)) * w[k * 3 + j];
      }
      worst = std::max(worst, std::abs(p(i, j) - want) / (1 + std::abs(want)));
      uncast = std::max(uncast, std::abs(plain - want) / (1 + std::abs(want)));
    }
  BOOST_TEST(worst < 1e-6);
  BOOST_TEST(uncast > 1e-4);  // (the check can tell: uncast values differ)
  BOOST_TEST(m.dtype_policy().name() == std::string("mixed_bfloat16"));
}

/// An identity layer that records the GEMM dtype of the device it runs on, forward and backward; Autocast
/// false: a layer that keeps float32.
template <bool Autocast>
struct device_probe {
  static inline std::vector<dtype> seen;
  template <class In, class B>
  struct bind {
    using input_shape = In;
    using output_shape = In;
    static constexpr const char* keras_name = "probe";
    static constexpr const char* class_name = "Probe";
    static constexpr bool autocast = Autocast;
    static constexpr std::array<param_spec, 0> params{};
    void initialize(std::span<float>, rng&) {}
    void forward(layer_context<B>& ctx, const float* x, float* y, std::size_t n, const float*) const {
      seen.push_back(ctx.device.gemm_dtype());
      ctx.device.copy(n * In::size, x, y);
    }
    void backward(layer_context<B>& ctx, const float*, const float*, float* dy, float* dx, std::size_t n, const float*,
                  float*) const {
      seen.push_back(ctx.device.gemm_dtype());
      if (dx) ctx.device.copy(n * In::size, dy, dx);
    }
    void regularization(layer_context<B>&, const float*, float*, float, float*) const {}
  };
};

// Under a mixed policy an autocasting layer runs on the device whose GEMMs multiply the compute dtype
// (forward and backward), a float32 layer on the float32 one; under float32 every layer on float32. (The
// first probe's output gradient is not wanted, nothing before it trains: backward casts no gradient there.)
BOOST_AUTO_TEST_CASE(autocasting_layers_run_on_the_compute_dtypes_gemms) {
  using casting = device_probe<true>;
  using keeping = device_probe<false>;
  using net = sequential<input<4>, casting, dense<4, relu>, keeping, dense<3>>;
  const auto [x, y] = problem(6);
  for (dtype_policy policy : {dtype_policy("float32"), dtype_policy::mixed_bfloat16(), dtype_policy::mixed_float16()}) {
    net m(3);
    m.set_dtype_policy(policy);
    compile(m);
    casting::seen.clear(), keeping::seen.clear();
    m.train_step(x, y);
    const dtype d = policy.compute_dtype();
    BOOST_TEST_CONTEXT(policy.name()) {
      BOOST_TEST((casting::seen == std::vector<dtype>{d, d}));
      BOOST_TEST((keeping::seen == std::vector<dtype>{dtype::float32, dtype::float32}));
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(weight_gradients_are_cast_except_a_normalization_layers, B, backends) {
  const auto [x, y] = problem(12);
  for (dtype_policy policy : {dtype_policy::mixed_bfloat16(), dtype_policy::mixed_float16()}) {
    on<normalized, B> m(9), reference(9);
    m.set_dtype_policy(policy);
    compile(m), compile(reference);
    m.train_step(x, y), reference.train_step(x, y);
    const std::vector<float> g = to_host(m.gradients()), f = to_host(reference.gradients());
    const auto& ls = m.layers();
    const auto slice = [&](const std::vector<float>& v, std::size_t layer) {
      const auto first = v.begin() + std::ptrdiff_t(ls[layer].offset);
      return std::vector<float>(first, first + std::ptrdiff_t(ls[layer].param_count));
    };
    const dtype d = policy.compute_dtype();
    BOOST_TEST(representable(d, slice(g, 0)), policy.name());   // dense
    BOOST_TEST(representable(d, slice(g, 3)), policy.name());   // dense (the output)
    BOOST_TEST(!representable(d, slice(g, 1)), policy.name());  // batch_normalization: float32
    BOOST_TEST(!representable(d, slice(f, 0)), policy.name());  // (under float32 they are not)
    BOOST_TEST(dtrain_test::scaled_difference(g, f) < 0.05, policy.name());
    BOOST_TEST(dtrain_test::scaled_difference(g, f) > 0.0, policy.name());
  }
}

// in_float32<L> (Keras' dtype="float32" on a layer): under a mixed policy its weight gradients stay float32
// while its neighbours' are cast; under float32 it is L itself, bit for bit.
BOOST_AUTO_TEST_CASE_TEMPLATE(in_float32_keeps_one_layer_in_float32, B, backends) {
  using kept = sequential<input<4>, dense<5, relu>, in_float32<dense<6, relu>>, dense<3>>;
  using plain = sequential<input<4>, dense<5, relu>, dense<6, relu>, dense<3>>;
  const auto [x, y] = problem(12);
  on<kept, B> m(9);
  on<plain, B> reference(9);
  BOOST_TEST(m.get_weights() == reference.get_weights(), tt::per_element());
  const tensor p = m.predict(x), q = reference.predict(x);
  BOOST_TEST(std::vector<float>(p.begin(), p.end()) == std::vector<float>(q.begin(), q.end()), tt::per_element());
  m.set_dtype_policy(dtype_policy::mixed_bfloat16());
  compile(m);
  m.train_step(x, y);
  const std::vector<float> g = to_host(m.gradients());
  const auto& ls = m.layers();
  const auto slice = [&](std::size_t layer) {
    const auto first = g.begin() + std::ptrdiff_t(ls[layer].offset);
    return std::vector<float>(first, first + std::ptrdiff_t(ls[layer].param_count));
  };
  BOOST_TEST(representable(dtype::bfloat16, slice(0)));
  BOOST_TEST(!representable(dtype::bfloat16, slice(1)));  // in_float32
  BOOST_TEST(representable(dtype::bfloat16, slice(2)));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_model_trains_under_either_mixed_policy_as_in_float32, B, backends) {
  const auto [x, y] = problem(96);
  auto data = data::from_tensor_slices(x, y) | data::batch(16);
  on<net, B> fp32(3);
  compile(fp32);
  const history h32 = fp32.fit(data, {.epochs = 6, .verbose = 0});
  for (dtype_policy policy : {dtype_policy::mixed_bfloat16(), dtype_policy::mixed_float16()}) {
    on<net, B> m(3);
    m.set_dtype_policy(policy);
    compile(m);
    const history h = m.fit(data, {.epochs = 6, .verbose = 0});
    BOOST_TEST(h["accuracy"].back() > 0.9f, policy.name());
    BOOST_TEST(std::abs(h["loss"].back() - h32["loss"].back()) < 0.05f, policy.name());
    BOOST_TEST(h["loss"].back() != h32["loss"].back(), policy.name());  // it did compute otherwise
    // the variables stay float32: the updates move them off the compute dtype's grid
    BOOST_TEST(!representable(policy.compute_dtype(), m.get_weights()), policy.name());
  }
}

// ---- loss scaling ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(under_float32_a_power_of_two_scale_changes_no_bit_and_grows_after_its_window, B, backends) {
  // the scaled gradients divided by a power of two are the unscaled ones exactly: the same weights as the
  // inner optimizer alone, while the scale doubles every 3 finite steps
  const auto [x, y] = problem(24);
  using l2_net = on<sequential<input<4>, dense<8, relu, l2<0.01f>>, dense<3>>, B>;
  l2_net plain(4), scaled(4);
  const sgd inner{{.learning_rate = 0.1f, .momentum = 0.9f}};
  plain.compile({.optimizer = inner, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  scaled.compile({.optimizer = loss_scale_optimizer(inner, {.initial_scale = 4.0f, .dynamic_growth_steps = 3}),
                  .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  for (int i = 0; i < 7; ++i) {
    const float a = plain.train_step(x, y).at("loss"), b = scaled.train_step(x, y).at("loss");
    BOOST_TEST(a == b);  // the loss is reported unscaled
  }
  BOOST_TEST(scaled.get_weights() == plain.get_weights(), tt::per_element());
  const auto* ls = scaled.optimizer().template target<loss_scale_optimizer>();
  BOOST_REQUIRE(ls);
  BOOST_TEST(ls->dynamic_scale() == 16.0f);  // doubled after steps 3 and 6
  BOOST_TEST(ls->step_counter() == 1);
  BOOST_TEST(scaled.optimizer().iterations() == 7);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_overflowing_step_is_skipped_and_halves_the_scale, B, backends) {
  using regression = on<sequential<input<4>, dense<8, relu>, dense<1>>, B>;
  regression m(2);
  m.set_dtype_policy(dtype_policy::mixed_float16());
  m.compile({.optimizer = sgd{{.learning_rate = 0.01f}}, .loss = mean_squared_error{}});  // wrapped by compile
  auto* ls = m.optimizer().template target<loss_scale_optimizer>();
  BOOST_REQUIRE(ls);
  BOOST_TEST(ls->dynamic_scale() == 32768.0f);
  const auto [x, labels] = problem(12);
  tensor far = zeros({12, 1}), near = zeros({12, 1});
  for (std::size_t i = 0; i < 12; ++i) far(i, 0) = 1e4f, near(i, 0) = labels(i);
  const std::vector<float> before = m.get_weights();
  // |d loss / d prediction| ~ 2e4 / 12, times 2^15: the kernel's float16 gradient overflows to inf
  m.train_step(x, far);
  BOOST_TEST(m.get_weights() == before, tt::per_element());  // skipped
  BOOST_TEST(m.optimizer().iterations() == 0);
  BOOST_TEST(ls->dynamic_scale() == 16384.0f);
  BOOST_TEST(ls->step_counter() == 0);
  m.train_step(x, near);
  BOOST_TEST(m.get_weights() != before);  // taken
  BOOST_TEST(m.optimizer().iterations() == 1);
  BOOST_TEST(ls->dynamic_scale() == 16384.0f);
  BOOST_TEST(ls->step_counter() == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(scaling_keeps_float16_gradients_that_would_underflow, B, backends) {
  // a loss weighted 1e-8: its float16 gradients are below 2^-25 and round to zero, unless scaled
  const auto [x, y] = problem(12);
  auto step = [&](dtype_policy p, bool scale) {
    on<net, B> m(6);
    m.set_dtype_policy(p);
    m.compile({.optimizer = sgd{{.learning_rate = 1e4f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
               .loss_weights = {1e-8f}, .auto_scale_loss = scale});
    const std::vector<float> before = m.get_weights();
    m.train_step(x, y);
    std::vector<float> delta = m.get_weights();
    for (std::size_t i = 0; i < delta.size(); ++i) delta[i] -= before[i];
    return delta;
  };
  const std::vector<float> exact = step(dtype_policy(), false), lost = step(dtype_policy::mixed_float16(), false),
                           kept = step(dtype_policy::mixed_float16(), true);
  BOOST_TEST(std::count(lost.begin(), lost.end(), 0.0f) == std::ptrdiff_t(lost.size()));
  BOOST_TEST(dtrain_test::scaled_difference(kept, exact) < 0.02);
}

BOOST_AUTO_TEST_CASE(the_scale_is_state_a_resumed_run_continues_bitwise) {
  const auto [x, labels] = problem(12);
  tensor far = zeros({12, 1}), near = zeros({12, 1});
  for (std::size_t i = 0; i < 12; ++i) far(i, 0) = 1e4f, near(i, 0) = labels(i);
  using regression = sequential<input<4>, dense<8, relu>, dense<1>>;
  auto make = [](std::uint64_t seed) {
    regression m(seed);
    m.set_dtype_policy(dtype_policy::mixed_float16());
    m.compile({.optimizer = loss_scale_optimizer(adam{{.learning_rate = 0.01f}}, {.dynamic_growth_steps = 3}),
               .loss = mean_squared_error{}});
    return m;
  };
  regression straight = make(1), first = make(1);
  for (regression* m : {&straight, &first}) m->train_step(x, far), m->train_step(x, near), m->train_step(x, near);
  regression second = make(9);  // another start, until the state is restored
  second.set_weights(first.get_weights());
  second.optimizer().set_state(first.optimizer().state());
  for (regression* m : {&straight, &second})
    for (int i = 0; i < 4; ++i) m->train_step(x, i == 1 ? far : near);
  BOOST_TEST(second.get_weights() == straight.get_weights(), tt::per_element());
  BOOST_TEST((second.optimizer().state() == straight.optimizer().state()));
  const auto* ls = second.optimizer().target<loss_scale_optimizer>();
  BOOST_TEST(ls->dynamic_scale() == straight.optimizer().target<loss_scale_optimizer>()->dynamic_scale());
  BOOST_TEST(ls->dynamic_scale() != 32768.0f);  // (it moved)
  // a state without the scale's values is refused: too short, or at the next step (the inner slots' count)
  regression plain(1);
  plain.compile({.optimizer = adam{}, .loss = mean_squared_error{}});
  plain.train_step(x, near);
  const std::string e = dtrain_test::error_of([&] { second.optimizer().set_state(plain.optimizer().state()); });
  BOOST_TEST(e.find("loss_scale_optimizer: the restored state has no step counter") != std::string::npos, e);
  // ...and a plain optimizer refuses a state that carries one
  const std::string f = dtrain_test::error_of([&] { plain.optimizer().set_state(second.optimizer().state()); });
  BOOST_TEST(f.find("adam: the restored state carries 2 values") != std::string::npos, f);
}

BOOST_AUTO_TEST_CASE(a_loss_scale_optimizer_refuses_gradients_it_did_not_scale_and_bad_options) {
  any_optimizer o = loss_scale_optimizer(sgd{});
  const std::vector<float> g(10, 0.1f);
  std::vector<float> w(10, 1.0f);
  const std::string e = dtrain_test::error_of([&] { o.apply_gradients(std::span<const float>(g), std::span<float>(w)); });
  BOOST_TEST(e.find("not scaled") != std::string::npos);
  BOOST_TEST(w == std::vector<float>(10, 1.0f), tt::per_element());
  BOOST_CHECK_THROW(loss_scale_optimizer(sgd{}, {.initial_scale = 0.0f}), value_error);
  BOOST_CHECK_THROW(loss_scale_optimizer(sgd{}, {.dynamic_growth_steps = 0}), value_error);
  BOOST_CHECK_THROW(loss_scale_optimizer(any_optimizer(loss_scale_optimizer(sgd{}))), usage_error);
}

BOOST_AUTO_TEST_CASE(summary_shows_a_mixed_policy) {
  net m(1);
  std::ostringstream plain, mixed;
  m.summary(plain);
  BOOST_TEST(plain.str().find("Dtype policy") == std::string::npos);  // Keras' float32 summary, unchanged
  m.set_dtype_policy(dtype_policy("mixed_float16"));
  m.summary(mixed);
  BOOST_TEST(mixed.str().find("Dtype policy: mixed_float16") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
