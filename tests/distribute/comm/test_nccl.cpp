// comm::nccl's code (basic_nccl) on the emulated NCCL and cuda_emulated devices: 1..4 workers as threads
// of this process, each with its own TCP ring on loopback that hands NCCL's id out. Device collectives
// equal the sequential reduction bitwise on every rank; host collectives take the ring; with
// implementation ring device memory is refused. Failure paths: a dead worker is named within the
// timeout, different collectives fail every rank, the first error latches. The local group
// (mirrored_strategy's): 1..4 devices, grouped calls, a missing replica, an abort.
#include <atomic>
#include <map>
#include <thread>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/distribute/comm/nccl_emulated.hpp>

#include "support/loopback.hpp"

using namespace dtrain;
using comm::nccl_emulated;
using namespace std::chrono_literals;
using dtrain_test::message;

namespace {

using dspan = device_span<float, cuda_emulated>;

/// Rank r's input: deterministic values of mixed magnitudes (so the summation order shows).
std::vector<float> rank_input(int r, std::size_t n) {
  rng g(300 + std::uint64_t(r));
  std::vector<float> v(n);
  for (auto& x : v) x = g.normal() * (g.uniform() < 0.5f ? 1e-4f : 1e3f);
  return v;
}
std::vector<float> reduce_sequentially(int p, std::size_t n, reduce_op op) {
  std::vector<float> acc = rank_input(0, n);
  for (int r = 1; r < p; ++r) dtrain::detail::reduce_into(acc.data(), rank_input(r, n).data(), n, op);
  if (op == reduce_op::mean)
    for (auto& x : acc) x *= 1.0f / float(p);
  return acc;
}

/// Runs f(rank, communicator) on p threads, each joining a loopback job with its own cuda_emulated
/// device; returns what each threw.
template <class F>
std::vector<std::exception_ptr> on_ranks(int p, F f, communication_options o = {.timeout = 20s, .connect_timeout = 20s}) {
  const auto addrs = dtrain_test::free_addresses(p);
  return dtrain_test::run_threads(p, [&](int r) {
    comm::ring_tcp_options ring{.rank = r, .world_size = p, .addresses = addrs, .fingerprint = 7,
                          .operation_timeout = o.timeout, .connect_timeout = o.connect_timeout};
    ring.log = [](const std::string&) {};
    ring.job_token = "";
    nccl_emulated c(ring, cuda_emulated(r % cuda_emulated::device_count(), {}), o);
    f(r, c);
  });
}

/// A device buffer holding `v`, and its contents back.
struct on_device {
  cuda_emulated d;
  buffer_t<cuda_emulated, float> b;
  on_device(const cuda_emulated& dev, const std::vector<float>& v) : d(dev), b(dtrain_test::upload(dev, v)) {}
  dspan span() { return {d, b.data(), b.size()}; }
  std::vector<float> host() { return dtrain_test::download(d, b); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(nccl)

BOOST_AUTO_TEST_CASE(device_collectives_equal_the_sequential_ones_on_every_rank) {
  for (int p = 1; p <= 4; ++p) {
    const std::vector<std::size_t> lengths{0, 1, 1000};
    std::vector<std::vector<std::vector<float>>> got(static_cast<std::size_t>(p));  // [rank][case]
    const auto errors = on_ranks(p, [&](int r, nccl_emulated& c) {
      if (c.size() != p || c.rank() != r || !c.device_data_plane()) throw std::logic_error("wrong rank, size or plane");
      const cuda_emulated& dev = c.device();
      auto& mine = got[std::size_t(r)];
      for (std::size_t n : lengths)
        for (reduce_op op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min}) {
          on_device v(dev, rank_input(r, n));
          auto h = c.all_reduce_async(v.span(), op);
          h.wait();
          mine.push_back(v.host());
        }
      on_device b(dev, std::vector<float>(5, float(r)));
      c.broadcast(b.span(), p - 1);
      mine.push_back(b.host());
      on_device in(dev, {float(r), float(10 * r)}), out(dev, std::vector<float>(2 * std::size_t(p)));
      c.all_gather(in.span(), out.span());
      mine.push_back(out.host());
      std::vector<float> host{float(r + 1)};  // host memory: over the TCP ring
      c.all_reduce(host, reduce_op::sum);
      mine.push_back(host);
      c.barrier();
    });
    BOOST_TEST_CONTEXT("p = " << p) {
      std::vector<float> gathered;
      for (int k = 0; k < p; ++k) gathered.insert(gathered.end(), {float(k), float(10 * k)});
      for (int r = 0; r < p; ++r) {
        BOOST_TEST(!errors[std::size_t(r)], message(errors[std::size_t(r)]));
        const auto& mine = got[std::size_t(r)];
        BOOST_REQUIRE_EQUAL(mine.size(), lengths.size() * 4 + 3);
        std::size_t k = 0;
        for (std::size_t n : lengths)
          for (reduce_op op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min})
            BOOST_TEST(mine[k++] == reduce_sequentially(p, n, op), boost::test_tools::per_element());
        BOOST_TEST(mine[k++] == std::vector<float>(5, float(p - 1)), boost::test_tools::per_element());
        BOOST_TEST(mine[k++] == gathered, boost::test_tools::per_element());
        BOOST_TEST(mine[k++] == std::vector<float>{float(p * (p + 1) / 2)}, boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(implementation_ring_keeps_device_memory_off_nccl) {
  std::atomic<int> refused{0};
  const auto errors = on_ranks(
      2,
      [&](int r, nccl_emulated& c) {
        if (c.device_data_plane()) throw std::logic_error("implementation ring opened NCCL");
        on_device v(c.device(), {1.0f});
        try {
          c.all_reduce(v.span(), reduce_op::sum);
        } catch (const usage_error&) {
          ++refused;
        }
        std::vector<float> host{float(r)};
        c.all_reduce(host, reduce_op::sum);  // the ring still works
        if (host[0] != 1.0f) throw std::logic_error("the ring's sum is wrong");
      },
      {.implementation = communication_options::implementation_type::ring, .timeout = 20s, .connect_timeout = 20s});
  for (const auto& e : errors) BOOST_TEST(!e, message(e));
  BOOST_TEST(refused == 2);
}

BOOST_AUTO_TEST_CASE(a_worker_that_died_is_named_and_the_error_latches) {
  // worker 2 joins, then goes (its ring closes, its NCCL communicator is freed) without its part of the
  // all-reduce: the others give up after the timeout, abort NCCL and learn from the ring who it was
  std::vector<std::string> first(3), later(3);
  const auto errors = on_ranks(
      3,
      [&](int r, nccl_emulated& c) {
        if (r == 2) return;
        on_device v(c.device(), {1.0f, 2.0f});
        try {
          c.all_reduce(v.span(), reduce_op::sum);
        } catch (const comm_error& e) {
          first[std::size_t(r)] = e.what();
        }
        try {
          std::vector<float> host{1.0f};
          c.all_reduce(host, reduce_op::sum);  // the host plane rethrows it too
        } catch (const comm_error& e) {
          later[std::size_t(r)] = e.what();
        }
      },
      {.timeout = 1s, .connect_timeout = 20s});
  for (int r : {0, 1}) {
    BOOST_TEST_CONTEXT("rank " << r << ": " << first[std::size_t(r)]) {
      BOOST_TEST(!errors[std::size_t(r)]);
      BOOST_TEST(first[std::size_t(r)].find("all_reduce did not complete within 1000 ms") != std::string::npos);
      BOOST_TEST(first[std::size_t(r)].find("rank 2 (127.0.0.1:") != std::string::npos);  // named by the ring
      BOOST_TEST(later[std::size_t(r)] == first[std::size_t(r)]);
    }
  }
}

BOOST_AUTO_TEST_CASE(different_collectives_fail_every_rank) {
  std::vector<std::string> seen(3);
  const auto errors = on_ranks(3, [&](int r, nccl_emulated& c) {
    on_device v(c.device(), std::vector<float>(r == 1 ? 5 : 4, 1.0f));
    try {
      c.all_reduce(v.span(), reduce_op::sum);
    } catch (const comm_error& e) {
      seen[std::size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(!errors[std::size_t(r)], message(errors[std::size_t(r)]));
    BOOST_TEST(seen[std::size_t(r)].find("different collectives: rank 0 all_reduce of 4 (arg 0), rank 1 all_reduce of 5") !=
                   std::string::npos,
               seen[std::size_t(r)]);
  }
}

BOOST_AUTO_TEST_CASE(a_traced_rank_records_each_device_collective_with_its_bytes) {
  for (int p : {2, 3}) {
    std::vector<trace::recording> traces(static_cast<std::size_t>(p));
    const auto errors = on_ranks(p, [&](int r, nccl_emulated& c) {
      trace::start();
      on_device v(c.device(), rank_input(r, 300));
      c.all_reduce_async(v.span(), reduce_op::sum).wait();
      c.broadcast(v.span(), 0);
      traces[std::size_t(r)] = trace::stop();
    });
    BOOST_TEST_CONTEXT("p = " << p) {
      for (int r = 0; r < p; ++r) {
        BOOST_TEST(!errors[std::size_t(r)], message(errors[std::size_t(r)]));
        std::map<std::string, std::int64_t> seen;  // name -> bytes
        for (const auto& e : traces[std::size_t(r)].events)
          if (std::string_view(e.category) == "comm") seen[e.name] = e.bytes;
        BOOST_TEST(seen.count("all_reduce") == 1u);
        BOOST_TEST(seen["all_reduce"] == 1200);  // 300 floats
        BOOST_TEST(seen.count("all_reduce (wait)") == 1u);
        BOOST_TEST(seen.count("broadcast") == 1u);
        BOOST_TEST(seen.count("broadcast (wait)") == 1u);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_local_group_sums_every_device_in_one_group) {
  const int saved = emulated_runtime::devices;
  emulated_runtime::devices = 4;
  for (int n = 1; n <= 4; ++n) {
    std::vector<cuda_emulated> devices;
    for (int d = 0; d < n; ++d) devices.emplace_back(d, cuda_options{});
    auto group = nccl_emulated::make_local_group(devices, 20s);
    BOOST_REQUIRE_EQUAL(group.size(), std::size_t(n));
    std::vector<std::vector<float>> sums(static_cast<std::size_t>(n)), roots(static_cast<std::size_t>(n));
    std::vector<std::size_t> traced(static_cast<std::size_t>(n));
    const auto errors = dtrain_test::run_threads(n, [&](int r) {
      on_device v(devices[std::size_t(r)], rank_input(r, 777));
      trace::start();  // each replica's collective is a slice of its trace, with its bytes
      group[std::size_t(r)].all_reduce(v.span(), reduce_op::sum);
      for (const auto& e : trace::stop().events)
        traced[std::size_t(r)] += std::string_view(e.category) == "comm" && e.name == "all_reduce" && e.bytes == 777 * 4;
      sums[std::size_t(r)] = v.host();
      on_device b(devices[std::size_t(r)], std::vector<float>(3, float(r)));
      group[std::size_t(r)].broadcast(b.span(), n - 1);
      roots[std::size_t(r)] = b.host();
    });
    BOOST_TEST_CONTEXT("devices = " << n) {
      for (int r = 0; r < n; ++r) {
        BOOST_TEST(!errors[std::size_t(r)], message(errors[std::size_t(r)]));
        BOOST_TEST(sums[std::size_t(r)] == reduce_sequentially(n, 777, reduce_op::sum), boost::test_tools::per_element());
        BOOST_TEST(roots[std::size_t(r)] == std::vector<float>(3, float(n - 1)), boost::test_tools::per_element());
        BOOST_TEST(traced[std::size_t(r)] == 1u);
      }
    }
  }
  emulated_runtime::devices = saved;
}

BOOST_AUTO_TEST_CASE(a_replica_that_never_comes_or_aborts_fails_the_local_group) {
  const std::vector<cuda_emulated> devices{cuda_emulated(0, {}), cuda_emulated(1, {})};
  {
    auto group = nccl_emulated::make_local_group(devices, 200ms);
    const auto errors = dtrain_test::run_threads(2, [&](int r) {
      if (r == 1) return;  // skips the collective
      on_device v(devices[0], {1.0f});
      group[0].all_reduce(v.span(), reduce_op::sum);
    });
    BOOST_TEST(message(errors[0]).find("waited 200 ms in barrier for replica(s) 1") != std::string::npos, message(errors[0]));
  }
  auto group = nccl_emulated::make_local_group(devices, 20s);
  const auto errors = dtrain_test::run_threads(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(20ms);
      return group[1].abort("replica 1 failed: bad batch");
    }
    on_device v(devices[0], {1.0f});
    group[0].all_reduce(v.span(), reduce_op::sum);
  });
  BOOST_TEST(message(errors[0]) == "replica 1 failed: bad batch");
  BOOST_CHECK_THROW(nccl_emulated::make_local_group({}, 1s), value_error);
}

BOOST_AUTO_TEST_SUITE_END()
