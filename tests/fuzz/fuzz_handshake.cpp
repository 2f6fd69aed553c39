// The handshake: any 48 bytes as a hello against any expectation, and any 32 bytes as a proof.
#include <algorithm>
#include <cstring>

#include <dtrain/distribute/comm/handshake.hpp>

#include "fuzz_input.hpp"

using namespace dtrain::comm::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hello h, mine;
  proof p{};
  std::uint8_t rules[10]{};
  std::size_t at = 0;
  auto take = [&](void* to, std::size_t n) {
    const std::size_t k = std::min(n, size - at);
    std::memcpy(to, data + at, k);
    at += k;
  };
  take(&h, sizeof h);
  take(rules, sizeof rules);
  take(&p, sizeof p);
  hello_expectation e;
  e.kind = rules[0] & 1 ? hello_kind::join : hello_kind::ring;
  e.world_size = rules[1] | (std::uint32_t(rules[2]) << 8);
  std::memcpy(&e.fingerprint, rules + 2, 8);
  e.rank = int(std::int8_t(rules[3]));
  e.authenticated = rules[4] & 1;
  const std::string why = check_hello(h, e);
  if (why.empty() && (h.magic != hello_magic || h.version != protocol_version || h.fingerprint != e.fingerprint ||
                      h.world_size != e.world_size || h.rank >= e.world_size))
    __builtin_trap();  // accepted what it must refuse
  const std::string key(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 24));
  if (verify_proof(key, client_label, h, mine, p) && p != make_proof(key, client_label, h, mine)) __builtin_trap();
  if (verify_proof(key, server_label, h, mine, make_proof(key, client_label, h, mine))) __builtin_trap();  // labels differ
  return 0;
}
