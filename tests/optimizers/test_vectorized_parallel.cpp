// The optimizers' updates run on the widest vectors the CPU has (backend/cpu/updates_isa.hpp) and split
// over the thread budget (core/threads.hpp): on a buffer large enough for several threads, with a length
// that leaves a scalar tail, every element must match a plain scalar loop of the Keras formula, and every
// thread count must give the same bits (every instruction set too: optimizers/bits/every_isa.cpp).
#include "support/gradcheck.hpp"
#include "optimizers/update_inputs.hpp"

#include <cmath>

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {

constexpr std::size_t n = dtrain_test::update_n;
const auto values = dtrain_test::update_values;

/// Three steps of `o` with `threads` threads; returns the parameters and the slots.
template <class O>
std::pair<std::vector<float>, std::vector<float>> run(O o, int threads) {
  const int before = num_threads();
  set_num_threads(threads);
  auto p = values(1, -1.0f, 1.0f);
  for (std::uint64_t s = 0; s < 3; ++s) o.apply_gradients(values(10 + s, -0.5f, 0.5f), p);
  set_num_threads(before);
  return {p, o.state().slots};
}

/// Scalar reference: Keras' Adam (and AMSGrad, AdamW) for three steps.
std::vector<float> adam_reference(float lr, float wd, bool amsgrad) {
  auto p = values(1, -1.0f, 1.0f);
  std::vector<float> m(n), v(n), vh(n);
  for (int t = 1; t <= 3; ++t) {
    const auto g = values(10 + std::uint64_t(t - 1), -0.5f, 0.5f);
    const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(0.999, t)) / (1.0 - std::pow(0.9, t)));
    for (std::size_t i = 0; i < n; ++i) {
      p[i] *= 1.0f - lr * wd;
      m[i] += (g[i] - m[i]) * (1.0f - 0.9f);
      v[i] += (g[i] * g[i] - v[i]) * (1.0f - 0.999f);
      float vv = v[i];
      if (amsgrad) vv = vh[i] = std::max(vh[i], vv);
      p[i] -= alpha * m[i] / (std::sqrt(vv) + 1e-7f);
    }
  }
  return p;
}

std::vector<float> rmsprop_reference(float lr, float mu, bool centered) {
  auto p = values(1, -1.0f, 1.0f);
  std::vector<float> vel(n), mom(n), avg(n);
  for (int t = 1; t <= 3; ++t) {
    const auto g = values(10 + std::uint64_t(t - 1), -0.5f, 0.5f);
    for (std::size_t i = 0; i < n; ++i) {
      vel[i] = 0.9f * vel[i] + (1.0f - 0.9f) * g[i] * g[i];
      float denom = vel[i];
      if (centered) {
        avg[i] = 0.9f * avg[i] + (1.0f - 0.9f) * g[i];
        denom -= avg[i] * avg[i];
      }
      const float inc = lr * g[i] / std::sqrt(denom + 1e-7f);
      p[i] -= mu > 0.0f ? (mom[i] = mu * mom[i] + inc) : inc;
    }
  }
  return p;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-6f * (1.0f + std::abs(want[i])))) ++bad;
  BOOST_TEST(bad == 0u);
}

template <class O>
void check_threads_agree(const O& o, const std::vector<float>& reference) {
  const auto one = run(o, 1);
  check_close(one.first, reference);
  for (int threads : {2, 3}) {
    const auto many = run(o, threads);
    BOOST_TEST(many.first == one.first);    // same bits, whatever the split
    BOOST_TEST(many.second == one.second);  // and the same optimizer state
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizers_vectorized_parallel)

BOOST_AUTO_TEST_CASE(adam_adamw_amsgrad) {
  check_threads_agree(adam{{.learning_rate = 0.01f}}, adam_reference(0.01f, 0.0f, false));
  check_threads_agree(adam{{.learning_rate = 0.01f, .amsgrad = true}}, adam_reference(0.01f, 0.0f, true));
  check_threads_agree(adamw{{.learning_rate = 0.01f, .weight_decay = 0.1f}}, adam_reference(0.01f, 0.1f, false));
  check_threads_agree(adamw{{.learning_rate = 0.01f, .weight_decay = 0.1f, .amsgrad = true}},
                      adam_reference(0.01f, 0.1f, true));
}

BOOST_AUTO_TEST_CASE(rmsprop_plain_momentum_centered) {
  check_threads_agree(rmsprop{{.learning_rate = 0.01f}}, rmsprop_reference(0.01f, 0.0f, false));
  check_threads_agree(rmsprop{{.learning_rate = 0.01f, .momentum = 0.5f}}, rmsprop_reference(0.01f, 0.5f, false));
  check_threads_agree(rmsprop{{.learning_rate = 0.01f, .momentum = 0.5f, .centered = true}},
                      rmsprop_reference(0.01f, 0.5f, true));
}

BOOST_AUTO_TEST_CASE(adagrad_adamax_nadam_lion) {
  // scalar references of Keras' formulas, three steps each
  auto reference = [](auto step, std::size_t slots) {
    auto p = values(1, -1.0f, 1.0f);
    std::vector<float> s(slots * n);
    for (int t = 1; t <= 3; ++t) {
      const auto g = values(10 + std::uint64_t(t - 1), -0.5f, 0.5f);
      for (std::size_t i = 0; i < n; ++i) step(t, g[i], p[i], s.data() + i);
    }
    return p;
  };
  check_threads_agree(adagrad{{.learning_rate = 0.01f}}, reference([](int, float g, float& p, float* s) {
    s[0] += g * g;
    p -= g * 0.01f / std::sqrt(s[0] + 0.1f + 1e-7f);
  }, 1));
  check_threads_agree(adamax{{.learning_rate = 0.01f}}, reference([](int t, float g, float& p, float* s) {
    float& m = s[0];
    float& u = s[n];
    m += (g - m) * (1.0f - 0.9f);
    u = std::max(0.999f * u, std::fabs(g));
    p -= m * static_cast<float>(0.01 / (1.0 - std::pow(0.9, t))) / (u + 1e-7f);
  }, 2));
  check_threads_agree(lion{{.learning_rate = 0.01f}}, reference([](int, float g, float& p, float* s) {
    const float c = s[0] * 0.9f + g * (1.0f - 0.9f);
    p -= c > 0 ? 0.01f : c < 0 ? -0.01f : 0.0f;
    s[0] = s[0] * 0.99f + g * (1.0f - 0.99f);
  }, 1));
  check_threads_agree(nadam{{.learning_rate = 0.01f}}, reference([](int t, float g, float& p, float* s) {
    float& m = s[0];
    float& v = s[n];
    auto u = [](int k) { return 0.9 * (1.0 - 0.5 * std::pow(0.96, k)); };
    double prod = 1.0;
    for (int k = 1; k <= t; ++k) prod *= u(k);
    m += (g - m) * (1.0f - 0.9f);
    v += (g * g - v) * (1.0f - 0.999f);
    const double m_hat = u(t + 1) * m / (1.0 - prod * u(t + 1)) + (1.0 - u(t)) * g / (1.0 - prod);
    p -= static_cast<float>(m_hat * 0.01 / (std::sqrt(v / (1.0 - std::pow(0.999, t))) + 1e-7));
  }, 2));
}

BOOST_AUTO_TEST_CASE(sgd_plain_momentum_nesterov) {
  auto reference = [](float mu, bool nesterov) {
    auto p = values(1, -1.0f, 1.0f);
    std::vector<float> m(n);
    for (int t = 1; t <= 3; ++t) {
      const auto g = values(10 + std::uint64_t(t - 1), -0.5f, 0.5f);
      for (std::size_t i = 0; i < n; ++i) {
        if (mu == 0.0f) {
          p[i] -= 0.1f * g[i];
        } else {
          m[i] = mu * m[i] - 0.1f * g[i];
          p[i] += nesterov ? mu * m[i] - 0.1f * g[i] : m[i];
        }
      }
    }
    return p;
  };
  check_threads_agree(sgd{{.learning_rate = 0.1f}}, reference(0.0f, false));
  check_threads_agree(sgd{{.learning_rate = 0.1f, .momentum = 0.9f}}, reference(0.9f, false));
  check_threads_agree(sgd{{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}}, reference(0.9f, true));
}

// A moment that decays where the gradient stays zero reaches the subnormal range, where every
// operation on it is a slow microcode assist: the update treats subnormals as zero, as TensorFlow's CPU
// threads do, and gives the caller's thread back its own floating-point settings.
BOOST_AUTO_TEST_CASE(subnormal_moments_flush_to_zero_and_the_caller_keeps_its_settings) {
  if (!detail::simd::enabled) {
    BOOST_TEST_MESSAGE("no x86-64 SSE2 or AArch64 NEON: subnormals are left as they are here");
    return;
  }
  const float tiny = 1e-40f;  // subnormal
  BOOST_REQUIRE(std::fpclassify(tiny) == FP_SUBNORMAL);
  for (auto isa : {detail::cpu_isa::baseline, detail::best_cpu_isa()}) {
    std::vector<float> g(37, 0.0f), p(37, 1.0f), s(2 * 37, 1e-3f);
    for (std::size_t i = 0; i < 37; ++i) s[i] = tiny;  // m subnormal, v normal
    detail::update_kernel(op::adam{0.01f, 0.1f, 0.001f, 1e-7f, 1.0f, false}, 37, g.data(), s.data(), p.data(), isa);
    BOOST_TEST(std::count(s.begin(), s.begin() + 37, 0.0f) == 37, "isa " << int(isa));
  }
  volatile float a = 1e-30f, b = 1e-10f;  // the caller's own arithmetic still makes subnormals
  BOOST_TEST(std::fpclassify(a * b) == FP_SUBNORMAL);
}

BOOST_AUTO_TEST_CASE(parallel_for_covers_every_index_once) {
  const int before = num_threads();
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{100003}}) {
      std::vector<int> hits(len, 0);
      detail::parallel_for(len, 16, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) ++hits[i];
      });
      BOOST_TEST(std::count(hits.begin(), hits.end(), 1) == static_cast<std::ptrdiff_t>(len));
    }
  }
  set_num_threads(before);
}

BOOST_AUTO_TEST_SUITE_END()
