// What a training step allocates on the heap once the batch size is stable: nothing (activations, deltas,
// workspaces, gradients, optimizer slots, the step's plan and the logs it returns are the model's and
// reused). Counted by replacing this program's operator new.
#include <atomic>
#include <cstdlib>
#include <new>

#include "support/gradcheck.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0}, largest{0};

void count(std::size_t n) {
  if (!counting.load(std::memory_order_relaxed)) return;
  allocations.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t l = largest.load(); n > l && !largest.compare_exchange_weak(l, n);) {
  }
}
}  // namespace

void* operator new(std::size_t n) {
  count(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  count(n);
  const std::size_t al = std::size_t(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
// The replacements allocate with malloc, so they free with free; GCC takes the pairing for a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace dtrain;

namespace {
struct step_heap {
  std::size_t allocations, largest;
};

/// Allocations a step and the largest one, over `steps` steps after three of warm-up.
template <class Model>
step_heap count_steps(Model& m, const tensor& x, const tensor& y, int steps) {
  for (int i = 0; i < 3; ++i) m.train_step(x, y);
  allocations = 0, largest = 0;
  counting = true;
  for (int i = 0; i < steps; ++i) m.train_step(x, y);
  counting = false;
  return {allocations / std::size_t(steps), largest};
}

template <class Model>
step_heap heap_of_a_step(std::size_t batch) {
  Model m;
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  tensor x = zeros({batch, 12, 12}), y = zeros({batch});
  rng r(3);
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < batch; ++i) y(i) = float(i % 4);
  return count_steps(m, x, y, 8);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(step_allocations)

using small_cnn = sequential<input<12, 12>, reshape<12, 12, 1>, conv2d<4, 3, relu>, max_pooling2d<2>, flatten,
                             dense<16, relu>, dense<4>>;
using wide_cnn = sequential<input<12, 12>, reshape<12, 12, 1>, conv2d<32, 3, relu, padding::same>,
                            batch_normalization<>, flatten, dense<256, relu>, dropout<0.1f>, dense<4>>;

BOOST_AUTO_TEST_CASE(a_step_allocates_nothing_whatever_the_batch_or_the_model) {
  const step_heap small8 = heap_of_a_step<small_cnn>(8), small64 = heap_of_a_step<small_cnn>(64),
                  wide64 = heap_of_a_step<wide_cnn>(64);
  BOOST_TEST_MESSAGE("a step: " << small8.allocations << " allocations, the largest " << small8.largest << " bytes");
  BOOST_TEST(small8.allocations == 0u);
  BOOST_TEST(small64.allocations == 0u);
  BOOST_TEST(wide64.allocations == 0u);
}

BOOST_AUTO_TEST_CASE(the_logs_a_step_returns_follow_the_running_metrics) {
  // the logs are the model's, updated in place: a copy keeps its values, the next step changes them
  small_cnn m;
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  tensor x = zeros({8, 12, 12}), y = zeros({8});
  rng r(5);
  for (auto& v : x) v = r.normal();
  const logs first = m.train_step(x, y);
  const logs& second = m.train_step(x, y);
  BOOST_TEST(first.size() == 2u);
  BOOST_TEST(second["loss"] == m.metric_results()["loss"]);
  BOOST_TEST(second["accuracy"] == m.metric_results()["accuracy"]);
  BOOST_TEST(second["loss"] != first["loss"]);  // the running mean of two different losses
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  BOOST_TEST(m.train_step(x, y).size() == 1u);  // a new compile names the logs anew
}

BOOST_AUTO_TEST_SUITE_END()
