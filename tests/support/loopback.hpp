#pragma once
// n free loopback addresses "127.0.0.1:port" for ring tests (all bound at once, then released).
#include <asio.hpp>

#include <string>
#include <vector>

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

}  // namespace dtrain_test
