// comm::threads, the in-process communicator of mirrored_strategy: 1..8 ranks as threads; results equal
// a sequential reduction over ranks 0, 1, ... bitwise on every rank; broadcast, all_gather and barrier;
// and the failure paths: different collectives, a rank that never comes (named), an abort.
#include <atomic>
#include <thread>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/distribute/comm/threads.hpp>

using namespace dtrain;
using comm::threads;
using namespace std::chrono_literals;
using dtrain_test::message;

namespace {
/// Runs f(rank) on `n` threads, one per rank of a new group; returns what each threw (or null).
template <class F>
std::vector<std::exception_ptr> on_ranks(int n, F f, std::chrono::milliseconds timeout = 60s) {
  auto group = threads::make_group(n, timeout);
  std::vector<std::exception_ptr> errors(std::size_t(n), nullptr);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        f(group[std::size_t(r)]);
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

/// Rank r's input: deterministic values of mixed magnitudes (so the summation order shows).
std::vector<float> rank_input(int r, std::size_t n) {
  rng g(100 + std::uint64_t(r));
  std::vector<float> v(n);
  for (auto& x : v) x = g.normal() * (g.uniform() < 0.5f ? 1e-4f : 1e3f);
  return v;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(threads_comm)

BOOST_AUTO_TEST_CASE(all_reduce_equals_the_sequential_reduction_on_every_rank) {
  for (int n = 1; n <= 8; ++n)
    for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{65537}})
      for (reduce_op op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min}) {
        std::vector<float> expect = rank_input(0, len);
        for (int r = 1; r < n; ++r) {
          const auto v = rank_input(r, len);
          for (std::size_t j = 0; j < len; ++j)
            expect[j] = op == reduce_op::max ? std::max(expect[j], v[j]) : op == reduce_op::min ? std::min(expect[j], v[j]) : expect[j] + v[j];
        }
        if (op == reduce_op::mean)
          for (auto& x : expect) x *= 1.0f / float(n);
        std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
        const auto errors = on_ranks(n, [&](threads& c) {
          if (c.size() != n) throw std::logic_error("wrong size");
          auto v = rank_input(c.rank(), len);
          c.all_reduce_async(v, op).wait();
          got[std::size_t(c.rank())] = std::move(v);
        });
        BOOST_TEST_CONTEXT("n = " << n << ", len = " << len << ", op = " << int(op)) {
          for (int r = 0; r < n; ++r) {
            BOOST_TEST(!errors[std::size_t(r)]);
            BOOST_TEST(got[std::size_t(r)] == expect, boost::test_tools::per_element());
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(broadcast_all_gather_and_barrier) {
  // the ranks record what they saw; Boost.Test checks it on the main thread (it is not thread-safe)
  for (int n : {1, 2, 3, 7}) {
    struct seen {
      std::vector<float> broadcast, gathered;
      std::string bytes;
      int arrived_after_barrier = 0;
    };
    std::vector<seen> s(static_cast<std::size_t>(n));
    std::atomic<int> arrived{0};
    const auto errors = on_ranks(n, [&](threads& c) {
      seen& me = s[std::size_t(c.rank())];
      me.broadcast.assign(9, float(c.rank()));
      c.broadcast(me.broadcast, n - 1);
      me.bytes = c.rank() == 0 ? "from the chief" : "??????????????";
      c.broadcast(std::as_writable_bytes(std::span<char>(me.bytes)), 0);
      const std::vector<float> in{float(c.rank()), float(10 * c.rank())};
      me.gathered.resize(2 * std::size_t(n));
      c.all_gather(in, me.gathered);
      ++arrived;
      c.barrier();
      me.arrived_after_barrier = arrived.load();
    });
    std::vector<float> all;
    for (int k = 0; k < n; ++k) all.insert(all.end(), {float(k), float(10 * k)});
    for (int r = 0; r < n; ++r) {
      BOOST_TEST(!errors[std::size_t(r)]);
      BOOST_TEST(s[std::size_t(r)].broadcast == std::vector<float>(9, float(n - 1)), boost::test_tools::per_element());
      BOOST_TEST(s[std::size_t(r)].bytes == "from the chief");
      BOOST_TEST(s[std::size_t(r)].gathered == all, boost::test_tools::per_element());
      BOOST_TEST(s[std::size_t(r)].arrived_after_barrier == n);  // no rank leaves the barrier before the last arrives
    }
  }
}

BOOST_AUTO_TEST_CASE(different_collectives_fail_every_rank_alike_and_latch) {
  std::atomic<int> failed{0};
  const auto errors = on_ranks(3, [&](threads& c) {
    std::vector<float> v(c.rank() == 2 ? 5 : 4, 1.0f);
    try {
      c.all_reduce(v, reduce_op::sum);
    } catch (const comm_error&) {
      ++failed;
      c.barrier();  // latched: fails at once with the same error
    }
  });
  BOOST_TEST(failed == 3);
  for (const auto& e : errors) {
    BOOST_REQUIRE(e);
    BOOST_TEST(message(e).find("replica 2 all_reduce of 5") != std::string::npos, message(e));
  }
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_comes_is_named) {
  const auto errors = on_ranks(4, [](threads& c) {
    if (c.rank() == 2) return;  // skips the collective
    std::vector<float> v(3, 1.0f);
    c.all_reduce(v, reduce_op::sum);
  }, 200ms);
  for (int r : {0, 1, 3}) {
    BOOST_REQUIRE(errors[std::size_t(r)]);
    BOOST_TEST(message(errors[std::size_t(r)]).find("for replica(s) 2 ") != std::string::npos, message(errors[std::size_t(r)]));
  }
  BOOST_TEST(!errors[2]);
}

BOOST_AUTO_TEST_CASE(abort_releases_the_waiting_ranks) {
  const auto errors = on_ranks(3, [](threads& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(20ms);
      c.abort("replica 1 failed: bad batch");
      return;
    }
    c.barrier();
  });
  BOOST_TEST(message(errors[0]) == "replica 1 failed: bad batch");
  BOOST_TEST(message(errors[2]) == "replica 1 failed: bad batch");
  BOOST_CHECK_THROW(threads::make_group(0), value_error);
  BOOST_CHECK_THROW(threads::make_group(1)[0].broadcast(std::span<float>(), 1), value_error);
}

BOOST_AUTO_TEST_SUITE_END()
