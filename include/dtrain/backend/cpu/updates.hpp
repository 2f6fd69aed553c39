#pragma once
/// \file
/// The cpu backend's optimizer steps: one fused pass over the whole parameter buffer, its gradients and
/// its slots, vectorized (core/simd.hpp) and split over the thread budget. Every element is computed
/// exactly as the scalar formula of `op::sgd`, `op::adam` and `op::rmsprop` says.

#include <cstddef>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/core/threads.hpp"

namespace dtrain::detail {

/// Parameters per thread below which an optimizer's update stays on the calling thread (waking a
/// worker costs tens of microseconds; an update moves ~1 ns of memory traffic per parameter).
inline constexpr std::size_t update_grain = 65536;

inline void update_kernel(const op::sgd& o, std::size_t n, const float* g, float* s, float* p) {
  const float lr = o.learning_rate, mu = o.momentum;
  if (mu == 0.0f) {
    parallel_for(n, update_grain, [=](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) p[i] -= lr * g[i];
    });
  } else if (o.nesterov) {
    parallel_for(n, update_grain, [=](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const float m = s[i] = mu * s[i] - lr * g[i];
        p[i] += mu * m - lr * g[i];
      }
    });
  } else {
    parallel_for(n, update_grain, [=](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) p[i] += (s[i] = mu * s[i] - lr * g[i]);
    });
  }
}

template <bool Decay, bool Amsgrad>
void adam_kernel(const op::adam& o, std::size_t n, const float* g, float* m, float* v, float* vh, float* p) {
  const float decay = o.decay, alpha = o.alpha, b1 = o.one_minus_beta_1, b2 = o.one_minus_beta_2, eps = o.epsilon;
  parallel_for(n, update_grain, [=](std::size_t begin, std::size_t end) {
    simd::for_each_lane(begin, end, [=]<class V>(std::size_t i) {
      const V gi = simd::load<V>(g + i);
      V mi = simd::load<V>(m + i), vi = simd::load<V>(v + i), pi = simd::load<V>(p + i);
      if constexpr (Decay) pi = pi * decay;
      mi += (gi - mi) * b1;
      vi += (gi * gi - vi) * b2;
      simd::store(m + i, mi);
      simd::store(v + i, vi);
      if constexpr (Amsgrad) {
        vi = simd::max(simd::load<V>(vh + i), vi);
        simd::store(vh + i, vi);
      }
      simd::store(p + i, pi - alpha * mi / (simd::sqrt(vi) + eps));
    });
  });
}

inline void update_kernel(const op::adam& o, std::size_t n, const float* g, float* s, float* p) {
  float* m = s;
  float* v = m + n;
  float* vh = o.amsgrad ? v + n : nullptr;
  const bool decay = o.decay != 1.0f;
  if (decay && vh) adam_kernel<true, true>(o, n, g, m, v, vh, p);
  else if (decay) adam_kernel<true, false>(o, n, g, m, v, vh, p);
  else if (vh) adam_kernel<false, true>(o, n, g, m, v, vh, p);
  else adam_kernel<false, false>(o, n, g, m, v, vh, p);
}

template <bool Momentum, bool Centered>
void rmsprop_kernel(const op::rmsprop& o, std::size_t n, const float* g, float* vel, float* mom, float* avg, float* p) {
  const float lr = o.learning_rate, rho = o.rho, eps = o.epsilon, mu = o.momentum, one_minus_rho = 1.0f - rho;
  parallel_for(n, update_grain, [=](std::size_t begin, std::size_t end) {
    simd::for_each_lane(begin, end, [=]<class V>(std::size_t i) {
      const V gi = simd::load<V>(g + i);
      const V vi = rho * simd::load<V>(vel + i) + one_minus_rho * gi * gi;
      simd::store(vel + i, vi);
      V denom = vi;
      if constexpr (Centered) {
        const V ai = rho * simd::load<V>(avg + i) + one_minus_rho * gi;
        simd::store(avg + i, ai);
        denom -= ai * ai;
      }
      const V inc = lr * gi / simd::sqrt(denom + eps);
      if constexpr (Momentum) {
        const V mi = mu * simd::load<V>(mom + i) + inc;
        simd::store(mom + i, mi);
        simd::store(p + i, simd::load<V>(p + i) - mi);
      } else {
        simd::store(p + i, simd::load<V>(p + i) - inc);
      }
    });
  });
}

inline void update_kernel(const op::rmsprop& o, std::size_t n, const float* g, float* s, float* p) {
  float* vel = s;
  float* mom = o.momentum > 0.0f ? vel + n : nullptr;
  float* avg = o.centered ? vel + n * (mom ? 2 : 1) : nullptr;
  if (mom && avg) rmsprop_kernel<true, true>(o, n, g, vel, mom, avg, p);
  else if (mom) rmsprop_kernel<true, false>(o, n, g, vel, mom, avg, p);
  else if (avg) rmsprop_kernel<false, true>(o, n, g, vel, mom, avg, p);
  else rmsprop_kernel<false, false>(o, n, g, vel, mom, avg, p);
}

}  // namespace dtrain::detail
