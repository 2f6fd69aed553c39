#pragma once
/// \file
/// The handshake that opens every connection between workers, and the job token that authenticates it.
///
/// Wire (protocol version 3, host byte order): the connecting side sends a `hello`; the accepting side
/// answers with its own `hello` whose `accepted` says whether it took the connection. With a job token
/// both sides then prove they hold it, each with an HMAC-SHA256 keyed by the token over a label and both
/// hellos (so over both nonces, both ranks, the world size and the cluster fingerprint): first the
/// accepting side (`server_label`), then the connecting one (`client_label`). A nonce is fresh per
/// connection, so a proof recorded from one connection is useless on another, and the labels keep one
/// side's proof from serving as the other's. Without a token both sides skip the proofs; a side with a
/// token refuses one without.
///
/// Parsing is separate from I/O: `check_hello` and `verify_proof` take bytes and say what is wrong,
/// which is what the fuzzers and the tests drive.

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "dtrain/core/environment.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::comm {

namespace detail {

inline constexpr std::uint32_t hello_magic = 0x48525444;  // "DTRH"
inline constexpr std::uint16_t protocol_version = 6;  // 3: the shared-memory offer; 4: both ways round the
                                                      // ring; 5: frames carry a CRC-32C; 6: heartbeats

enum class hello_kind : std::uint8_t { join = 1, ring = 2, beat = 3, ps = 4 };  // beat: heartbeat.hpp; ps: ps/channel.hpp

struct hello {
  std::uint32_t magic = hello_magic;
  std::uint16_t version = protocol_version;
  std::uint8_t kind = 0;
  std::uint8_t accepted = 0;  // set in the reply
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  std::uint64_t fingerprint = 0;
  std::uint16_t listen_port = 0;
  std::uint8_t authenticated = 0;  // 1: this side holds a job token and will prove it
  std::uint8_t tls = 0;            // 1: this side encrypts the data plane (tls.hpp)
  std::uint8_t pad[4]{};
  std::array<std::uint8_t, 16> nonce{};
};
static_assert(sizeof(hello) == 48);
/// The first bytes of a hello (magic, version): read first, so a peer speaking another version is
/// named as such instead of timing out while its shorter hello is awaited.
inline constexpr std::size_t hello_prefix = 6;

using proof = std::array<std::uint8_t, 32>;  // HMAC-SHA256
inline constexpr char server_label[] = "dtrain-accepting-side-v2";
inline constexpr char client_label[] = "dtrain-connecting-side-v2";

/// What the receiving side expects of a hello.
struct hello_expectation {
  hello_kind kind = hello_kind::join;
  std::uint32_t world_size = 0;
  std::uint64_t fingerprint = 0;
  int rank = -1;  // -1: any rank in [0, world_size)
  bool authenticated = false;
  bool tls = false;
};

/// Why a hello is unacceptable, or "" when it is fine.
inline std::string check_hello(const hello& h, const hello_expectation& e) {
  if (h.magic != hello_magic) return "wrong magic (not a dtrain worker)";
  if (h.version != protocol_version)
    return "protocol version " + std::to_string(h.version) + ", expected " + std::to_string(protocol_version) +
           " (a worker of another dtrain release)";
  if (h.fingerprint != e.fingerprint) return "cluster fingerprint differs (a worker of another job?)";
  if (h.world_size != e.world_size)
    return "world size " + std::to_string(h.world_size) + ", expected " + std::to_string(e.world_size);
  if (h.kind != std::uint8_t(e.kind)) return "unexpected handshake kind";
  if (h.rank >= e.world_size || (e.rank >= 0 && h.rank != std::uint32_t(e.rank)))
    return "rank " + std::to_string(h.rank) + (e.rank >= 0 ? ", expected " + std::to_string(e.rank) : " out of range");
  if (h.authenticated > 1) return "malformed authentication flag";
  if (e.authenticated && !h.authenticated)
    return "it has no job token and this worker requires one (set the same DTRAIN_JOB_TOKEN on every worker)";
  if (!e.authenticated && h.authenticated)
    return "it holds a job token and this worker has none (set the same DTRAIN_JOB_TOKEN on every worker)";
  if (h.tls > 1) return "malformed TLS flag";
  if (h.tls != e.tls)
    return std::string(h.tls ? "it encrypts the data plane and this worker does not"
                             : "it does not encrypt the data plane and this worker does") +
           " (set DTRAIN_TLS the same on every worker)";
  return "";
}

/// A fresh random nonce (OpenSSL's CSPRNG).
inline std::array<std::uint8_t, 16> make_nonce() {
  std::array<std::uint8_t, 16> n{};
  if (RAND_bytes(n.data(), int(n.size())) != 1) throw error("ring_tcp: the system's random generator failed");
  return n;
}

/// HMAC-SHA256 (RFC 2104) of `message` keyed by `key` (OpenSSL).
inline proof hmac_sha256(const std::string& key, const std::string& message) {
  proof out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
            message.size(), out.data(), &len) ||
      len != out.size())
    throw error("ring_tcp: HMAC-SHA256 failed (OpenSSL)");
  return out;
}

/// A side's proof that it holds the token: HMAC-SHA256(token, label || client hello || server hello).
inline proof make_proof(const std::string& key, const char* label, const hello& client, const hello& server) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(&client), sizeof client);
  msg.append(reinterpret_cast<const char*>(&server), sizeof server);
  return hmac_sha256(key, msg);
}

/// Whether `got` is the proof of `label` (compared in constant time).
inline bool verify_proof(const std::string& key, const char* label, const hello& client, const hello& server,
                         const proof& got) {
  const proof want = make_proof(key, label, client, server);
  return CRYPTO_memcmp(want.data(), got.data(), want.size()) == 0;
}

inline std::string trim_token(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

}  // namespace detail

/// The shortest job token accepted: shorter ones are guessable.
inline constexpr std::size_t min_job_token_size = 16;

/// The job token from the environment: `DTRAIN_JOB_TOKEN`, or the contents of the file named by
/// `DTRAIN_JOB_TOKEN_FILE` (trailing newline removed; a Kubernetes Secret mounted as a file). Empty
/// when neither is set. Both set, an unreadable or empty file, or a token shorter than
/// `min_job_token_size` characters is a config_error.
inline std::string job_token_from_environment() {
  const std::string value = environment::get(environment::job_token);
  const std::string file = environment::get(environment::job_token_file);
  const bool has_value = !value.empty(), has_file = !file.empty();
  if (has_value && has_file) throw config_error("both DTRAIN_JOB_TOKEN and DTRAIN_JOB_TOKEN_FILE are set; set one");
  std::string token;
  if (has_value) token = detail::trim_token(value);
  if (has_file) {
    struct stat st{};
    if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw config_error("DTRAIN_JOB_TOKEN_FILE: '" + std::string(file) + "' is not a readable file");
    if (st.st_size > 4096)
      throw config_error("DTRAIN_JOB_TOKEN_FILE: '" + std::string(file) + "' holds " + std::to_string(st.st_size) +
                         " bytes; a job token is one line (at most 4096 bytes)");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw config_error("DTRAIN_JOB_TOKEN_FILE: cannot open '" + std::string(file) + "'");
    token = detail::trim_token(std::string(std::istreambuf_iterator<char>(in), {}));
    if (token.empty()) throw config_error("DTRAIN_JOB_TOKEN_FILE: '" + std::string(file) + "' is empty");
  }
  if (!token.empty() && token.size() < min_job_token_size)
    throw config_error("the job token has " + std::to_string(token.size()) + " characters; use at least " +
                       std::to_string(min_job_token_size) + " random ones (dtrain-launch makes one)");
  return token;
}

}  // namespace dtrain::comm
