// Update rules worked out by hand for two steps (on every backend of the suite), schedules, state
// save/restore (across backends too), bad options.
#include "support/gradcheck.hpp"

using namespace dtrain;
using dtrain_test::backends;
namespace tt = boost::test_tools;

namespace {
/// One step of `o` on parameters `p` with gradients `g` (laid out in `variables`), both in backend B's
/// memory; returns the gradients as the step left them.
template <class B, class O>
std::vector<float> step_on(O& o, const std::vector<float>& g, std::vector<float>& p,
                           std::span<const std::size_t> variables = {}) {
  const B dev;
  auto gd = dtrain_test::upload(dev, g), pd = dtrain_test::upload(dev, p);
  o.apply_gradients(device_span<float, B>(dev, gd.data(), g.size()), device_span<float, B>(dev, pd.data(), p.size()),
                    variables);
  p = dtrain_test::download(dev, pd);
  return dtrain_test::download(dev, gd);
}

/// Two steps on p = (1, -2) with gradients g1 then g2; returns p.
template <class B, class O>
std::vector<float> two_steps(O o) {
  std::vector<float> p{1.0f, -2.0f};
  step_on<B>(o, {0.5f, -1.0f}, p);
  step_on<B>(o, {0.25f, 2.0f}, p);
  return p;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(optimizers)

BOOST_AUTO_TEST_CASE_TEMPLATE(sgd_plain_momentum_nesterov, B, backends) {
  auto p = two_steps<B>(sgd{{.learning_rate = 0.1f}});
  BOOST_TEST(p[0] == 1.0f - 0.1f * 0.75f, tt::tolerance(1e-6f));
  BOOST_TEST(p[1] == -2.0f - 0.1f * 1.0f, tt::tolerance(1e-6f));
  // momentum 0.9: m1 = -0.05, p = 0.95; m2 = 0.9 * -0.05 - 0.025 = -0.07, p = 0.88
  p = two_steps<B>(sgd{{.learning_rate = 0.1f, .momentum = 0.9f}});
  BOOST_TEST(p[0] == 0.88f, tt::tolerance(1e-6f));
  // nesterov: p1 = 1 + 0.9 * -0.05 - 0.05 = 0.905; m2 = -0.07, p2 = 0.905 + 0.9 * -0.07 - 0.025 = 0.817
  p = two_steps<B>(sgd{{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}});
  BOOST_TEST(p[0] == 0.817f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adam_first_step_moves_by_learning_rate, B, backends) {
  // With bias correction Adam's first step is lr * g / (|g| + eps') = lr * sign(g)
  adam a{{.learning_rate = 0.01f}};
  std::vector<float> p{1.0f, -2.0f};
  step_on<B>(a, {0.5f, -1.0f}, p);
  BOOST_TEST(p[0] == 0.99f, tt::tolerance(1e-5f));
  BOOST_TEST(p[1] == -1.99f, tt::tolerance(1e-5f));
  BOOST_TEST(a.iterations() == 1);
  // second step on parameter 0: m = 0.9*0.05 + 0.1*0.25 = 0.07, v = 0.999*0.00025 + 0.001*0.0625
  const double m = 0.07, v = 0.999 * 0.00025 + 0.001 * 0.0625;
  const double alpha = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  step_on<B>(a, {0.25f, 2.0f}, p);
  BOOST_TEST(p[0] == 0.99 - alpha * m / (std::sqrt(v) + 1e-7), tt::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adamw_decays_weights_first, B, backends) {
  // zero gradient: Adam moves nothing, AdamW multiplies by 1 - lr * wd
  adamw a{{.learning_rate = 0.1f, .weight_decay = 0.5f}};
  std::vector<float> p{2.0f};
  step_on<B>(a, {0.0f}, p);
  BOOST_TEST(p[0] == 2.0f * (1 - 0.05f), tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rmsprop_plain_momentum_centered, B, backends) {
  // v1 = 0.1 * 0.25 = 0.025; step = 0.01 * 0.5 / sqrt(0.025 + 1e-7)
  rmsprop r{{.learning_rate = 0.01f}};
  std::vector<float> p{1.0f};
  step_on<B>(r, {0.5f}, p);
  const double s1 = 0.01 * 0.5 / std::sqrt(0.025 + 1e-7);
  BOOST_TEST(p[0] == 1.0 - s1, tt::tolerance(1e-5));
  // centered: mean g = 0.05, denominator 0.025 - 0.0025
  rmsprop c{{.learning_rate = 0.01f, .centered = true}};
  p = {1.0f};
  step_on<B>(c, {0.5f}, p);
  BOOST_TEST(p[0] == 1.0 - 0.01 * 0.5 / std::sqrt(0.0225 + 1e-7), tt::tolerance(1e-5));
  // momentum 0.5: second step adds half of the first
  rmsprop m{{.learning_rate = 0.01f, .momentum = 0.5f}};
  p = {1.0f};
  step_on<B>(m, {0.5f}, p);
  step_on<B>(m, {0.5f}, p);
  const double v2 = 0.9 * 0.025 + 0.1 * 0.25;
  const double s2 = 0.01 * 0.5 / std::sqrt(v2 + 1e-7);
  BOOST_TEST(p[0] == 1.0 - s1 - (0.5 * s1 + s2), tt::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(adagrad_adamax_nadam_lion, B, backends) {
  // adagrad: a = 0.1 + 0.25; p -= 0.1 * 0.5 / sqrt(0.35 + 1e-7)
  std::vector<float> p{1.0f};
  adagrad ag{{.learning_rate = 0.1f}};
  step_on<B>(ag, {0.5f}, p);
  BOOST_TEST(p[0] == 1.0 - 0.05 / std::sqrt(0.35 + 1e-7), tt::tolerance(1e-6));
  // adamax, first step: m = 0.05, u = 0.5, alpha = lr / 0.1: p -= 0.01 * 0.05 / 0.1 / (0.5 + 1e-7) = 0.01
  adamax ax{{.learning_rate = 0.01f}};
  p = {1.0f};
  step_on<B>(ax, {0.5f}, p);
  BOOST_TEST(p[0] == 0.99f, tt::tolerance(1e-6f));
  // second step with g = -0.25: m = 0.045 - 0.025 = 0.02, u = max(0.4995, 0.25), alpha = 0.01 / 0.19
  step_on<B>(ax, {-0.25f}, p);
  BOOST_TEST(p[0] == 0.99 - 0.01 / 0.19 * 0.02 / (0.4995 + 1e-7), tt::tolerance(1e-6));
  // nadam, first step (Keras 3): u_k = 0.9 (1 - 0.96^k / 2); m = 0.05, v = 0.00025
  nadam na{{.learning_rate = 0.01f}};
  p = {1.0f};
  step_on<B>(na, {0.5f}, p);
  const double u1 = 0.9 * (1 - 0.5 * 0.96), u2 = 0.9 * (1 - 0.5 * 0.96 * 0.96);
  const double m_hat = u2 * 0.05 / (1 - u1 * u2) + (1 - u1) * 0.5 / (1 - u1), v_hat = 0.00025 / (1 - 0.999);
  BOOST_TEST(p[0] == 1.0 - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-7), tt::tolerance(1e-5));
  // lion: a step of exactly lr against the sign of 0.1 g (m = 0), then of 0.9 m + 0.1 g with m = 0.01 g1
  lion li{{.learning_rate = 0.01f}};
  p = {1.0f, -2.0f};
  step_on<B>(li, {0.5f, 0.0f}, p);
  BOOST_TEST(p[0] == 0.99f, tt::tolerance(1e-6f));
  BOOST_TEST(p[1] == -2.0f);  // sign(0) = 0: no move
  step_on<B>(li, {-0.01f, 0.0f}, p);  // 0.9 * 0.005 - 0.1 * 0.01 > 0: down again
  BOOST_TEST(p[0] == 0.98f, tt::tolerance(1e-6f));
  BOOST_CHECK_THROW(lion({.beta_1 = 1.5f}), value_error);
  BOOST_CHECK_THROW(adagrad({.initial_accumulator_value = -1.0f}), value_error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(use_ema_keeps_the_average_and_finalize_swaps_it_in, B, backends) {
  // SGD lr 0.1 on p = 1 with g = 1, 1, 1: p = 0.9, 0.8, 0.7; the average starts at the first step's p
  // (Keras: momentum 0 then), then 0.5 a + 0.5 p: 0.9, 0.85, 0.775
  sgd o{{.learning_rate = 0.1f, .use_ema = true, .ema_momentum = 0.5f}};
  std::vector<float> p{1.0f};
  for (int i = 0; i < 3; ++i) step_on<B>(o, {1.0f}, p);
  BOOST_TEST(p[0] == 0.7f, tt::tolerance(1e-6f));
  BOOST_REQUIRE_EQUAL(o.state().slots.size(), 1u);  // plain SGD has no slot of its own: the average alone
  BOOST_TEST(o.state().slots[0] == 0.775f, tt::tolerance(1e-6f));
  const B dev;
  auto pd = dtrain_test::upload(dev, p);
  o.finalize_variable_values(device_span<float, B>(dev, pd.data(), 1));
  BOOST_TEST(dtrain_test::download(dev, pd)[0] == 0.775f, tt::tolerance(1e-6f));
  // every 2 steps the weights take the average (Keras' ema_overwrite_frequency), after the 2nd step here
  adam a{{.learning_rate = 0.1f, .use_ema = true, .ema_momentum = 0.9f, .ema_overwrite_frequency = 2}};
  p = {1.0f};
  step_on<B>(a, {1.0f}, p);
  const float after_one = p[0];
  step_on<B>(a, {1.0f}, p);
  const std::vector<float> s = a.state().slots;  // m, v, then the average
  BOOST_REQUIRE_EQUAL(s.size(), 3u);
  BOOST_TEST(p[0] == s[2]);
  // Adam's steps with a constant gradient are lr each: raw 0.9 then 0.8; the average 0.9, then
  // 0.9 * 0.9 + 0.1 * 0.8
  BOOST_TEST(after_one == 0.9f, tt::tolerance(1e-5f));
  BOOST_TEST(p[0] == 0.89f, tt::tolerance(1e-5f));
  BOOST_CHECK_THROW(sgd({.ema_momentum = 1.5f}), value_error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(clipnorm_clipvalue_and_global_clipnorm, B, backends) {
  // SGD with learning rate 1 moves p by -g': the clipped gradients. Two variables: (3, 4) of norm 5 and
  // (0, 0, 12) of norm 12; the global norm is 13.
  const std::vector<float> g{3.0f, 4.0f, 0.0f, 0.0f, 12.0f};
  const std::size_t variables[] = {2, 3};
  auto clipped = [&](sgd_options o, bool laid_out = true) {
    o.learning_rate = 1.0f;
    sgd opt(o);
    std::vector<float> p(5, 0.0f);
    BOOST_TEST(step_on<B>(opt, g, p, laid_out ? variables : std::span<const std::size_t>{}) == g, tt::per_element());  // the caller's gradients are left alone
    for (float& x : p) x = -x;
    return p;
  };
  auto near = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], tt::tolerance(1e-6f));
  };
  // each variable by its own norm: the first scaled by 2.5 / 5, the second by 2.5 / 12
  near(clipped({.clipnorm = 2.5f}), {1.5f, 2.0f, 0.0f, 0.0f, 2.5f});
  near(clipped({.clipnorm = 6.0f}), {3.0f, 4.0f, 0.0f, 0.0f, 6.0f});  // the first is under the norm: kept
  near(clipped({.clipnorm = 6.5f}, false), {1.5f, 2.0f, 0.0f, 0.0f, 6.0f});  // no layout: one variable, norm 13
  near(clipped({.global_clipnorm = 6.5f}), {1.5f, 2.0f, 0.0f, 0.0f, 6.0f});
  near(clipped({.global_clipnorm = 26.0f}), g);
  near(clipped({.clipvalue = 3.5f}), {3.0f, 3.5f, 0.0f, 0.0f, 3.5f});
  // a gradient that is not finite: Keras' global scale is NaN, so is the step
  sgd nan_step{{.learning_rate = 1.0f, .global_clipnorm = 1.0f}};
  std::vector<float> p(2, 0.0f);
  step_on<B>(nan_step, {std::numeric_limits<float>::infinity(), 1.0f}, p);
  BOOST_TEST(std::isnan(p[1]));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gradient_accumulation_updates_with_the_mean_every_k_calls, B, backends) {
  // four calls with accumulation over 2 = Adam's two updates with the means of each pair
  rng r(5);
  const auto g = dtrain_test::random_vector(4 * 6, r);
  auto call = [&](int i) { return std::vector<float>(g.begin() + i * 6, g.begin() + (i + 1) * 6); };
  adam accumulating{{.learning_rate = 0.1f, .gradient_accumulation_steps = 2}}, plain{{.learning_rate = 0.1f}};
  std::vector<float> p(6, 1.0f), q(6, 1.0f);
  step_on<B>(accumulating, call(0), p);
  BOOST_TEST(p == std::vector<float>(6, 1.0f), tt::per_element());  // the first call only accumulates
  step_on<B>(accumulating, call(1), p);
  adam resumed{{.learning_rate = 0.1f, .gradient_accumulation_steps = 2}};
  step_on<B>(accumulating, call(2), p);
  resumed.set_state(accumulating.state());  // mid-accumulation: the sum so far is state
  step_on<B>(resumed, call(3), p);
  for (int pair : {0, 2}) {
    std::vector<float> mean(6);
    for (std::size_t j = 0; j < 6; ++j) mean[j] = (call(pair)[j] + call(pair + 1)[j]) * 0.5f;
    step_on<B>(plain, mean, q);
  }
  for (std::size_t j = 0; j < 6; ++j) BOOST_TEST(p[j] == q[j], tt::tolerance(1e-6f));
  BOOST_TEST(resumed.iterations() == 4);  // every call counts, as Keras' counter does
  BOOST_TEST(resumed.state().slots.size() == 3 * 6u);  // m, v, the accumulated gradients
}

BOOST_AUTO_TEST_CASE(schedules) {
  exponential_decay e{.initial_learning_rate = 0.1f, .decay_steps = 10, .decay_rate = 0.5f};
  BOOST_TEST(e(0) == 0.1f);
  BOOST_TEST(e(10) == 0.05f, tt::tolerance(1e-6f));
  BOOST_TEST(e(5) == 0.1f * std::sqrt(0.5f), tt::tolerance(1e-6f));
  e.staircase = true;
  BOOST_TEST(e(19) == 0.05f, tt::tolerance(1e-6f));
  piecewise_constant_decay pc{.boundaries = {100, 200}, .values = {1.0f, 0.5f, 0.1f}};
  BOOST_TEST(pc(100) == 1.0f);
  BOOST_TEST(pc(101) == 0.5f);
  BOOST_TEST(pc(1000) == 0.1f);
  // the optimizer asks the schedule at `iterations` (0 on the first step)
  sgd s{{.learning_rate = piecewise_constant_decay{.boundaries = {0}, .values = {1.0f, 0.1f}}}};
  std::vector<float> p{0.0f};
  s.apply_gradients(std::vector<float>{1.0f}, p);
  BOOST_TEST(p[0] == -1.0f);
  s.apply_gradients(std::vector<float>{1.0f}, p);
  BOOST_TEST(p[0] == -1.1f, tt::tolerance(1e-6f));
  BOOST_CHECK_THROW((sgd{{.learning_rate = piecewise_constant_decay{.boundaries = {1}, .values = {1.0f}}}}), value_error);
  BOOST_CHECK_THROW((sgd{{.learning_rate = exponential_decay{.decay_steps = 0}}}), value_error);
  BOOST_CHECK_THROW((sgd{{.learning_rate = -1.0f}}), value_error);
}

BOOST_AUTO_TEST_CASE(state_round_trip_resumes_bitwise) {
  rng r(3);
  const auto grads = dtrain_test::random_vector(4 * 50, r);
  auto run = [&](any_optimizer o, std::size_t from, std::size_t to, std::vector<float>& p) {
    for (std::size_t s = from; s < to; ++s) o.apply_gradients(std::span(grads).subspan(s * 50, 50), p);
    return o;
  };
  for (any_optimizer proto : {any_optimizer(adam{}), any_optimizer(rmsprop{{.momentum = 0.9f, .centered = true}}),
                              any_optimizer(sgd{{.momentum = 0.9f}}), any_optimizer(adamw{{.amsgrad = true}})}) {
    std::vector<float> straight(50, 1.0f), resumed(50, 1.0f);
    run(proto, 0, 4, straight);
    const any_optimizer half = run(proto, 0, 2, resumed);
    any_optimizer fresh = proto;
    fresh.set_state(half.state());
    run(fresh, 2, 4, resumed);
    BOOST_TEST(straight == resumed, tt::per_element());
    BOOST_TEST(half.iterations() == 2);
  }
}

BOOST_AUTO_TEST_CASE(state_moves_between_backends) {
  // two steps with the slots on the opaque backend, the state saved, two more on the cpu backend: the
  // same as four steps on one
  rng r(8);
  const auto g = dtrain_test::random_vector(4 * 20, r);
  auto grads = [&](int s) { return std::vector<float>(g.begin() + s * 20, g.begin() + (s + 1) * 20); };
  std::vector<float> straight(20, 1.0f), moved(20, 1.0f);
  adam a{{.amsgrad = true}}, b{{.amsgrad = true}};
  for (int s = 0; s < 4; ++s) a.apply_gradients(grads(s), straight);
  for (int s = 0; s < 2; ++s) step_on<opaque>(b, grads(s), moved);
  adam c{{.amsgrad = true}};
  c.set_state(b.state());
  for (int s = 2; s < 4; ++s) c.apply_gradients(grads(s), moved);
  BOOST_TEST(straight == moved, tt::per_element());
  BOOST_TEST(c.iterations() == 4);
}

BOOST_AUTO_TEST_CASE(bad_options_and_mismatched_state) {
  BOOST_CHECK_THROW(sgd{{.momentum = 1.5f}}, value_error);
  BOOST_CHECK_THROW(adam{{.beta_1 = 1.0f}}, value_error);
  BOOST_CHECK_THROW(rmsprop{{.rho = -0.1f}}, value_error);
  BOOST_CHECK_THROW(sgd({.clipnorm = 1.0f, .clipvalue = 1.0f}), value_error);  // Keras allows one of the three
  BOOST_CHECK_THROW(adam{{.global_clipnorm = -1.0f}}, value_error);
  BOOST_CHECK_THROW(adam{{.gradient_accumulation_steps = 1}}, value_error);
  const std::size_t two[] = {1, 1};
  std::vector<float> q(3);
  BOOST_CHECK_THROW(adam{}.apply_gradients(std::vector<float>(3), q, two), shape_error);  // variables of 2 for 3
  adam a;
  std::vector<float> p(3);
  BOOST_CHECK_THROW(a.apply_gradients(std::vector<float>(2), p), shape_error);
  a.set_state({.iterations = 5, .slots = std::vector<float>(4), .extra = {}});
  BOOST_CHECK_THROW(a.apply_gradients(std::vector<float>(3), p), value_error);
}

BOOST_AUTO_TEST_CASE(set_learning_rate_replaces_the_schedule) {
  any_optimizer o = sgd{{.learning_rate = exponential_decay{.initial_learning_rate = 1.0f, .decay_steps = 1, .decay_rate = 0.5f}}};
  BOOST_TEST(o.learning_rate() == 1.0f);
  o.set_learning_rate(0.25f);
  BOOST_TEST(o.learning_rate() == 0.25f);
  BOOST_TEST(o.name() == "SGD");
}

BOOST_AUTO_TEST_SUITE_END()
