#pragma once
// Numeric gradient checks by central differences.
//
// f(x, p) = sum(y * r) for a fixed random projection r, so d f / d y = r. Each checked entry is
// differentiated with steps h = 2e-3 and h / 2; where the two estimates disagree by more than the
// tolerance the entry sits on a kink (relu at 0, a max-pool tie) and is skipped, and at most 10% of
// the entries may be skipped. Tolerance (float32 forward passes): |analytic - numeric| <= 5e-3 + 2e-2 * |numeric|.

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <dtrain/dtrain.hpp>

#include "support/backends.hpp"

namespace dtrain_test {

inline constexpr double grad_atol = 5e-3;
inline constexpr double grad_rtol = 2e-2;

inline std::vector<float> random_vector(std::size_t n, dtrain::rng& r, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = scale * r.normal();
  return v;
}

/// Compares `analytic` with central differences of `f` over `values` (perturbed in place).
/// Checks every entry when there are at most `max_checks`, else an evenly spread subset.
inline void check_gradient(const std::string& what, std::vector<float>& values, std::span<const float> analytic,
                           const std::function<double()>& f, std::size_t max_checks = 200) {
  BOOST_REQUIRE_EQUAL(values.size(), analytic.size());
  const std::size_t n = values.size();
  const std::size_t stride = std::max<std::size_t>(1, n / max_checks);
  std::size_t checked = 0, skipped = 0, failed = 0;
  auto numeric = [&](std::size_t i, float h) {
    const float keep = values[i];
    values[i] = keep + h;
    const double up = f();
    values[i] = keep - h;
    const double down = f();
    values[i] = keep;
    return (up - down) / (2.0 * h);
  };
  for (std::size_t i = 0; i < n; i += stride) {
    const double n1 = numeric(i, 2e-3f), n2 = numeric(i, 1e-3f);
    ++checked;
    if (std::abs(n1 - n2) > grad_atol + grad_rtol * std::abs(n2)) {
      ++skipped;
      continue;
    }
    const double a = analytic[i];
    if (std::abs(a - n2) > grad_atol + grad_rtol * std::abs(n2)) {
      if (++failed <= 5)
        BOOST_ERROR(what << "[" << i << "]: analytic " << a << " vs numeric " << n2);
    }
  }
  BOOST_CHECK_MESSAGE(failed == 0, what << ": " << failed << " of " << checked << " entries differ");
  BOOST_CHECK_MESSAGE(skipped * 10 <= checked, what << ": " << skipped << " of " << checked << " entries sat on kinks");
}

/// Bound layer L's non-trainable variables, initialised, on backend B (empty for a layer without).
template <class L, class B>
dtrain::buffer_t<B, float> layer_state(const B& device) {
  std::vector<float> s(dtrain::state_count_v<L>);
  if constexpr (dtrain::state_count_v<L> > 0) L{}.initialize_state(s);
  return upload(device, s);
}

/// Masks over `steps` steps for n samples (1 a real step, 0 padding), of every kind a padded batch has:
/// sample 0 all real, then padding at the end, padding at the start and in the middle, and (from the
/// fourth sample) a sample all padding.
inline std::vector<float> padding_mask(std::size_t n, std::size_t steps) {
  std::vector<float> m(n * steps, 1.0f);
  for (std::size_t i = 1; i < n; ++i)
    for (std::size_t t = 0; t < steps; ++t) {
      float& v = m[i * steps + t];
      if (i % 4 == 1) v = t + 2 > steps && t > 0 ? 0.0f : 1.0f;       // the last step(s)
      if (i % 4 == 2) v = t == 0 || (t == steps / 2 && t > 1) ? 0.0f : 1.0f;  // the first and a middle one
      if (i % 4 == 3) v = 0.0f;                                       // every step
    }
  return m;
}

/// Checks d f / d x and d f / d params of layer spec `Spec` bound to input `In` on backend B, on a batch of
/// `n` random samples (host values, uploaded for every evaluation); with `mask` (n x steps host values)
/// the input carries that mask.
template <class Spec, class In, class B = dtrain::cpu>
void check_layer_gradients(const std::string& what, std::size_t n, std::uint64_t seed = 7,
                           const std::vector<float>& mask = {}) {
  using L = dtrain::bind_t<Spec, In, B>;
  using Out = typename L::output_shape;
  dtrain::rng r(seed);
  const B device;
  L layer;
  std::vector<float> params(dtrain::param_count_v<L>);
  layer.initialize(params, r);
  for (auto& p : params) p += 0.1f * r.normal();  // non-zero biases too
  std::vector<float> x = random_vector(n * In::size, r), proj = random_vector(n * Out::size, r);
  auto pd = device.template allocate<float>(params.size()), xd = device.template allocate<float>(x.size());
  auto yd = device.template allocate<float>(proj.size()), gd = device.template allocate<float>(params.size());
  auto dxd = device.template allocate<float>(x.size());
  auto sd = layer_state<L>(device);
  auto md = upload(device, mask.empty() ? std::vector<float>(1) : mask);
  const dtrain::step_mask<B> masks[1] = {{dtrain::pointer_t<B, const float>(md.data()), mask.empty() ? nullptr : mask.data()}};

  auto f = [&]() -> double {
    device.upload(params.size(), params.data(), pd.data());
    device.upload(x.size(), x.data(), xd.data());
    dtrain::rng fixed(seed + 1);  // the same dropout mask on every pass
    dtrain::layer_context<B> ctx{device, fixed, true, sd.data()};
    ctx.masks = masks;
    layer.forward(ctx, xd.data(), yd.data(), n, pd.data());
    const std::vector<float> y = download(device, yd);
    double s = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * proj[i];
    return s;
  };
  f();
  auto dyd = upload(device, proj);
  {
    dtrain::rng fixed(seed + 1);
    dtrain::layer_context<B> ctx{device, fixed, true, sd.data()};
    ctx.masks = masks;
    layer.backward(ctx, xd.data(), yd.data(), dyd.data(), dxd.data(), n, pd.data(), gd.data());
  }
  const std::vector<float> dx = download(device, dxd), grads = download(device, gd);
  check_gradient(what + " d/dx", x, dx, f);
  if (!params.empty()) check_gradient(what + " d/dparams", params, grads, f);
}

}  // namespace dtrain_test
