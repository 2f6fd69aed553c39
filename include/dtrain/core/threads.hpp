#pragma once
/// \file
/// One thread budget for the whole process. OpenBLAS keeps its own pool; dtrain's own threads
/// (prefetch, communication) are counted against the same budget so the pools never fight.

#include <algorithm>
#include <cstdlib>
#include <thread>

// OpenBLAS' own controls (its cblas.h clashes with the CBLAS prototypes xtensor-blas declares).
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace dtrain {

/// Threads the math kernels may use. Defaults to `DTRAIN_NUM_THREADS`, else the hardware's cores.
inline int num_threads() { return openblas_get_num_threads(); }

/// Sets the math thread budget (at least 1).
inline void set_num_threads(int n) { openblas_set_num_threads(std::max(1, n)); }

namespace detail {
/// Applies `DTRAIN_NUM_THREADS` once, before the first model is built.
inline void apply_thread_env() {
  static const bool done = [] {
    if (const char* s = std::getenv("DTRAIN_NUM_THREADS")) {
      const int n = std::atoi(s);
      if (n > 0) set_num_threads(n);
    }
    return true;
  }();
  (void)done;
}
}  // namespace detail

}  // namespace dtrain
