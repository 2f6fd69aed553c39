#pragma once
/// \file
/// One thread budget for the whole process, and dtrain's pool that uses it. Where a program links
/// OpenBLAS, dtrain runs it on one thread and splits the large GEMMs itself (see `cpu::gemm`): two pools
/// on the same cores fight (an idle OpenBLAS thread spins for a while after each call, and takes the
/// core a dtrain worker needed), which on a 2-core machine halves some steps at random.
///
/// `detail::parallel_for` splits a loop (GEMM blocks, the optimizers' updates) over the budget with a
/// small persistent pool: `num_threads() - 1` workers that poll for 100 us after a job (the next one of a
/// training step usually comes sooner, and waking a sleeping thread can cost more than the job), then
/// sleep on a futex. The caller runs the first chunk itself.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "dtrain/core/environment.hpp"

// OpenBLAS' own controls, declared here (dtrain includes no BLAS header, see backend/cpu/blas.hpp) and
// weak: with another BLAS (BLA_VENDOR), or none, they are absent, and dtrain goes on without them.
extern "C" {
__attribute__((weak)) void openblas_set_num_threads(int num_threads);
__attribute__((weak)) int openblas_get_num_threads(void);
}

namespace dtrain {

namespace detail {
/// The budget: `DTRAIN_NUM_THREADS` when set, else OpenBLAS' own count where it is linked
/// (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, else the cores), else (another BLAS, or none) the cores.
/// Read once, on first use; OpenBLAS is then kept on one thread (another BLAS keeps its own threading:
/// set it to one thread yourself).
inline std::atomic<int>& thread_budget() {
  static std::atomic<int> budget{[] {
    int n = openblas_get_num_threads ? openblas_get_num_threads() : int(std::thread::hardware_concurrency());
    if (const std::string s = environment::get(environment::num_threads); std::atoi(s.c_str()) > 0) n = std::atoi(s.c_str());
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    return std::max(1, n);
  }()};
  return budget;
}
}  // namespace detail

namespace detail {
/// This thread's own budget, when set (> 0): a replica thread of `mirrored_strategy` gets its share of
/// the process budget, so the replicas neither fight over the pool nor depend on who got it.
inline int& thread_budget_override() {
  thread_local int n = 0;
  return n;
}
}  // namespace detail

/// Threads the math kernels may use. Defaults to `DTRAIN_NUM_THREADS`, else the hardware's cores.
inline int num_threads() {
  const int own = detail::thread_budget_override();
  return own > 0 ? own : detail::thread_budget().load(std::memory_order_relaxed);
}

/// Sets the math thread budget (at least 1); it wins over `DTRAIN_NUM_THREADS`.
inline void set_num_threads(int n) { detail::thread_budget().store(std::max(1, n), std::memory_order_relaxed); }

namespace detail {
/// The CPU's spin-wait hint.
inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
/// Whether `ready()` becomes true within `time`, polling (the clock read only every 64 polls): for
/// waits that usually end within microseconds, where sleeping and being woken costs more.
template <class Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds time) {
  const auto until = std::chrono::steady_clock::now() + time;
  for (unsigned spins = 1;; ++spins) {
    if (ready()) return true;
    if (spins % 64 == 0 && std::chrono::steady_clock::now() >= until) return ready();
    cpu_pause();
  }
}

/// Reads the budget (and so `DTRAIN_NUM_THREADS`) before the first model is built.
inline void apply_thread_env() { (void)thread_budget(); }

/// The process' pool of helper threads (created on first use, grown up to `num_threads() - 1`).
class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool pool;
    return pool;
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
  }

  /// Calls `f(begin, end)` on `parts` contiguous chunks covering [0, n), each but the last a multiple of
  /// `align` long; chunk 0 on the calling thread, the others on workers. Returns when all are done.
  /// One job at a time: a call made while another thread's job holds the pool (a parallel map on the
  /// prefetch thread, in-process replicas) runs all of [0, n) on its own thread. Every caller computes
  /// the same however [0, n) is split, so results never depend on which happened.
  template <class F>
  void run(std::size_t n, std::size_t parts, std::size_t align, F& f) {
    parts = std::min<std::size_t>(parts, max_parts);
    if (parts <= 1 || n == 0 || busy_.exchange(true, std::memory_order_acquire)) {
      f(std::size_t{0}, n);  // one part, or another thread's job holds the pool: run it all here
      return;
    }
    grow(parts - 1);
    std::size_t chunk = (n + parts - 1) / parts;
    chunk = (chunk + align - 1) / align * align;
    fn_ = [](void* ctx, std::size_t b, std::size_t e) { (*static_cast<F*>(ctx))(b, e); };
    ctx_ = &f;
    n_ = n;
    chunk_ = chunk;
    parts_ = parts;
    // every worker acknowledges every job (those without a chunk too), so none still reads this job's
    // fields when the next job writes them
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    f(std::size_t{0}, std::min(chunk, n));
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;)
      if (++spins > 64) {
        const int p = pending_.load(std::memory_order_acquire);
        if (p != 0) pending_.wait(p, std::memory_order_acquire);
      }
    busy_.store(false, std::memory_order_release);
  }

  static constexpr std::size_t max_parts = 64;

 private:
  thread_pool() = default;

  void grow(std::size_t want) {
    while (workers_.size() < want) {
      const std::size_t index = workers_.size() + 1;  // the chunk this worker runs
      const std::uint64_t seen = generation_.load(std::memory_order_relaxed);
      workers_.emplace_back([this, index, seen] { loop(index, seen); });
    }
  }

  void loop(std::size_t index, std::uint64_t seen) {
    for (;;) {
      // Jobs of a training step come every few hundred microseconds: poll a little before sleeping, as
      // waking a sleeping thread (on a VM: a halted virtual CPU) can cost more than the job.
      const auto poll_until = std::chrono::steady_clock::now() + spin_time();
      while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < poll_until)
        cpu_pause();
      generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (index < parts_) {
        const std::size_t b = std::min(index * chunk_, n_), e = std::min(b + chunk_, n_);
        if (b < e) fn_(ctx_, b, e);
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  static constexpr std::chrono::microseconds spin_time() { return std::chrono::microseconds(100); }

  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  void (*fn_)(void*, std::size_t, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::size_t n_ = 0, chunk_ = 0, parts_ = 0;
};

/// Runs `f(begin, end)` over [0, n) split across the thread budget (`num_threads()`), in chunks of at
/// least `grain` elements (so small loops stay on the calling thread), chunk boundaries multiples of
/// `align`. `f` must not throw, and must compute the same thing however [0, n) is split.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& f, std::size_t align = 16) {
  const std::size_t budget = static_cast<std::size_t>(std::max(1, num_threads()));
  const std::size_t parts = std::min(budget, std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1)));
  thread_pool::instance().run(n, parts, align, f);
}

}  // namespace detail

}  // namespace dtrain
