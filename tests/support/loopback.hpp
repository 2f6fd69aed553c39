#pragma once
// Loopback clusters for ring tests: n free addresses "127.0.0.1:port" (all bound at once, then
// released), and p workers run as threads, each with its own strategy and sockets.
#include <asio.hpp>

#include <exception>
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

/// Runs `f(strategy, rank)` on p workers of a loopback cluster, each a thread with its own
/// `multi_worker_mirrored_strategy<ring_tcp, B>`; rethrows the first worker's error once all are done.
template <class B = dtrain::cpu, class F>
void on_workers(int p, F f) {
  const auto addrs = free_addresses(p);
  std::vector<std::exception_ptr> errs(static_cast<std::size_t>(p));
  std::vector<std::thread> ts;
  for (int r = 0; r < p; ++r)
    ts.emplace_back([&, r] {
      try {
        dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp, B> s(
            {.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20)},
            dtrain::make_cluster_info({{{"worker", addrs}}}, "worker", r));
        f(s, r);
      } catch (...) {
        errs[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

}  // namespace dtrain_test
