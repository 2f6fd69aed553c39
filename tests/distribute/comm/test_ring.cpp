// The ring all-reduce over real loopback sockets: every world size from 1 to 8 as threads of this
// process (each rank with its own sockets), sizes that exercise empty and uneven segments and 16 MiB (many chunks),
// and the failure paths: a dead peer, a hung peer, strangers, garbage frames, latched errors. The
// correctness tests run twice: over TCP, and through shared memory (shm.hpp: every rank here is on one
// host); the shared memory's own failure paths come last, with a rank in another process that crashes.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

#include "support/loopback.hpp"

using namespace dtrain;
using comm::ring_tcp;
using namespace std::chrono_literals;
using dtrain_test::message;

using dtrain_test::free_addresses;

namespace {


struct log_sink {
  std::mutex m;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& s) {
      std::lock_guard lk(m);
      lines.push_back(s);
    };
  }
  bool contains(const std::string& needle) {
    std::lock_guard lk(m);
    for (auto& l : lines)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
};

comm::ring_tcp_options options(int rank, int p, const std::vector<std::string>& addrs, log_sink* log = nullptr) {
  comm::ring_tcp_options o{.rank = rank, .world_size = p, .addresses = addrs, .fingerprint = 0xfeed,
                           .operation_timeout = 20s, .connect_timeout = 20s, .chunk_bytes = 4096};
  o.log = log ? log->fn() : [](const std::string&) {};
  o.job_token = "";  // not from the environment: the tests that want one set it
  o.shared_memory = false;  // the TCP ring's tests; those of shared memory turn it on
  return o;
}

/// Each rank's options for a ring of p on `addrs`, through shared memory or over TCP.
std::function<comm::ring_tcp_options(int)> on_transport(int p, const std::vector<std::string>& addrs, bool shm) {
  return [p, addrs, shm](int r) {
    auto o = options(r, p, addrs);
    o.shared_memory = shm;
    return o;
  };
}

/// What ring_tcp::transport() says for each setting of shared_memory (every rank here is on one host).
const char* transport_name(bool shm) { return shm ? "shared memory" : "tcp"; }

/// Shared-memory segments that rank 0 of a ring in this process left in /dev/shm (it unlinks the name
/// as soon as every rank has mapped it).
int leftover_segments() {
  const std::string prefix = "dtrain-" + std::to_string(::getpid()) + "-";
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

/// Runs f(rank, communicator) on p threads; returns each rank's exception (or null).
template <class F>
std::vector<std::exception_ptr> run_ranks(int p, F f, std::function<comm::ring_tcp_options(int)> make = {}) {
  const auto addrs = free_addresses(p);
  return dtrain_test::run_threads(p, [&](int r) {
    ring_tcp c(make ? make(r) : options(r, p, addrs));
    f(r, c);
  });
}
void require_ok(const std::vector<std::exception_ptr>& errs) {
  for (std::size_t r = 0; r < errs.size(); ++r) BOOST_REQUIRE_MESSAGE(!errs[r], "rank " << r << ": " << message(errs[r]));
}

/// A check inside a rank's thread (Boost.Test's macros are not thread-safe): throws, and run_ranks reports it.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

/// Rank 0 of a ring with a fake rank 1, on its own thread: connects and runs one all-reduce; what it
/// throws lands in `err`.
std::thread real_rank0(comm::ring_tcp_options o, std::exception_ptr& err) {
  return std::thread([o = std::move(o), &err] {
    try {
      ring_tcp c(o);
      std::vector<float> v(100, 1.0f);
      c.all_reduce(v, reduce_op::sum);
    } catch (...) {
      err = std::current_exception();
    }
  });
}

/// Counts a rank's thread out when it ends, however it ends (the hung-peer tests' hung rank waits for it).
struct count_on_exit {
  std::atomic<int>& n;
  ~count_on_exit() { ++n; }
};

/// Small integers, so every summation order gives the same float.
float value(int rank, std::size_t i) { return float(int((i * 7 + std::size_t(rank) * 13) % 17) - 8); }

}  // namespace

BOOST_AUTO_TEST_SUITE(ring)

BOOST_AUTO_TEST_CASE(all_reduce_every_world_size_and_op) {
  for (bool shm : {false, true})
  for (int p = 1; p <= 8; ++p) {
    // 4096 floats (16 KiB) is the largest all-gathered whole, 4099 is reduce-scattered both ways round the
    // ring (3 or more ranks), 262,147 (over 1 MiB) around it
    const std::vector<std::size_t> counts{0, 1, std::size_t(p > 1 ? p - 1 : 0), std::size_t(p + 1), 4096, 4099, 262147};
    std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(p));  // [rank][case]
    const auto addrs = free_addresses(p);
    const auto errs = run_ranks(p, [&](int r, ring_tcp& c) {
      expect(c.size() == p, "size");
      expect(p == 1 || c.transport() == transport_name(shm), "transport " + c.transport());
      for (auto n : counts)
        for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min}) {
          std::vector<float> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
          c.all_reduce(v, op);
          results[std::size_t(r)].push_back(std::move(v));
        }
      expect(leftover_segments() == 0, "rank 0 unlinked the segment's name");
    }, on_transport(p, addrs, shm));
    require_ok(errs);
    std::size_t k = 0;
    for (auto n : counts)
      for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min}) {
        std::vector<float> expect(n);
        for (std::size_t i = 0; i < n; ++i) {
          float acc = value(0, i);
          for (int r = 1; r < p; ++r)
            acc = op == reduce_op::max   ? std::max(acc, value(r, i))
                  : op == reduce_op::min ? std::min(acc, value(r, i))
                                         : acc + value(r, i);
          expect[i] = op == reduce_op::mean ? acc * (1.0f / float(p)) : acc;
        }
        for (int r = 0; r < p; ++r)
          BOOST_TEST_CONTEXT(transport_name(shm) << " p=" << p << " n=" << n << " op=" << int(op) << " rank " << r) {
            BOOST_TEST(results[std::size_t(r)][k] == expect, boost::test_tools::per_element());
          }
        ++k;
      }
  }
}

BOOST_AUTO_TEST_CASE(random_values_16_mib_identical_on_every_rank) {
  const std::size_t n = std::size_t{4} << 20;  // 16 MiB of floats: 16 chunks of 1 MiB
  for (bool shm : {false, true})
  for (int p : {2, 3, 5, 8}) {
    std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
    const auto addrs = free_addresses(p);
    const auto errs = run_ranks(
        p,
        [&](int r, ring_tcp& c) {
          rng g(std::uint64_t(r) + 1);
          std::vector<float> v(n);
          for (auto& x : v) x = g.uniform(-1.0f, 1.0f);
          c.all_reduce(v, reduce_op::sum);
          out[std::size_t(r)] = std::move(v);
        },
        [&](int r) {
          auto o = options(r, p, addrs);
          o.chunk_bytes = std::size_t{1} << 20;
          o.shared_memory = shm;
          return o;
        });
    require_ok(errs);
    // serial reduction in double: the ring's float sums agree to rounding
    std::vector<rng> gens;
    for (int r = 0; r < p; ++r) gens.emplace_back(std::uint64_t(r) + 1);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (auto& g : gens) s += g.uniform(-1.0f, 1.0f);
      if (std::abs(out[0][i] - s) > 1e-5 * p) ++bad;
    }
    BOOST_TEST(bad == 0u);
    for (int r = 1; r < p; ++r) BOOST_TEST(std::memcmp(out[0].data(), out[std::size_t(r)].data(), n * 4) == 0);
  }
}

/// In 16 bits: small integers (exact in both formats, as are all their partial sums) give the exact
/// results, a mean rounded once; random values give the same bits on every rank, each a value of the
/// wire type, within the rounding of one hop per rank of the exact sum. The compressed collectives run
/// between FP32 ones (whose frames they must not confuse), over TCP and through shared memory.
template <half_float T>
void check_compressed_all_reduce(compression c, double unit_roundoff) {
  for (bool shm : {false, true})
  for (int p : {1, 2, 3, 5}) {
    // 4096 values (8 KiB) are all-gathered whole, 8193 (over 16 KiB) go round the ring, 262,147 (over
    // 512 KiB) in many frames of 4 KiB
    const std::vector<std::size_t> counts{0, 1, std::size_t(p + 1), 4096, 8193, 262147};
    const std::vector<reduce_op> ops{reduce_op::sum, reduce_op::mean, reduce_op::max};
    std::vector<std::vector<std::vector<float>>> exact(static_cast<std::size_t>(p)), noisy(static_cast<std::size_t>(p));
    const auto addrs = free_addresses(p);
    const auto errs = run_ranks(p, [&](int r, ring_tcp& c16) {
      expect(p == 1 || c16.transport() == transport_name(shm), "transport " + c16.transport());
      for (auto n : counts) {
        for (auto op : ops) {
          std::vector<float> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
          c16.all_reduce(v, op, c);
          exact[std::size_t(r)].push_back(std::move(v));
        }
        std::vector<float> fp32(n, 1.0f);
        auto h = c16.all_reduce_async(fp32, reduce_op::sum);  // an FP32 one in between
        rng g(std::uint64_t(r) + 11);
        std::vector<float> v(n);
        for (auto& x : v) x = g.uniform(-1.0f, 1.0f);
        c16.all_reduce_async(v, reduce_op::sum, c).wait();
        h.wait();
        for (float x : fp32) expect(x == float(p), "the FP32 all-reduce between the compressed ones");
        noisy[std::size_t(r)].push_back(std::move(v));
      }
    }, on_transport(p, addrs, shm));
    require_ok(errs);
    std::size_t k = 0;
    for (std::size_t ni = 0; ni < counts.size(); ++ni) {
      const std::size_t n = counts[ni];
      for (auto op : ops) {
        std::vector<float> want(n);
        for (std::size_t i = 0; i < n; ++i) {
          float acc = value(0, i);
          for (int r = 1; r < p; ++r) acc = op == reduce_op::max ? std::max(acc, value(r, i)) : acc + value(r, i);
          want[i] = op != reduce_op::mean ? acc : p > 1 ? float(T::from(acc * (1.0f / float(p)))) : acc;
        }
        for (int r = 0; r < p; ++r)
          BOOST_TEST_CONTEXT(transport_name(shm) << " p=" << p << " n=" << n << " op=" << int(op) << " rank " << r) {
            BOOST_TEST(exact[std::size_t(r)][k] == want, boost::test_tools::per_element());
          }
        ++k;
      }
      std::vector<rng> gens;
      for (int r = 0; r < p; ++r) gens.emplace_back(std::uint64_t(r) + 11);
      std::size_t bad = 0, unrounded = 0, differ = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (auto& g : gens) sum += g.uniform(-1.0f, 1.0f);
        const float got = noisy[0][ni][i];
        // every partial sum is below p in magnitude; p roundings of one unit each, and the last
        if (std::abs(double(got) - sum) > (p > 1 ? double(p + 1) * double(p) * unit_roundoff : 0.0)) ++bad;
        if (p > 1 && float(T::from(got)) != got) ++unrounded;
        for (int r = 1; r < p; ++r) differ += std::memcmp(&noisy[std::size_t(r)][ni][i], &got, 4) != 0;
      }
      BOOST_TEST_CONTEXT(transport_name(shm) << " p=" << p << " n=" << n) {
        BOOST_TEST(bad == 0u);
        BOOST_TEST(unrounded == 0u);
        BOOST_TEST(differ == 0u);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(all_reduce_in_bfloat16_and_float16) {
  check_compressed_all_reduce<bfloat16>(compression::bf16, std::ldexp(1.0, -8));
  check_compressed_all_reduce<float16>(compression::fp16, std::ldexp(1.0, -11));
}

BOOST_AUTO_TEST_CASE(a_rank_that_compresses_when_the_others_do_not_is_a_protocol_error) {
  const int p = 2;
  const auto errs = run_ranks(p, [&](int r, ring_tcp& c) {
    std::vector<float> v(100000, 1.0f);
    c.all_reduce(v, reduce_op::sum, r == 0 ? compression::bf16 : compression::none);
  });
  for (int r = 0; r < p; ++r) {
    BOOST_REQUIRE(errs[std::size_t(r)]);
    BOOST_TEST(message(errs[std::size_t(r)]).find("ring_tcp") != std::string::npos, message(errs[std::size_t(r)]));
  }
}

BOOST_AUTO_TEST_CASE(broadcast_all_gather_barrier_async) {
  for (bool shm : {false, true})
  for (int p : {1, 2, 3, 4, 7}) {
    const auto addrs = free_addresses(p);
    const auto errs = run_ranks(p, [&](int r, ring_tcp& c) {
      for (int root = 0; root < p; ++root) {
        std::vector<float> v(5000, float(r));
        c.broadcast(std::span<float>(v), root);
        for (float x : v) expect(x == float(root), "broadcast from " + std::to_string(root));
      }
      std::string text = r == 1 % p ? "the chief's bytes" : std::string(17, '?');
      c.broadcast(std::as_writable_bytes(std::span<char>(text.data(), text.size())), 1 % p);
      expect(text == "the chief's bytes", "byte broadcast");
      std::vector<float> in{float(r), float(r * 10)}, all(2 * std::size_t(p));
      c.all_gather(in, all);
      for (int q = 0; q < p; ++q) expect(all[2 * std::size_t(q) + 1] == float(q * 10), "all_gather");
      c.barrier();
      // async: two all-reduces in flight, completed in order
      std::vector<float> a(100, 1.0f), b(300, 2.0f);
      auto ha = c.all_reduce_async(a, reduce_op::sum);
      auto hb = c.all_reduce_async(b, reduce_op::sum);
      hb.wait();
      ha.wait();
      expect(a[99] == float(p) && b[0] == float(2 * p), "async all_reduce");
      bool threw = false;
      try {
        c.broadcast(std::span<float>(a), p);
      } catch (const value_error&) {
        threw = true;
      }
      expect(threw, "a root outside the world is refused");
    }, on_transport(p, addrs, shm));
    require_ok(errs);
  }
}

BOOST_AUTO_TEST_CASE(master_address_only_like_torchrun) {
  const int p = 4;
  const auto master = free_addresses(1);
  log_sink log;
  const auto errs = run_ranks(
      p,
      [&](int r, ring_tcp& c) {
        std::vector<float> v{float(r)};
        c.all_reduce(v, reduce_op::sum);
        expect(v[0] == 6.0f, "sum");
        expect(!c.address_of((r + 1) % p).empty(), "address table");
      },
      [&](int r) { return options(r, p, master, r == 0 ? &log : nullptr); });
  require_ok(errs);
  BOOST_TEST(log.contains("waiting for workers (4/4)"));
}

BOOST_AUTO_TEST_CASE(dead_peer_is_named_by_every_other_rank) {
  // rank 2 stops: its communicator closes its sockets (and, through shared memory, leaves the segment);
  // over TCP in a large all-reduce (around the ring), a mid-sized and a small one (both ways round it)
  for (const auto& [p, shm, n] : {std::tuple{4, false, 300000}, std::tuple{4, false, 10000}, std::tuple{5, false, 100},
                                  std::tuple{4, true, 100000}}) {
    const auto addrs = free_addresses(p);
    std::atomic<int> started{0};
    const auto errs = run_ranks(
        p,
        [&](int r, ring_tcp& c) {
          expect(c.transport() == transport_name(shm), "transport " + c.transport());
          std::vector<float> v(std::size_t(n), 1.0f);
          c.all_reduce(v, reduce_op::sum);
          ++started;
          if (r == 2) return;
          while (started < p) std::this_thread::yield();
          std::this_thread::sleep_for(50ms);
          c.all_reduce(v, reduce_op::sum);
        },
        on_transport(p, addrs, shm));
    BOOST_TEST(!errs[2]);
    for (int r = 0; r < p; ++r) {
      if (r == 2) continue;
      const std::string m = message(errs[std::size_t(r)]);
      BOOST_TEST_CONTEXT(transport_name(shm) << " p=" << p << " n=" << n << " rank " << r << ": " << m) {
        BOOST_TEST(m.find("rank 2 (127.0.0.1:") != std::string::npos);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(hung_peer_times_out_and_the_error_latches) {
  const int p = 3;
  const auto addrs = free_addresses(p);
  // the hung rank holds its sockets open until BOTH other ranks are done, however slowly the machine
  // runs them: released earlier, its closing sockets would be reported instead of the timeout
  std::atomic<int> finished{0};
  const auto errs = run_ranks(
      p,
      [&](int r, ring_tcp& c) {
        std::vector<float> v(100, 1.0f);
        if (r == 1) {  // hangs: never joins the collective, but keeps its sockets open
          while (finished < 2) std::this_thread::sleep_for(10ms);
          return;
        }
        count_on_exit done{finished};
        const auto t0 = std::chrono::steady_clock::now();
        try {
          c.all_reduce(v, reduce_op::sum);
        } catch (const comm_error&) {
          expect(std::chrono::steady_clock::now() - t0 < 5s, "stopped within the timeout");
          c.all_reduce(v, reduce_op::sum);  // latched: fails at once, same story
        }
      },
      [&](int r) {
        auto o = options(r, p, addrs);
        o.operation_timeout = 1s;
        return o;
      });
  // the rank after the hung one names it; rank 0 waits for rank 1's block too (a small all-reduce goes
  // both ways round the ring), or hears rank 2's report: either way it names rank 1
  const std::string m2 = message(errs[2]), m0 = message(errs[0]);
  BOOST_TEST(m2.find("waiting for rank 1 (127.0.0.1:") != std::string::npos, m2);
  BOOST_TEST(m0.find("rank 1 (127.0.0.1:") != std::string::npos, m0);
}

BOOST_AUTO_TEST_CASE(strangers_and_other_jobs_are_rejected_and_training_goes_on) {
  const int p = 2;
  const auto addrs = free_addresses(p);
  log_sink log;
  std::atomic<bool> ring_up{false};
  std::thread stranger([&] {
    // During the rendezvous: garbage, then a worker of another job (other fingerprint).
    asio::io_context io;
    for (int attempt = 0; attempt < 200; ++attempt) {
      asio::ip::tcp::socket s(io);
      std::error_code ec;
      s.connect(dtrain_test::loopback_endpoint(addrs[0]), ec);
      if (ec) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      const char garbage[32] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      asio::write(s, asio::buffer(garbage), ec);
      asio::ip::tcp::socket s2(io);
      s2.connect(dtrain_test::loopback_endpoint(addrs[0]), ec);
      comm::detail::hello h;
      h.kind = 1, h.world_size = 2, h.rank = 1, h.fingerprint = 0xbad;
      asio::write(s2, asio::buffer(&h, sizeof h), ec);
      break;
    }
  });
  const auto errs = run_ranks(
      p,
      [&](int r, ring_tcp& c) {
        std::vector<float> v(1000, 1.0f);
        c.all_reduce(v, reduce_op::sum);
        if (r == 0) {
          ring_up = true;
          // after the rendezvous: a client claiming an absurd length, then silence
          asio::io_context io;
          asio::ip::tcp::socket s(io);
          std::error_code ec;
          s.connect(dtrain_test::loopback_endpoint(addrs[1]), ec);
          comm::detail::frame_header fh;
          fh.length = 0xffffffffu;
          asio::write(s, asio::buffer(&fh, sizeof fh), ec);
        }
        for (int i = 0; i < 20; ++i) c.all_reduce(v, reduce_op::sum);
        expect(v[0] == float(1 << 21), "sums after the strangers");
      },
      [&](int r) {
        if (r == 1) std::this_thread::sleep_for(300ms);  // the strangers come first
        return options(r, p, addrs, &log);
      });
  stranger.join();
  require_ok(errs);
  BOOST_TEST(log.contains("rejected connection from 127.0.0.1"));
  BOOST_TEST(log.contains("fingerprint differs"));
}

/// Sends `h` to `address` as a stranger would; returns rank 0's answer and, when it was accepted with a
/// token, its proof (the socket stays open in `s`).
comm::detail::hello stranger_hello(asio::ip::tcp::socket& s, comm::detail::hello h, comm::detail::proof* server_proof) {
  asio::write(s, asio::buffer(&h, sizeof h));
  comm::detail::hello reply;
  asio::read(s, asio::buffer(&reply, sizeof reply));
  if (reply.accepted && server_proof) asio::read(s, asio::buffer(*server_proof));
  return reply;
}

BOOST_AUTO_TEST_CASE(a_worker_that_joined_and_vanished_before_the_rendezvous_ended_is_named) {
  // a stranger: a valid hello for rank 1 (anyone who reads TF_CONFIG can compute one), then a reset;
  // when rank 2 joins, rank 0 sends the address table: a comm_error naming rank 1, not std::terminate
  const auto addrs = free_addresses(3);
  std::exception_ptr err0, err2;
  std::thread rank0([&] {
    try {
      ring_tcp c(options(0, 3, addrs));
    } catch (...) {
      err0 = std::current_exception();
    }
  });
  asio::io_context io;
  asio::ip::tcp::socket fake = dtrain_test::connect_when_listening(io, addrs[0]);
  comm::detail::hello h;
  h.kind = 1, h.world_size = 3, h.rank = 1, h.fingerprint = 0xfeed;
  BOOST_REQUIRE(stranger_hello(fake, h, nullptr).accepted);
  fake.set_option(asio::socket_base::linger(true, 0));  // close with a reset
  fake.close();
  std::thread rank2([&] {
    try {
      ring_tcp c(options(2, 3, addrs));
    } catch (...) {
      err2 = std::current_exception();
    }
  });
  rank0.join();
  rank2.join();
  const std::string m = message(err0);
  BOOST_TEST(m.find("rank 1") != std::string::npos, m);
  BOOST_TEST(m.find("during the rendezvous") != std::string::npos, m);
  BOOST_CHECK_THROW(std::rethrow_exception(err0), comm_error);
  BOOST_CHECK_THROW(std::rethrow_exception(err2), comm_error);  // rank 2 learns that rank 0 stopped
}

/// The two connections a fake rank 1 of 2 makes with rank 0 as the real rank 1 would, of one `kind`
/// (ring or beat): it connects to rank 0, then answers rank 0's connection; with a token (`h.authenticated`)
/// both with the proofs. Also the TLS keys of both.
struct fake_connections {
  asio::ip::tcp::socket to_next, from_prev;
  comm::detail::proof next_key{}, prev_key{};
};
fake_connections fake_neighbour(asio::io_context& io, asio::ip::tcp::acceptor& own, const std::string& rank0,
                                comm::detail::hello h, comm::detail::hello_kind kind, const std::string& token = "") {
  namespace d = comm::detail;
  fake_connections c{asio::ip::tcp::socket(io), asio::ip::tcp::socket(io)};
  c.to_next.connect(dtrain_test::loopback_endpoint(rank0));
  h.kind = std::uint8_t(kind), h.nonce = d::make_nonce();
  d::proof proof{};
  const d::hello reply = stranger_hello(c.to_next, h, h.authenticated ? &proof : nullptr);
  BOOST_REQUIRE(reply.accepted);
  if (h.authenticated) {
    BOOST_REQUIRE(d::verify_proof(token, d::server_label, h, reply, proof));
    proof = d::make_proof(token, d::client_label, h, reply);
    asio::write(c.to_next, asio::buffer(proof));
    c.next_key = d::make_proof(token, d::tls_label, h, reply);
  }
  own.accept(c.from_prev);  // rank 0's connection: answered as rank 1 would
  d::hello theirs, mine = h;
  asio::read(c.from_prev, asio::buffer(&theirs, sizeof theirs));
  mine.accepted = 1, mine.nonce = d::make_nonce();
  asio::write(c.from_prev, asio::buffer(&mine, sizeof mine));
  if (h.authenticated) {
    asio::write(c.from_prev, asio::buffer(d::make_proof(token, d::server_label, theirs, mine)));
    asio::read(c.from_prev, asio::buffer(proof));
    BOOST_REQUIRE(d::verify_proof(token, d::client_label, theirs, mine, proof));
    c.prev_key = d::make_proof(token, d::tls_label, theirs, mine);
  }
  return c;
}

/// A fake rank 1 of 2 without a token: it completes the handshakes as rank 1 would; then `ring.to_next`
/// carries what it sends rank 0, `ring.from_prev` what rank 0 sends it, and `beat` the heartbeats.
struct fake_rank1 {
  asio::io_context io;
  asio::ip::tcp::acceptor own;
  asio::ip::tcp::socket join;
  fake_connections ring, beat;
  explicit fake_rank1(const std::vector<std::string>& addrs, comm::detail::hello h = hello_of_rank1())
      : own(io, dtrain_test::loopback_endpoint(addrs[1])), join(dtrain_test::connect_when_listening(io, addrs[0])),
        ring(joined(addrs, h)), beat(fake_neighbour(io, own, addrs[0], h, comm::detail::hello_kind::beat)) {}
  static comm::detail::hello hello_of_rank1() {
    comm::detail::hello h;
    h.world_size = 2, h.rank = 1, h.fingerprint = 0xfeed;
    return h;
  }

 private:
  fake_connections joined(const std::vector<std::string>& addrs, comm::detail::hello h) {
    h.kind = 1;
    BOOST_REQUIRE(stranger_hello(join, h, nullptr).accepted);
    std::vector<char> table(8 + 2 * (4 + addrs[0].size()));
    asio::read(join, asio::buffer(table));
    return fake_neighbour(io, own, addrs[0], h, comm::detail::hello_kind::ring);
  }
};

BOOST_AUTO_TEST_CASE(garbage_frame_from_a_peer_is_a_protocol_error_not_an_allocation) {
  // rank 1 is a fake that completes the handshakes, then sends a frame that claims 4 GiB
  const auto addrs = free_addresses(2);
  std::exception_ptr err;
  std::thread real = real_rank0(options(0, 2, addrs), err);
  fake_rank1 fake(addrs);
  comm::detail::frame_header bad;
  bad.seq = 1, bad.length = 0xfffffff0u;
  asio::write(fake.ring.to_next, asio::buffer(&bad, sizeof bad));
  real.join();
  const std::string m = message(err);
  BOOST_TEST(m.find("protocol error") != std::string::npos, m);
  BOOST_TEST(m.find("rank 1") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(bytes_that_are_not_heartbeats_are_named) {
  // rank 1 is a fake that completes the handshakes, then writes garbage on its heartbeat connection
  // while rank 0 waits for its data: rank 0 fails at once, naming it
  const auto addrs = free_addresses(2);
  std::exception_ptr err;
  std::thread real = real_rank0(options(0, 2, addrs), err);
  fake_rank1 fake(addrs);
  const char junk[8] = {'D', 'T', 'R', 'X', 1, 0, 0, 0};
  asio::write(fake.beat.to_next, asio::buffer(junk));
  real.join();
  const std::string m = message(err);
  BOOST_TEST(m.find("rank 1 (127.0.0.1:") != std::string::npos, m);
  BOOST_TEST(m.find("not a heartbeat") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(a_frame_changed_on_the_way_is_detected_and_named) {
  // Without TLS, one flipped bit in a frame's payload (what a faulty NIC or middlebox does, and TCP's
  // checksum can miss) fails rank 0's all-reduce, naming rank 1, before the bytes are used; and a
  // rank that sends no checksums is named as such.
  for (const bool with_checksum : {true, false}) {
    BOOST_TEST_CONTEXT("the frame carries a checksum: " << with_checksum) {
      const auto addrs = free_addresses(2);
      std::exception_ptr err;
      std::thread real = real_rank0(options(0, 2, addrs), err);
      fake_rank1 fake(addrs);
      // the first frame rank 0 takes from rank 1 after the rendezvous: collective 2 (the first is rank
      // 0's own broadcast), one float
      std::vector<float> payload(1, 1.0f);
      comm::detail::frame_header h;
      h.seq = 2, h.step = 0, h.offset = 0, h.length = std::uint32_t(payload.size() * 4);
      if (with_checksum) h.flags = comm::detail::frame_has_checksum, h.checksum = dtrain::detail::crc32c(payload.data(), h.length);
      reinterpret_cast<unsigned char*>(payload.data())[1] ^= 0x04;  // after the sender's checksum
      asio::write(fake.ring.to_next, std::array<asio::const_buffer, 2>{asio::buffer(&h, sizeof h), asio::buffer(payload)});
      real.join();
      const std::string m = message(err);
      BOOST_TEST(m.find("rank 1") != std::string::npos, m);
      BOOST_TEST(m.find(with_checksum ? "fails its CRC-32C check" : "carries no checksum") != std::string::npos, m);
    }
  }
  // the checksum itself: CRC-32C's published check value; the table form is the reference for the
  // three-stream hardware form, over lengths around its blocks and unaligned starts
  namespace d = dtrain::detail;
  BOOST_TEST(d::crc32c("123456789", 9) == 0xe3069283u);
  BOOST_TEST(d::crc32c_bytes(reinterpret_cast<const unsigned char*>("123456789"), 9, 0) == 0xe3069283u);
  BOOST_TEST(d::crc32c("3456789", 7, d::crc32c("12", 2)) == 0xe3069283u);
  std::vector<unsigned char> bytes(100'000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) & 0xff);
  for (std::size_t n : {0, 1, 7, 8, 4095, 12287, 12288, 12289, 40000, 99'990})
    for (std::size_t at : {0, 1, 3})
      BOOST_TEST(d::crc32c(bytes.data() + at, n, 5) == d::crc32c_bytes(bytes.data() + at, n, 5), "n " << n << " at " << at);
}

BOOST_AUTO_TEST_CASE(silent_connections_do_not_stall_the_rendezvous) {
  // a port scanner: 8 connections that never say a word, held open: one at a time with 5 s each they
  // would outlast the 20 s connect deadline; handshaken concurrently they cost nothing
  const int p = 3;
  const auto addrs = free_addresses(p);
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> silent;
  std::vector<std::exception_ptr> errs(p);
  std::thread rank0([&] {
    try {
      ring_tcp c(options(0, p, addrs));
      std::vector<float> v(10, 1.0f);
      c.all_reduce(v, reduce_op::sum);
      expect(v[0] == float(p), "sum with silent connections around");
    } catch (...) {
      errs[0] = std::current_exception();
    }
  });
  for (int i = 0; i < 8; ++i) silent.push_back(dtrain_test::connect_when_listening(io, addrs[0]));
  auto others = dtrain_test::run_threads(p - 1, [&](int i) {
    ring_tcp c(options(i + 1, p, addrs));
    std::vector<float> v(10, 1.0f);
    c.all_reduce(v, reduce_op::sum);
    expect(v[0] == float(p), "sum with silent connections around");
  });
  rank0.join();
  errs[1] = others[0], errs[2] = others[1];
  require_ok(errs);
}

BOOST_AUTO_TEST_CASE(handshakes_beyond_the_cap_are_closed_and_workers_retry) {
  const int p = 3;
  const auto addrs = free_addresses(p);
  log_sink log;
  auto make = [&](int r) {
    auto o = options(r, p, addrs, r == 0 ? &log : nullptr);
    o.max_pending_handshakes = 4;
    o.handshake_timeout = 500ms;
    return o;
  };
  asio::io_context io;
  std::vector<asio::ip::tcp::socket> silent;
  std::vector<std::exception_ptr> errs(p);
  std::thread rank0([&] {
    try {
      ring_tcp c(make(0));
      c.barrier();
    } catch (...) {
      errs[0] = std::current_exception();
    }
  });
  for (int i = 0; i < 6; ++i) silent.push_back(dtrain_test::connect_when_listening(io, addrs[0]));
  auto others = dtrain_test::run_threads(p - 1, [&](int i) {
    ring_tcp c(make(i + 1));
    c.barrier();
  });
  rank0.join();
  errs[1] = others[0], errs[2] = others[1];
  require_ok(errs);
  BOOST_TEST(log.contains("4 handshakes already in progress"));
  BOOST_TEST(log.contains("no handshake within 500 ms"));
}

const std::string token_a = "0123456789abcdef-job-a", token_b = "0123456789abcdef-job-b";

BOOST_AUTO_TEST_CASE(hmac_sha256_matches_rfc_4231) {
  const auto mac = comm::detail::hmac_sha256("Jefe", "what do ya want for nothing?");  // RFC 4231, test case 2
  std::string hex;
  for (auto b : mac) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  BOOST_TEST(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

BOOST_AUTO_TEST_CASE(a_job_token_authenticates_every_connection) {
  for (int p : {2, 3}) {
    const auto addrs = free_addresses(p);
    log_sink log;
    require_ok(run_ranks(
        p,
        [&](int r, ring_tcp& c) {
          std::vector<float> v(100, float(r + 1));
          c.all_reduce(v, reduce_op::sum);
          expect(v[99] == float(p * (p + 1) / 2), "sum over an authenticated ring");
        },
        [&](int r) {
          auto o = options(r, p, addrs, &log);
          o.job_token = token_a;
          return o;
        }));
    BOOST_TEST(log.contains("authenticated by the job token"));
  }
}

BOOST_AUTO_TEST_CASE(strangers_without_the_token_cannot_take_a_rank) {
  // a stranger: anyone who reads TF_CONFIG can compute a hello; without the token it cannot join
  const int p = 3;
  const auto addrs = free_addresses(p);
  log_sink log;
  auto make = [&](int r) {
    auto o = options(r, p, addrs, r == 0 ? &log : nullptr);
    o.job_token = token_a;
    return o;
  };
  std::vector<std::exception_ptr> errs(p);
  std::thread rank0([&] {
    try {
      ring_tcp c(make(0));
      std::vector<float> v(10, 1.0f);
      c.all_reduce(v, reduce_op::sum);
      expect(v[0] == float(p), "the real workers' sum");
    } catch (...) {
      errs[0] = std::current_exception();
    }
  });
  asio::io_context io;
  comm::detail::hello h;
  h.kind = 1, h.world_size = p, h.rank = 1, h.fingerprint = 0xfeed;
  {  // claims to hold a token, answers with a made-up proof
    asio::ip::tcp::socket s = dtrain_test::connect_when_listening(io, addrs[0]);
    h.authenticated = 1;
    h.nonce = comm::detail::make_nonce();
    comm::detail::proof theirs{};
    const auto reply = stranger_hello(s, h, &theirs);
    BOOST_REQUIRE(reply.accepted);
    BOOST_TEST(reply.authenticated == 1);
    // rank 0's proof is bound to this connection's hellos: it checks out with the token, not without
    BOOST_TEST(comm::detail::verify_proof(token_a, comm::detail::server_label, h, reply, theirs));
    BOOST_TEST(!comm::detail::verify_proof(token_b, comm::detail::server_label, h, reply, theirs));
    // replaying rank 0's own proof as ours fails too: the labels differ
    asio::write(s, asio::buffer(theirs));
    char byte;
    std::error_code ec;
    asio::read(s, asio::buffer(&byte, 1), ec);  // rank 0 closes it
    BOOST_TEST(bool(ec));
  }
  {  // says it has no token
    asio::ip::tcp::socket s = dtrain_test::connect_when_listening(io, addrs[0]);
    h.authenticated = 0;
    BOOST_TEST(!stranger_hello(s, h, nullptr).accepted);
  }
  auto others = dtrain_test::run_threads(p - 1, [&](int i) {
    ring_tcp c(make(i + 1));
    std::vector<float> v(10, 1.0f);
    c.all_reduce(v, reduce_op::sum);
    expect(v[0] == float(p), "the real workers' sum");
  });
  rank0.join();
  errs[1] = others[0], errs[2] = others[1];
  require_ok(errs);
  BOOST_TEST(log.contains("its proof of the job token is wrong"));
  BOOST_TEST(log.contains("it has no job token and this worker requires one"));
}

BOOST_AUTO_TEST_CASE(workers_with_different_tokens_or_tls_end_at_once_on_both_sides) {
  // Both sides end with the reason, rank 0 within its handshake timeout of the failed attempt rather
  // than at the connect deadline (300 s here: the test would hang instead of passing).
  struct mismatch {
    std::optional<std::string> token0, token1;
    bool tls0, tls1;
    std::string rank1_says, rank0_says;
  };
  for (const auto& m : {mismatch{token_a, token_b, false, false, "does not hold this job's token", "instead of proving"},
                        mismatch{token_a, "", false, false, "it holds a job token and this worker has none",
                                 "it has no job token and this worker requires one"},
                        mismatch{"", token_a, false, false, "it has no job token and this worker requires one",
                                 "it holds a job token and this worker has none"},
                        mismatch{token_a, token_a, true, false, "it encrypts the data plane and this worker does not",
                                 "it does not encrypt the data plane"}}) {
    BOOST_TEST_CONTEXT(m.rank1_says) {
      const auto addrs = free_addresses(2);
      const auto errs = run_ranks(
          2, [](int, ring_tcp&) {},
          [&](int r) {
            auto o = options(r, 2, addrs);
            o.job_token = r == 0 ? m.token0 : m.token1;
            o.tls = r == 0 ? m.tls0 : m.tls1;
            o.connect_timeout = 300s;
            o.handshake_timeout = 1s;
            return o;
          });
      BOOST_REQUIRE(errs[0] && errs[1]);
      BOOST_CHECK_THROW(std::rethrow_exception(errs[1]), config_error);  // no restart can fix this
      BOOST_TEST(message(errs[1]).find(m.rank1_says) != std::string::npos, message(errs[1]));
      BOOST_CHECK_THROW(std::rethrow_exception(errs[0]), config_error);
      BOOST_TEST(message(errs[0]).find("rank 1") != std::string::npos, message(errs[0]));
      BOOST_TEST(message(errs[0]).find(m.rank0_says) != std::string::npos, message(errs[0]));
    }
  }
}

BOOST_AUTO_TEST_CASE(tls_on_the_data_plane_gives_the_same_results) {
  // 16 MiB of values crosses many TLS records (16 KiB each) per frame; small messages many frames
  for (int p : {2, 3}) {
    const auto addrs = free_addresses(p);
    log_sink log;
    const std::size_t n = std::size_t{4} << 20;
    std::vector<std::vector<float>> sums(static_cast<std::size_t>(p));
    require_ok(run_ranks(
        p,
        [&](int r, ring_tcp& c) {
          std::vector<float> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
          c.all_reduce(v, reduce_op::sum);
          for (std::size_t i = 0; i < n; i += 4099) {
            float want = 0;
            for (int q = 0; q < p; ++q) want += value(q, i);
            expect(v[i] == want, "TLS sum at " + std::to_string(i));
          }
          std::vector<float> b(7, float(r));
          c.broadcast(b, p - 1);
          expect(b[6] == float(p - 1), "TLS broadcast");
          for (int k = 0; k < 50; ++k) c.barrier();
          sums[std::size_t(r)] = std::move(v);
        },
        [&](int r) {
          auto o = options(r, p, addrs, &log);
          o.job_token = token_a;
          o.tls = true;
          return o;
        }));
    for (int r = 1; r < p; ++r) BOOST_TEST((sums[std::size_t(r)] == sums[0]));
    BOOST_TEST(log.contains("TLS 1.3"));
  }
}

BOOST_AUTO_TEST_CASE(tls_needs_a_token_and_every_rank_agreeing) {
  auto o = options(0, 2, free_addresses(2));
  o.tls = true;
  try {
    ring_tcp c(o);
    BOOST_FAIL("expected config_error");
  } catch (const config_error& e) {
    BOOST_TEST(std::string(e.what()).find("keyed by the job token") != std::string::npos, e.what());
  }
  const auto addrs = free_addresses(2);
  const auto errs = run_ranks(
      2, [](int, ring_tcp&) {},
      [&](int r) {
        auto o = options(r, 2, addrs);
        o.job_token = token_a;
        o.tls = r == 0;
        o.connect_timeout = 1s;
        return o;
      });
  BOOST_REQUIRE(errs[1]);
  BOOST_CHECK_THROW(std::rethrow_exception(errs[1]), config_error);
  BOOST_TEST(message(errs[1]).find("it encrypts the data plane and this worker does not") != std::string::npos,
             message(errs[1]));
}

BOOST_AUTO_TEST_CASE(a_tampered_tls_record_is_a_protocol_error_naming_the_peer) {
  // rank 1 is a fake holding the token: it completes the handshakes and TLS, then writes bytes that are
  // not a valid TLS record, as someone on the path would; rank 0 must fail cleanly, naming rank 1
  namespace d = comm::detail;
  const auto addrs = free_addresses(2);
  std::exception_ptr err;
  auto o = options(0, 2, addrs);
  o.job_token = token_a, o.tls = true;
  std::thread real = real_rank0(o, err);
  asio::io_context io;
  asio::ip::tcp::acceptor own(io, dtrain_test::loopback_endpoint(addrs[1]));
  d::hello h;
  h.world_size = 2, h.rank = 1, h.fingerprint = 0xfeed, h.authenticated = 1, h.tls = 1;
  asio::ip::tcp::socket join = dtrain_test::connect_when_listening(io, addrs[0]);
  h.kind = std::uint8_t(d::hello_kind::join), h.nonce = d::make_nonce();
  d::proof theirs{};
  const d::hello reply = stranger_hello(join, h, &theirs);
  BOOST_REQUIRE(reply.accepted);
  asio::write(join, asio::buffer(d::make_proof(token_a, d::client_label, h, reply)));
  std::vector<char> table(8 + 2 * (4 + addrs[0].size()));
  asio::read(join, asio::buffer(table));
  auto ring = fake_neighbour(io, own, addrs[0], h, d::hello_kind::ring, token_a);
  auto beat = fake_neighbour(io, own, addrs[0], h, d::hello_kind::beat, token_a);
  auto& to_next = ring.to_next;
  auto& from_prev = ring.from_prev;
  d::tls_context ctx;
  d::tls_link out(ctx.get(), to_next.native_handle(), false, ring.next_key);
  d::tls_link in(ctx.get(), from_prev.native_handle(), true, ring.prev_key);
  for (bool out_done = false, in_done = false; !(out_done && in_done);) {
    short oe = 0, ie = 0;
    if (!out_done) out_done = out.handshake(oe);
    if (!in_done) in_done = in.handshake(ie);
    pollfd fds[2] = {{to_next.native_handle(), out_done ? short(0) : oe, 0}, {from_prev.native_handle(), in_done ? short(0) : ie, 0}};
    if (!(out_done && in_done)) ::poll(fds, 2, 1000);
  }
  const char junk[64] = "\x17\x03\x03\x00\x30 these bytes are not what TLS sealed";
  asio::write(to_next, asio::buffer(junk));
  real.join();
  const std::string m = message(err);
  BOOST_TEST(m.find("protocol error") != std::string::npos, m);
  BOOST_TEST(m.find("rank 1") != std::string::npos, m);
  BOOST_TEST(m.find("failed TLS") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(job_token_from_the_environment) {
  struct restore {
    ~restore() { ::unsetenv("DTRAIN_JOB_TOKEN"), ::unsetenv("DTRAIN_JOB_TOKEN_FILE"); }
  } guard;
  BOOST_TEST(comm::job_token_from_environment() == "");
  ::setenv("DTRAIN_JOB_TOKEN", (token_a + "\n").c_str(), 1);
  BOOST_TEST(comm::job_token_from_environment() == token_a);
  const auto file = std::filesystem::temp_directory_path() / "dtrain_test_job_token";
  std::ofstream(file) << token_b << "\n";
  ::setenv("DTRAIN_JOB_TOKEN_FILE", file.c_str(), 1);
  BOOST_CHECK_THROW(comm::job_token_from_environment(), config_error);  // both set
  ::unsetenv("DTRAIN_JOB_TOKEN");
  BOOST_TEST(comm::job_token_from_environment() == token_b);
  std::ofstream(file) << "";
  BOOST_CHECK_THROW(comm::job_token_from_environment(), config_error);  // empty file
  std::filesystem::remove(file);
  BOOST_CHECK_THROW(comm::job_token_from_environment(), config_error);  // missing file
  ::setenv("DTRAIN_JOB_TOKEN_FILE", std::filesystem::temp_directory_path().c_str(), 1);
  BOOST_CHECK_THROW(comm::job_token_from_environment(), config_error);  // a directory
  ::unsetenv("DTRAIN_JOB_TOKEN_FILE");
  ::setenv("DTRAIN_JOB_TOKEN", "short", 1);
  BOOST_CHECK_THROW(comm::job_token_from_environment(), config_error);
}

BOOST_AUTO_TEST_CASE(no_token_off_loopback_warns_or_is_refused) {
  log_sink log;
  auto o = options(0, 2, {"192.0.2.1:29500", "192.0.2.2:29500"}, &log);  // TEST-NET-1: never this machine
  o.job_token = "";
  o.connect_timeout = 100ms;
  o.require_job_token = true;
  try {
    ring_tcp c(o);
    BOOST_FAIL("expected config_error");
  } catch (const config_error& e) {
    BOOST_TEST(std::string(e.what()).find("DTRAIN_JOB_TOKEN") != std::string::npos, e.what());
  }
  o.require_job_token = false;
  BOOST_CHECK_THROW(ring_tcp{o}, comm_error);  // cannot listen on 192.0.2.1 (or nobody comes), but warned first
  BOOST_TEST(log.contains("warning: rank 0 has no job token"));
  log_sink quiet;
  auto local = options(1, 2, free_addresses(2), &quiet);
  local.connect_timeout = 100ms;
  BOOST_CHECK_THROW(ring_tcp{local}, comm_error);
  BOOST_TEST(!quiet.contains("warning"));
}

BOOST_AUTO_TEST_CASE(bad_options_and_unreachable_cluster) {
  BOOST_CHECK_THROW(ring_tcp(options(2, 2, free_addresses(2))), config_error);
  BOOST_CHECK_THROW(ring_tcp(options(0, 3, free_addresses(2))), config_error);
  auto o = options(1, 2, {"127.0.0.1:1", "127.0.0.1:not-a-port"});
  BOOST_CHECK_THROW(ring_tcp{o}, config_error);
  // nobody at rank 0's address: a clear timeout, not a hang
  auto lonely = options(1, 2, free_addresses(2));
  lonely.connect_timeout = 300ms;
  try {
    ring_tcp c(lonely);
    BOOST_FAIL("expected comm_error");
  } catch (const comm_error& e) {
    BOOST_TEST(std::string(e.what()).find("could not reach rank 0") != std::string::npos, e.what());
  }
}

// ---- shared memory: every rank on one host ---------------------------------------------------------------

comm::ring_tcp_options shm_options(int r, int p, const std::vector<std::string>& addrs) {
  auto o = options(r, p, addrs);
  o.shared_memory = true;
  return o;
}

BOOST_AUTO_TEST_CASE(shared_memory_only_when_every_rank_wants_it) {
  // one rank turned it off (as DTRAIN_SHM=0 does): the whole ring stays on TCP and the sums are right.
  // Rank 0 off is also what a rank 0 that cannot create the segment (no room in /dev/shm) does.
  const int p = 3;
  for (int off : {0, 1}) {
    const auto addrs = free_addresses(p);
    require_ok(run_ranks(
        p,
        [&](int r, ring_tcp& c) {
          expect(c.transport() == "tcp", "rank " + std::to_string(r) + " uses " + c.transport());
          std::vector<float> v(50000, float(r + 1));
          c.all_reduce(v, reduce_op::sum);
          expect(v.front() == 6.0f && v.back() == 6.0f, "sum over TCP");
        },
        [&](int r) {
          auto o = shm_options(r, p, addrs);
          o.shared_memory = r != off;
          return o;
        }));
  }
}

BOOST_AUTO_TEST_CASE(shared_memory_a_crashed_process_is_named_by_every_other_rank) {
  // rank 2 runs in a child process killed by SIGKILL after the first all-reduce: nothing of its own
  // runs, only the kernel closes its sockets. Its neighbours (1 and 3) see that and publish it in the
  // segment; rank 0, which is not its neighbour, learns it there.
  const int p = 4;
  const auto addrs = free_addresses(p);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    try {
      ring_tcp c(shm_options(2, p, addrs));
      std::vector<float> v(100000, 1.0f);
      c.all_reduce(v, reduce_op::sum);
      if (c.transport() != "shared memory") ::_exit(3);
      ::raise(SIGKILL);  // with `c` alive: no destructor runs
    } catch (...) {
    }
    ::_exit(2);
  }
  std::vector<std::exception_ptr> errs(p);
  std::vector<std::thread> ts;
  for (int r : {0, 1, 3})
    ts.emplace_back([&, r] {
      try {
        ring_tcp c(shm_options(r, p, addrs));
        std::vector<float> v(100000, 1.0f);
        c.all_reduce(v, reduce_op::sum);
        c.all_reduce(v, reduce_op::sum);  // rank 2 never comes
      } catch (...) {
        errs[std::size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL), "child status " << status);
  for (int r : {0, 1, 3}) {
    const std::string m = message(errs[std::size_t(r)]);
    BOOST_TEST_CONTEXT("rank " << r << ": " << m) {
      BOOST_TEST(m.find("rank 2 (127.0.0.1:") != std::string::npos);
      BOOST_CHECK_THROW(std::rethrow_exception(errs[std::size_t(r)]), comm_error);
    }
  }
  // rank 0 has no connection to rank 2: only a neighbour's report through the segment can name it
  BOOST_TEST(message(errs[0]).find("reported through shared memory by rank ") != std::string::npos, message(errs[0]));
}

BOOST_AUTO_TEST_CASE(shared_memory_hung_peer_times_out_naming_it_and_the_error_latches) {
  const int p = 3;
  const auto addrs = free_addresses(p);
  std::atomic<int> finished{0};
  std::vector<std::string> second(p);
  const auto errs = run_ranks(
      p,
      [&](int r, ring_tcp& c) {
        std::vector<float> v(100, 1.0f);
        if (r == 1) {  // hangs: never joins the collective, keeps its sockets and the segment
          while (finished < 2) std::this_thread::sleep_for(10ms);
          return;
        }
        count_on_exit done{finished};
        try {
          c.all_reduce(v, reduce_op::sum);
        } catch (const comm_error& first) {
          try {
            c.all_reduce(v, reduce_op::sum);  // latched: fails at once, same story
          } catch (const comm_error& again) {
            second[std::size_t(r)] = again.what();
          }
          throw;
        }
      },
      [&](int r) {
        auto o = shm_options(r, p, addrs);
        o.operation_timeout = 1s;
        return o;
      });
  BOOST_TEST(!errs[1]);
  for (int r : {0, 2}) {
    const std::string m = message(errs[std::size_t(r)]);
    BOOST_TEST_CONTEXT("rank " << r << ": " << m) {
      // the first to time out names rank 1; the other may hear it from that one first
      BOOST_TEST((m.find("waiting for rank 1 (127.0.0.1:") != std::string::npos ||
                  (m.find("rank 1 (127.0.0.1:") != std::string::npos && m.find("reported through shared memory") != std::string::npos)));
      BOOST_TEST(second[std::size_t(r)] == m);
    }
  }
}

// ---- heartbeats: liveness apart from slowness ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_slow_worker_is_waited_for_and_a_stopped_or_killed_one_is_named) {
  // Rank 2 runs in a child process. First rank 0 holds back from the first all-reduce for four heartbeat
  // timeouts (a chief saving a checkpoint) with no operation timeout, the default: the others wait and
  // the sums are right. Then rank 2 stops (SIGSTOP freezes its process, heartbeats included, and leaves
  // its sockets open: nothing but the heartbeat can tell) or is killed; ranks 0 and 1 name it. An
  // operation timeout of 120 s stands behind only so that a broken heartbeat fails this test, not hangs it.
  for (const bool shm : {false, true})
    for (const int sig : {SIGSTOP, SIGKILL}) {
      BOOST_TEST_CONTEXT(transport_name(shm) << ", rank 2 gets signal " << sig) {
        const int p = 3;
        const auto addrs = free_addresses(p);
        const auto opts = [&](int r) {
          auto o = options(r, p, addrs);
          o.shared_memory = shm, o.operation_timeout = 120s, o.heartbeat_timeout = 500ms;
          return o;
        };
        const pid_t child = ::fork();
        BOOST_REQUIRE(child >= 0);
        if (child == 0) {
          try {
            ring_tcp c(opts(2));
            std::vector<float> v(1000, 1.0f);
            c.all_reduce(v, reduce_op::sum);
            if (v[0] != 3.0f || c.transport() != transport_name(shm)) ::_exit(3);
            ::raise(sig);
          } catch (...) {
          }
          ::_exit(2);
        }
        std::vector<std::exception_ptr> errs(2);
        std::vector<float> first(2);
        std::vector<std::thread> ts;
        for (int r : {0, 1})
          ts.emplace_back([&, r] {
            try {
              ring_tcp c(opts(r));
              std::vector<float> v(1000, 1.0f);
              if (r == 0) std::this_thread::sleep_for(2s);  // slow, alive: its heartbeats go on
              c.all_reduce(v, reduce_op::sum);
              first[std::size_t(r)] = v[0];
              c.all_reduce(v, reduce_op::sum);  // rank 2 never comes
            } catch (...) {
              errs[std::size_t(r)] = std::current_exception();
            }
          });
        for (auto& t : ts) t.join();
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL), "child status " << status);
        bool heard_silence = false;
        for (int r : {0, 1}) {
          const std::string m = message(errs[std::size_t(r)]);
          BOOST_TEST_CONTEXT("rank " << r << ": " << m) {
            BOOST_TEST(first[std::size_t(r)] == 3.0f);  // the slow rank was waited for
            BOOST_TEST(m.find("rank 2 (127.0.0.1:") != std::string::npos);
            BOOST_CHECK_THROW(std::rethrow_exception(errs[std::size_t(r)]), comm_error);
            BOOST_TEST(m.find("timed out") == std::string::npos);
          }
          BOOST_TEST_MESSAGE("rank " << r << ": " << m);
          heard_silence |= m.find("sent no heartbeat for 500 ms: its host acknowledges, so the process is stopped") != std::string::npos;
        }
        // a stopped process is found by its silence (by one rank at least: the other may hear it from that one)
        if (sig == SIGSTOP) BOOST_TEST(heard_silence, message(errs[0]) << " | " << message(errs[1]));
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()
