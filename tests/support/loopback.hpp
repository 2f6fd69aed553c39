#pragma once
// Loopback clusters for ring tests: n free addresses "127.0.0.1:port" (all bound at once, then
// released), and p workers run as threads, each with its own strategy and sockets.
#include <asio.hpp>
#include <boost/test/unit_test.hpp>

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dtrain/distribute/comm/ring_tcp.hpp>
#include <dtrain/distribute/strategy.hpp>

namespace dtrain_test {

inline std::vector<std::string> free_addresses(int n) {
  asio::io_context io;
  std::vector<asio::ip::tcp::acceptor> hold;
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    hold.emplace_back(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    out.push_back("127.0.0.1:" + std::to_string(hold.back().local_endpoint().port()));
  }
  return out;
}

/// Runs `f(rank)` on p threads; returns each thread's exception (or null) once all are done.
template <class F>
std::vector<std::exception_ptr> run_threads(int p, F f) {
  std::vector<std::exception_ptr> errs(static_cast<std::size_t>(p));
  std::vector<std::thread> ts;
  for (int r = 0; r < p; ++r)
    ts.emplace_back([&, r] {
      try {
        f(r);
      } catch (...) {
        errs[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  return errs;
}

/// The loopback endpoint of `address` ("127.0.0.1:port").
inline asio::ip::tcp::endpoint loopback_endpoint(const std::string& address) {
  return {asio::ip::make_address("127.0.0.1"), static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)))};
}

/// A socket connected to `address` ("127.0.0.1:port"), retried for up to 2 s while nothing listens yet.
inline asio::ip::tcp::socket connect_when_listening(asio::io_context& io, const std::string& address) {
  const asio::ip::tcp::endpoint to = loopback_endpoint(address);
  for (int i = 0;; ++i) {
    asio::ip::tcp::socket s(io);
    std::error_code ec;
    s.connect(to, ec);
    if (!ec || i == 400) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Boost.Test's assertions are not thread-safe: worker threads record their checks here (WORKER_CHECK),
/// and `on_workers` reports the failed ones from the test's thread once the workers are joined.
inline std::mutex& checks_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<std::string>& failed_checks() {
  static std::vector<std::string> v;
  return v;
}
inline void record_check(bool ok, const char* what, const char* file, int line) {
  if (ok) return;
  std::lock_guard lock(checks_mutex());
  failed_checks().push_back(std::string(file) + "(" + std::to_string(line) + "): check " + what + " has failed");
}
#define WORKER_CHECK(expr) ::dtrain_test::record_check(static_cast<bool>(expr), #expr, __FILE__, __LINE__)
#define WORKER_CHECK_THROW(expr, E)                                                                            \
  ::dtrain_test::record_check(                                                                                 \
      [&] {                                                                                                    \
        try {                                                                                                  \
          expr;                                                                                                \
        } catch (const E&) {                                                                                   \
          return true;                                                                                         \
        } catch (...) {                                                                                        \
        }                                                                                                      \
        return false;                                                                                          \
      }(),                                                                                                     \
      #expr " throws " #E, __FILE__, __LINE__)

/// Runs `f(strategy, rank)` on p workers of a loopback cluster, each a thread with its own
/// `multi_worker_mirrored_strategy<Comm, B>` (timeouts of 20 s, else `o`); reports the workers' failed
/// checks, then rethrows a worker's error (the first that is not a comm_error, which only says that
/// another worker stopped).
template <class B = dtrain::cpu, class Comm = dtrain::comm::ring_tcp, class F>
void on_workers(int p, F f, dtrain::communication_options o = {.timeout = std::chrono::seconds(20),
                                                                .connect_timeout = std::chrono::seconds(20)}) {
  const auto addrs = free_addresses(p);
  const auto errs = run_threads(p, [&](int r) {
    dtrain::multi_worker_mirrored_strategy<Comm, B> s(o, dtrain::make_cluster_info({{{"worker", addrs}}}, "worker", r));
    f(s, r);
  });
  for (const auto& failure : std::exchange(failed_checks(), {})) BOOST_ERROR(failure);
  std::exception_ptr first;
  for (auto& e : errs) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const dtrain::comm_error&) {
      if (!first) first = e;
    } catch (...) {
      throw;
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace dtrain_test
