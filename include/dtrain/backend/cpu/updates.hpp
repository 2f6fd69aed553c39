#pragma once
/// \file
/// The cpu backend's optimizer steps: one fused pass over the whole parameter buffer, its gradients and
/// its slots, on the widest vectors this CPU has (the rules are in cpu/updates_isa.hpp, once per
/// instruction set) and split over the thread budget. Every element is computed exactly as the scalar
/// formula of its `op::` says, whichever set and split computed it, with
/// subnormal numbers read and written as zero during the pass (core/simd.hpp's `flush_denormals`), as
/// TensorFlow computes.

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/isa.hpp"
#include "dtrain/core/threads.hpp"

namespace dtrain::detail {
/// SGD's three forms (`op::sgd`: momentum 0; momentum; Nesterov momentum).
enum class sgd_kind { plain, momentum, nesterov };
}  // namespace dtrain::detail

#define DTRAIN_ISA_FILE "dtrain/backend/cpu/updates_isa.hpp"
#include "dtrain/backend/cpu/each_isa.hpp"

namespace dtrain::detail {

/// Parameters per thread below which an optimizer's update stays on the calling thread (waking a
/// worker costs tens of microseconds; an update moves ~1 ns of memory traffic per parameter).
inline constexpr std::size_t update_grain = 65536;

/// Applies the rule `make_rule(updates)` of instruction set `isa`'s `updates` (updates_isa.hpp) to
/// elements [0, n), split over the thread budget.
template <class MakeRule>
void run_update(cpu_isa isa, std::size_t n, MakeRule make_rule) {
  auto split = [&]<class U>(U) {
    parallel_for(n, update_grain, [&](std::size_t b, std::size_t e) {
      const simd::flush_denormals flush;
      U::run(make_rule(U{}), b, e);
    });
  };
#if DTRAIN_CPU_AVX
  if (isa == cpu_isa::avx512) return split(avx512::updates{});
  if (isa == cpu_isa::avx2) return split(avx2::updates{});
#endif
  (void)isa;
  split(baseline::updates{});
}

inline void update_kernel(const op::sgd& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  auto with = [&]<auto Kind>() {
    run_update(isa, n, [&]<class U>(U) { return typename U::template sgd<Kind>{o, g, s, p}; });
  };
  if (o.momentum == 0.0f) with.template operator()<sgd_kind::plain>();
  else if (o.nesterov) with.template operator()<sgd_kind::nesterov>();
  else with.template operator()<sgd_kind::momentum>();
}

inline void update_kernel(const op::adam& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  float* m = s;
  float* v = m + n;
  float* vh = o.amsgrad ? v + n : nullptr;
  auto with = [&]<bool Decay, bool Amsgrad>() {
    run_update(isa, n, [&]<class U>(U) { return typename U::template adam<Decay, Amsgrad>{o, g, m, v, vh, p}; });
  };
  const bool decay = o.decay != 1.0f;
  if (decay && vh) with.template operator()<true, true>();
  else if (decay) with.template operator()<true, false>();
  else if (vh) with.template operator()<false, true>();
  else with.template operator()<false, false>();
}

inline void update_kernel(const op::rmsprop& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  float* vel = s;
  float* mom = o.momentum > 0.0f ? vel + n : nullptr;
  float* avg = o.centered ? vel + n * (mom ? 2 : 1) : nullptr;
  auto with = [&]<bool Momentum, bool Centered>() {
    run_update(isa, n, [&]<class U>(U) {
      return typename U::template rmsprop<Momentum, Centered>{o, g, vel, mom, avg, p};
    });
  };
  if (mom && avg) with.template operator()<true, true>();
  else if (mom) with.template operator()<true, false>();
  else if (avg) with.template operator()<false, true>();
  else with.template operator()<false, false>();
}

inline void update_kernel(const op::adagrad& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  run_update(isa, n, [&]<class U>(U) { return typename U::adagrad{o, g, s, p}; });
}
inline void update_kernel(const op::adamax& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  run_update(isa, n, [&]<class U>(U) { return typename U::adamax{o, g, s, s + n, p}; });
}
inline void update_kernel(const op::nadam& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  run_update(isa, n, [&]<class U>(U) { return typename U::nadam{o, g, s, s + n, p}; });
}
inline void update_kernel(const op::lion& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  run_update(isa, n, [&]<class U>(U) { return typename U::lion{o, g, s, p}; });
}

inline void update_kernel(const op::ema& o, std::size_t n, const float* g, float* s, float* p,
                          cpu_isa isa = best_cpu_isa()) {
  if (o.overwrite) run_update(isa, n, [&]<class U>(U) { return typename U::template ema<true>{o, g, s, p}; });
  else run_update(isa, n, [&]<class U>(U) { return typename U::template ema<false>{o, g, s, p}; });
}

/// The cpu backend's optimizer steps (`update_kernels`).
struct cpu_update_kernels {
  template <class Op>
  void update(const Op& o, std::size_t n, const float* g, float* slots, float* p) const {
    detail::update_kernel(o, n, g, slots, p);
  }
};

}  // namespace dtrain::detail
