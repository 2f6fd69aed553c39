/// \file
/// The optimizers' update rules (backend/cpu/updates.hpp), written once for every instruction set:
/// updates.hpp includes this file once per set (each_isa.hpp), the baseline too, with `DTRAIN_ISA`
/// naming the set's namespace (backend/cpu/isa.hpp) and `DTRAIN_ISA_TARGET` its target attribute (empty
/// for the baseline). `run` applies a rule to [begin, end): whole vectors, then one float at a time; both compute an
/// element by the same IEEE operations in the same order, each product rounded on its own (`exact`), so
/// every set, every split and the scalar formula of `op::sgd`, `op::adam` and `op::rmsprop` give the same
/// bits. On its own (without those macros) this file defines nothing. No include guard, by design.
#if defined(DTRAIN_ISA) && defined(DTRAIN_ISA_TARGET)

namespace dtrain::detail::DTRAIN_ISA {

struct updates {
  /// `rule.at<V>(i)` for the vectors of [begin, end), then for its last floats. (Rules are structs: a
  /// lambda would not inherit this function's target attribute.)
  template <class Rule>
  DTRAIN_ISA_TARGET static void run(Rule rule, std::size_t begin, std::size_t end) {
    std::size_t i = begin;
    for (; i + std::size_t(lanes) <= end; i += std::size_t(lanes)) rule.template at<vec>(i);
    for (; i < end; ++i) rule.template at<float>(i);
  }

  template <class V>
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static V get(const float* p) {
    if constexpr (std::is_same_v<V, float>) return *p;
    else return load(p);
  }
  template <class V>
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static void put(float* p, V x) {
    if constexpr (std::is_same_v<V, float>) *p = x;
    else store(p, x);
  }
  template <class V>
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static V root(V x) {
    if constexpr (std::is_same_v<V, float>) return std::sqrt(x);
    else return sqrt(x);
  }
  template <class V>
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static V larger(V a, V b) {
    if constexpr (std::is_same_v<V, float>) return a < b ? b : a;
    else return max(a, b);
  }

  template <sgd_kind Kind>
  struct sgd {
    op::sgd o;
    const float* g;
    float *s, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V lr_g = exact(get<V>(g + i) * o.learning_rate);
      if constexpr (Kind == sgd_kind::plain) {
        put(p + i, get<V>(p + i) - lr_g);
      } else {
        const V m = exact(get<V>(s + i) * o.momentum) - lr_g;
        put(s + i, m);
        if constexpr (Kind == sgd_kind::nesterov) put(p + i, get<V>(p + i) + (exact(m * o.momentum) - lr_g));
        else put(p + i, get<V>(p + i) + m);
      }
    }
  };

  /// Adam; AdamW's decay of p first (Decay); AMSGrad's running maximum of v (Amsgrad).
  template <bool Decay, bool Amsgrad>
  struct adam {
    op::adam o;
    const float* g;
    float *m, *v, *vh, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V gi = get<V>(g + i);
      V mi = get<V>(m + i), vi = get<V>(v + i), pi = get<V>(p + i);
      if constexpr (Decay) pi = exact(pi * o.decay);
      mi += exact((gi - mi) * o.one_minus_beta_1);
      vi += exact((exact(gi * gi) - vi) * o.one_minus_beta_2);
      put(m + i, mi);
      put(v + i, vi);
      if constexpr (Amsgrad) {
        vi = larger(get<V>(vh + i), vi);
        put(vh + i, vi);
      }
      put(p + i, pi - o.alpha * mi / (root(vi) + o.epsilon));
    }
  };

  template <bool Momentum, bool Centered>
  struct rmsprop {
    op::rmsprop o;
    const float* g;
    float *vel, *mom, *avg, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const float one_minus_rho = 1.0f - o.rho;
      const V gi = get<V>(g + i);
      const V vi = exact(get<V>(vel + i) * o.rho) + exact(exact(gi * one_minus_rho) * gi);
      put(vel + i, vi);
      V denom = vi;
      if constexpr (Centered) {
        const V ai = exact(get<V>(avg + i) * o.rho) + exact(gi * one_minus_rho);
        put(avg + i, ai);
        denom -= exact(ai * ai);
      }
      const V inc = gi * o.learning_rate / root(denom + o.epsilon);
      if constexpr (Momentum) {
        const V mi = exact(get<V>(mom + i) * o.momentum) + inc;
        put(mom + i, mi);
        put(p + i, get<V>(p + i) - mi);
      } else {
        put(p + i, get<V>(p + i) - inc);
      }
    }
  };

  struct adagrad {
    op::adagrad o;
    const float* g;
    float *a, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V gi = get<V>(g + i);
      const V ai = get<V>(a + i) + exact(gi * gi);
      put(a + i, ai);
      put(p + i, get<V>(p + i) - exact(gi * o.learning_rate) / root(ai + o.initial_accumulator_value + o.epsilon));
    }
  };

  struct adamax {
    op::adamax o;
    const float* g;
    float *m, *u, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V gi = get<V>(g + i);
      V mi = get<V>(m + i);
      mi += exact((gi - mi) * o.one_minus_beta_1);
      const V ui = larger(exact(get<V>(u + i) * o.beta_2), larger(gi, -gi));
      put(m + i, mi);
      put(u + i, ui);
      put(p + i, get<V>(p + i) - exact(mi * o.alpha) / (ui + o.epsilon));
    }
  };

  struct nadam {
    op::nadam o;
    const float* g;
    float *m, *v, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V gi = get<V>(g + i);
      V mi = get<V>(m + i), vi = get<V>(v + i);
      mi += exact((gi - mi) * o.one_minus_beta_1);
      vi += exact((exact(gi * gi) - vi) * o.one_minus_beta_2);
      put(m + i, mi);
      put(v + i, vi);
      const V m_hat = exact(mi * o.m_factor) + exact(gi * o.g_factor);
      put(p + i, get<V>(p + i) - exact(m_hat * o.learning_rate) / (root(exact(vi * o.v_factor)) + o.epsilon));
    }
  };

  /// (g is the parameters: p aliases it)
  template <bool Overwrite>
  struct ema {
    op::ema o;
    const float* g;
    float *a, *p;
    template <class V>
    DTRAIN_ISA_TARGET DTRAIN_ISA_OP void at(std::size_t i) const {
      const V ai = exact(get<V>(a + i) * o.momentum) + exact(get<V>(g + i) * (1.0f - o.momentum));
      put(a + i, ai);
      if constexpr (Overwrite) put(p + i, ai);
    }
  };

  /// (a sign per element: the vector part runs lane by lane, the same arithmetic)
  struct lion {
    op::lion o;
    const float* g;
    float *m, *p;
    DTRAIN_ISA_TARGET void one(std::size_t i) const {
      const float c = exact(m[i] * o.beta_1) + exact(g[i] * (1.0f - o.beta_1));
      p[i] -= c > 0.0f ? o.learning_rate : c < 0.0f ? -o.learning_rate : 0.0f;
      m[i] = exact(m[i] * o.beta_2) + exact(g[i] * (1.0f - o.beta_2));
    }
    template <class V>
    DTRAIN_ISA_TARGET void at(std::size_t i) const {
      if constexpr (std::is_same_v<V, float>) one(i);
      else for (std::size_t l = 0; l < std::size_t(lanes); ++l) one(i + l);
    }
  };
};

}  // namespace dtrain::detail::DTRAIN_ISA

#endif
