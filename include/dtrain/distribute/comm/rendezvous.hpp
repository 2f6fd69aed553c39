#pragma once
/// \file
/// The ring's TCP rendezvous (`tcp_rendezvous`): how the ranks of a job find each other and connect.
/// Every rank listens on its own address. Ranks 1..n-1 join rank 0 (retrying with backoff until the
/// connect deadline); rank 0 logs `waiting for workers (k/n)` as they arrive, then sends everyone the
/// table of ring addresses (so launchers that give only rank 0's address, such as torchrun or mpirun,
/// work too). Then each rank connects to the next and accepts the previous one. Every connection starts
/// with a handshake (handshake.hpp: magic, protocol version, cluster fingerprint, rank, world size and,
/// with a job token, a mutual HMAC proof); a mismatch closes it with a logged reason. Handshakes on the
/// listening side run concurrently, each with its own deadline and at most `max_pending_handshakes` at
/// once, so silent connections (a port scanner) cannot stall it. Beside its ring connection each rank
/// opens a second one to the next rank, the same way, for heartbeats (heartbeat.hpp). With TLS the two
/// ring connections then run TLS 1.3 keyed by the token (tls.hpp). Afterwards a background thread keeps
/// accepting on the listening port only to reject and log strangers.
///
/// What it leaves: the connection from the previous rank and to the next one (and their TLS links),
/// every rank's address, and the heartbeats that say whether a neighbour is alive. The ring engine
/// (ring_engine.hpp) moves data over the connections.

#include <asio.hpp>

#include <poll.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/core/environment.hpp"
#include "dtrain/distribute/cluster.hpp"
#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/distribute/comm/handshake.hpp"
#include "dtrain/distribute/comm/heartbeat.hpp"
#include "dtrain/distribute/comm/tls.hpp"
#include "dtrain/distribute/comm/wire.hpp"

namespace dtrain::comm {

/// A ring rank's options: the rendezvous reads most of them, the engine the chunk size and timeouts.
struct ring_tcp_options {
  int rank = 0;
  int world_size = 1;
  /// "host:port" of every rank in rank order, or of rank 0 alone (the others then listen on a free port).
  std::vector<std::string> addresses{};
  /// Hash of the cluster spec; peers with another fingerprint are refused.
  std::uint64_t fingerprint = 0;
  /// How long a collective may wait with no byte moving; zero: as long as its peers are alive (the
  /// heartbeats say so). A bound on slowness, for jobs that prefer failing to waiting.
  std::chrono::milliseconds operation_timeout{0};
  std::chrono::milliseconds connect_timeout{300'000};
  /// A neighbour that sends no heartbeat for this long has failed (heartbeat.hpp); zero: never judged.
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::size_t chunk_bytes = std::size_t{1} << 20;  // the largest frame
  /// The job token every connection proves (handshake.hpp); nullopt: `job_token_from_environment()`,
  /// "": none. The same on every rank.
  std::optional<std::string> job_token{};
  /// Refuse to start without a token when an address is not loopback (also DTRAIN_REQUIRE_JOB_TOKEN=1);
  /// otherwise that prints one warning.
  bool require_job_token = false;
  /// Each incoming connection must finish its handshake this soon after it is accepted; at most
  /// `max_pending_handshakes` run at once (more are closed at once: a worker among them retries).
  std::chrono::milliseconds handshake_timeout{5'000};
  int max_pending_handshakes = 64;
  /// Encrypt and authenticate the data plane with TLS 1.3, keyed by the job token (tls.hpp); also
  /// DTRAIN_TLS=1. Every rank must agree; it needs a job token.
  bool tls = false;
  /// Where log lines go (default: stderr, prefixed "dtrain ring_tcp:").
  std::function<void(const std::string&)> log{};
  /// All-reduces of at most this many bytes go around the ring whole and are reduced by every rank
  /// (p - 1 steps instead of 2 (p - 1): latency, not bandwidth, is what small ones pay for). The same on
  /// every rank.
  std::size_t small_bytes = 16384;
  /// When every rank turns out to be on this host, all-reduce through shared memory (shm.hpp) instead
  /// of loopback TCP; also DTRAIN_SHM=0 turns it off. A rank with it off keeps the whole ring on TCP.
  bool shared_memory = true;
  /// Without TLS, every frame carries a CRC-32C of its payload, checked before it is used: a frame
  /// corrupted on the way is a protocol error naming the sender, never a wrong sum. Also
  /// DTRAIN_FRAME_CHECKSUMS=0 turns it off. The same on every rank. TLS authenticates every record
  /// instead, so with TLS frames carry none.
  bool frame_checksums = true;
};

namespace detail {

inline std::pair<std::string, std::uint16_t> split_address(const std::string& a) {
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size())
    throw config_error("ring_tcp: '" + a + "' is not host:port");
  std::string host = a.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string p = a.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(p.c_str(), &end, 10);
  if (*end || port <= 0 || port > 65535) throw config_error("ring_tcp: '" + a + "' has no valid port");
  return {host, static_cast<std::uint16_t>(port)};
}

/// Whether a host (name or address) is this machine's loopback.
inline bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  std::error_code ec;
  const auto a = asio::ip::make_address(host, ec);
  return !ec && a.is_loopback();
}

}  // namespace detail

class tcp_rendezvous {
 public:
  using clock = std::chrono::steady_clock;

  /// Connects this rank into the ring (blocks until both of its connections are up, or throws:
  /// `config_error` for options that cannot work, `comm_error` for peers that never came or refused).
  /// `o.log` must be set. A world of one connects nothing.
  explicit tcp_rendezvous(const ring_tcp_options& o)
      : o_(o), token_(o_.job_token ? *o_.job_token : job_token_from_environment()), listener_(io_), prev_(io_),
        next_(io_) {
    if (o_.world_size < 1 || o_.rank < 0 || o_.rank >= o_.world_size)
      throw config_error("ring_tcp: rank " + std::to_string(o_.rank) + " is not in a world of " +
                         std::to_string(o_.world_size));
    if (o_.world_size > 1 && o_.addresses.size() != std::size_t(o_.world_size) && o_.addresses.size() != 1)
      throw config_error("ring_tcp: need the addresses of all " + std::to_string(o_.world_size) +
                         " ranks or of rank 0 alone, got " + std::to_string(o_.addresses.size()));
    if (o_.tls && token_.empty())
      throw config_error("ring_tcp: TLS (DTRAIN_TLS) is keyed by the job token: set DTRAIN_JOB_TOKEN or "
                         "DTRAIN_JOB_TOKEN_FILE too");
    if (!token_.empty() && token_.size() < min_job_token_size)
      throw config_error("ring_tcp: the job token has " + std::to_string(token_.size()) + " characters; use at least " +
                         std::to_string(min_job_token_size) + " random ones");
    peers_.resize(std::size_t(o_.world_size));
    for (std::size_t i = 0; i < o_.addresses.size(); ++i) peers_[i] = o_.addresses[i];
    if (o_.world_size > 1) {
      check_job_token();
      rendezvous();
      stray_ = std::thread([this] { reject_strangers(); });
    }
  }
  tcp_rendezvous(const tcp_rendezvous&) = delete;
  tcp_rendezvous& operator=(const tcp_rendezvous&) = delete;
  ~tcp_rendezvous() {
    heartbeat_.reset();
    if (stray_.joinable()) {
      asio::post(stray_io_, [this] {
        std::error_code e;
        stray_listener_->close(e);
      });
      stray_.join();
    }
    close();
  }

  int rank() const { return o_.rank; }
  int size() const { return o_.world_size; }
  int prev_rank() const { return (rank() + size() - 1) % size(); }
  int next_rank() const { return (rank() + 1) % size(); }
  /// "host:port" of a rank (after the rendezvous, for every rank).
  const std::string& address_of(int r) const { return peers_[std::size_t(r)]; }
  /// "rank r (host:port)", for messages.
  std::string peer_name(int r) const {
    return "rank " + std::to_string(r) + " (" + (peers_[std::size_t(r)].empty() ? "?" : peers_[std::size_t(r)]) + ")";
  }
  /// The connection data arrives on (from the previous rank) and the one it leaves on (to the next);
  /// with TLS, the links over them (else null).
  asio::ip::tcp::socket& prev() { return prev_; }
  asio::ip::tcp::socket& next() { return next_; }
  detail::tls_link* prev_tls() { return in_tls_.get(); }
  detail::tls_link* next_tls() { return out_tls_.get(); }
  /// A neighbour that has stopped sending heartbeats (it died, stopped, or its host is down), or nullopt;
  /// and a descriptor that becomes readable once there is one, for poll().
  std::optional<detail::heartbeat::verdict> peer_failure() const {
    return heartbeat_ ? heartbeat_->failure() : std::nullopt;
  }
  int peer_failure_fd() const { return heartbeat_ ? heartbeat_->wake_fd() : -1; }
  /// Closes both data connections (after a failure: the neighbours see it at once). The heartbeats go
  /// on while this rank lives, so that its neighbours do not take it for the rank that failed.
  void close() {
    std::error_code ig;
    prev_.close(ig), next_.close(ig);
  }

 private:
  void rendezvous() {
    const auto deadline = clock::now() + o_.connect_timeout;
    listen();
    if (rank() == 0) gather_joins(deadline);
    else join_master(deadline);
    connect_ring(deadline);
    heartbeat_ = std::make_unique<detail::heartbeat>(
        std::vector<detail::heartbeat::link>{{prev_beat_.native_handle(), prev_rank()}, {next_beat_.native_handle(), next_rank()}},
        o_.heartbeat_timeout);
    o_.log("rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " connected: previous " +
           peer_name(prev_rank()) + ", next " + peer_name(next_rank()) +
           (token_.empty() ? "" : o_.tls ? " (authenticated by the job token, TLS 1.3)" : " (authenticated by the job token)"));
  }

  /// Without a job token anyone who can reach a worker's port and read TF_CONFIG can join: fine on
  /// loopback, worth one warning (or a refusal, by option) anywhere else.
  void check_job_token() {
    const bool require = o_.require_job_token || environment::get(environment::require_job_token) == "1";
    if (!token_.empty() || size() == 1) return;
    std::string exposed;
    for (const auto& a : o_.addresses)
      if (!detail::is_loopback(detail::split_address(a).first)) exposed = a;
    if (exposed.empty()) return;
    const std::string why = "rank " + std::to_string(rank()) + " has no job token and the cluster is not on loopback ('" +
                            exposed + "'): anyone who reaches its ports and reads TF_CONFIG can join the job";
    if (require) throw config_error("ring_tcp: " + why + "; set DTRAIN_JOB_TOKEN or DTRAIN_JOB_TOKEN_FILE (docs/security.md)");
    o_.log("warning: " + why + " (set DTRAIN_JOB_TOKEN; docs/security.md)");
  }

  void listen() {
    asio::ip::tcp::endpoint ep;
    if (!o_.addresses.empty() && (rank() == 0 || o_.addresses.size() > 1)) {
      auto [host, port] = detail::split_address(o_.addresses[std::size_t(rank())]);
      asio::ip::tcp::resolver res(io_);
      std::error_code ec;
      auto r = res.resolve(host, std::to_string(port), ec);
      if (ec || r.empty()) throw comm_error("ring_tcp: cannot resolve own address '" + o_.addresses[std::size_t(rank())] + "': " + ec.message());
      ep = asio::ip::tcp::endpoint(r.begin()->endpoint().protocol() == asio::ip::tcp::v6() ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), port);
    } else {
      ep = asio::ip::tcp::endpoint(asio::ip::tcp::v4(), 0);
    }
    std::error_code ec;
    listener_.open(ep.protocol(), ec);
    if (!ec) listener_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) listener_.bind(ep, ec);
    if (!ec) listener_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + " cannot listen on port " + std::to_string(ep.port()) +
                       ": " + ec.message());
    listen_port_ = listener_.local_endpoint().port();
  }

  detail::hello my_hello(detail::hello_kind kind) const {
    detail::hello h;
    h.kind = std::uint8_t(kind);
    h.world_size = std::uint32_t(size());
    h.rank = std::uint32_t(rank());
    h.fingerprint = o_.fingerprint;
    h.listen_port = listen_port_;
    h.authenticated = !token_.empty();
    h.tls = o_.tls;
    h.nonce = detail::make_nonce();
    return h;
  }
  detail::hello_expectation expectation(detail::hello_kind kind, int from_rank) const {
    return {kind, std::uint32_t(size()), o_.fingerprint, from_rank, !token_.empty(), o_.tls};
  }
  /// Writes all of [p, p + n) to `who`; a peer that reset or closed the connection is a comm_error.
  void write_all(asio::ip::tcp::socket& s, const void* p, std::size_t n, const std::string& who) const {
    std::error_code ec;
    asio::write(s, asio::buffer(p, n), ec);
    if (ec)
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + who + " closed the connection (" +
                       ec.message() + ") during the rendezvous; it died or stopped");
  }

  // The listening side. Handshakes run concurrently on io_: each accepted connection has
  // `handshake_timeout` to complete its own, and at most `max_pending_handshakes` run at once (more
  // are closed at once; a worker among them retries), so silent connections cannot stall the ring.

  /// What the listening side waits for, and what it does with a connection that passed the handshake.
  struct admission {
    detail::hello_expectation expect;
    std::function<std::string(const detail::hello&)> refuse;  // a further reason to refuse ("" for none)
    std::function<void(asio::ip::tcp::socket&, const detail::hello&, const detail::proof& tls_key)> admit;
    std::optional<detail::hello_kind> also{};  // a second kind of connection, taken alike
  };
  struct incoming {
    explicit incoming(asio::io_context& io) : s(io), timer(io) {}
    asio::ip::tcp::socket s;
    asio::steady_timer timer;
    std::string from;
    detail::hello theirs{}, mine{};
    detail::proof proof{};
    bool timed_out = false;
  };
  using incoming_ptr = std::shared_ptr<incoming>;

  void start_accepting(admission a) {
    admission_ = std::move(a);
    accepting_ = true;
    accept_next();
  }
  void stop_accepting() {
    accepting_ = false;
    refused_.clear();
    std::error_code ig;
    listener_.cancel(ig);
    for (const auto& c : pending_) c->timer.cancel(), c->s.close(ig);
    pending_.clear();
    io_.restart();
    io_.run();  // the cancelled handlers
  }
  void accept_next() {
    auto c = std::make_shared<incoming>(io_);
    listener_.async_accept(c->s, [this, c](std::error_code ec) {
      if (!accepting_ || ec == asio::error::operation_aborted) return;
      if (!ec) return begin_handshake(c), accept_next();
      // out of file descriptors, say: try again shortly rather than spin
      auto pause = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
      pause->async_wait([this, pause](std::error_code e) {
        if (!e && accepting_) accept_next();
      });
    });
  }
  void begin_handshake(const incoming_ptr& c) {
    std::error_code ig;
    const auto remote = c->s.remote_endpoint(ig);
    c->from = remote.address().to_string() + ":" + std::to_string(remote.port());
    if (pending_.size() >= std::size_t(std::max(1, o_.max_pending_handshakes))) {
      if (std::has_single_bit(++capped_))  // 1, 2, 4, ...: a flood cannot flood the log
        o_.log("closed connection from " + c->from + ": " + std::to_string(pending_.size()) +
               " handshakes already in progress (" + std::to_string(capped_) + " closed so far)");
      c->s.close(ig);
      return;
    }
    pending_.insert(c);
    c->timer.expires_after(o_.handshake_timeout);
    c->timer.async_wait([c](std::error_code ec) {
      if (ec) return;
      c->timed_out = true;
      std::error_code e;
      c->s.close(e);
    });
    asio::async_read(c->s, asio::buffer(&c->theirs, detail::hello_prefix), [this, c](std::error_code ec, std::size_t) {
      if (ec) return give_up(c, ec.message());
      if (c->theirs.magic != detail::hello_magic) return give_up(c, "wrong magic (not a dtrain worker)");
      if (c->theirs.version != detail::protocol_version) return reply(c, detail::check_hello(c->theirs, expected(c->theirs)));
      auto* rest = reinterpret_cast<char*>(&c->theirs) + detail::hello_prefix;
      asio::async_read(c->s, asio::buffer(rest, sizeof(detail::hello) - detail::hello_prefix),
                       [this, c](std::error_code e, std::size_t) {
                         if (e) return give_up(c, e.message());
                         std::string why = detail::check_hello(c->theirs, expected(c->theirs));
                         if (!why.empty() && credentials_differ(c->theirs)) note_refusal(c, why);
                         if (why.empty()) why = admission_.refuse(c->theirs);
                         reply(c, why);
                       });
    });
  }
  /// What the listening side expects of a hello: of its kind, where it is the admission's second one.
  detail::hello_expectation expected(const detail::hello& h) const {
    auto e = admission_.expect;
    if (admission_.also && h.kind == std::uint8_t(*admission_.also)) e.kind = *admission_.also;
    return e;
  }
  /// Answers a hello: accepted (with our proof when there is a token) or refused, with the reason logged.
  void reply(const incoming_ptr& c, const std::string& why) {
    c->mine = my_hello(expected(c->theirs).kind);
    c->mine.accepted = why.empty();
    const bool prove = why.empty() && !token_.empty();
    if (prove) c->proof = detail::make_proof(token_, detail::server_label, c->theirs, c->mine);
    std::array<asio::const_buffer, 2> out{asio::buffer(&c->mine, sizeof c->mine),
                                          asio::buffer(c->proof.data(), prove ? c->proof.size() : 0)};
    asio::async_write(c->s, out, [this, c, why, prove](std::error_code ec, std::size_t) {
      if (!why.empty()) return give_up(c, why);
      if (ec) return give_up(c, ec.message());
      if (!prove) return admit(c);
      asio::async_read(c->s, asio::buffer(c->proof), [this, c](std::error_code e, std::size_t) {
        if (e) {  // a worker that found our proof wrong (another token) closes here
          note_refusal(c, "it closed the connection instead of proving the job token (it holds another DTRAIN_JOB_TOKEN, "
                          "or is a stranger)");
          return give_up(c, e.message());
        }
        if (!detail::verify_proof(token_, detail::client_label, c->theirs, c->mine, c->proof)) {
          const std::string why = "its proof of the job token is wrong (a stranger, or a worker with another DTRAIN_JOB_TOKEN)";
          note_refusal(c, why);
          return give_up(c, why);
        }
        admit(c);
      });
    });
  }
  void admit(const incoming_ptr& c) {
    if (std::string why = admission_.refuse(c->theirs); !why.empty()) return give_up(c, why);  // taken meanwhile
    c->timer.cancel();
    pending_.erase(c);
    refused_.erase(c->theirs.rank);  // the genuine worker came after all
    admission_.admit(c->s, c->theirs, tls_key(c->theirs, c->mine));
  }
  /// Whether a hello of this job (its release, cluster and kind, a rank in range) differs only in the
  /// job token or TLS setting: a worker of this job started with other credentials, which no retry fixes.
  bool credentials_differ(const detail::hello& h) const {
    const auto e = expected(h);
    return h.version == detail::protocol_version && h.fingerprint == e.fingerprint && h.world_size == e.world_size &&
           h.kind == std::uint8_t(e.kind) && h.rank < e.world_size && h.authenticated <= 1 && h.tls <= 1 &&
           (bool(h.authenticated) != e.authenticated || bool(h.tls) != e.tls);
  }
  /// A connection that claims a rank of this job failed on its credentials. Anyone can claim a rank, so
  /// this does not end the rendezvous at once: if the genuine worker has not joined within
  /// `handshake_timeout`, the rendezvous fails with this reason (a `config_error`) instead of waiting
  /// out the connect deadline for a worker that has already given up.
  void note_refusal(const incoming_ptr& c, const std::string& why) {
    if (!accepting_ || c->theirs.rank >= std::uint32_t(size())) return;
    refused_.try_emplace(c->theirs.rank, refusal{c->from, why, clock::now() + o_.handshake_timeout});
  }
  /// Throws for a refusal whose grace has passed.
  void check_refusals() const {
    for (const auto& [r, f] : refused_)
      if (clock::now() >= f.until)
        throw config_error("ring_tcp: rank " + std::to_string(rank()) + ": " + peer_name(int(r)) +
                           " connected from " + f.from + " and failed the handshake: " + f.why +
                           "; it will not join (set the same DTRAIN_JOB_TOKEN and DTRAIN_TLS on every worker)");
  }
  void give_up(const incoming_ptr& c, const std::string& why) {
    if (!pending_.erase(c)) return;  // already closed by stop_accepting
    o_.log("rejected connection from " + c->from + ": " +
           (c->timed_out ? "no handshake within " + std::to_string(o_.handshake_timeout.count()) + " ms" : why));
    std::error_code ig;
    c->timer.cancel();
    c->s.close(ig);
  }

  /// Runs io_ until `done()`; past the deadline throws `timeout_message()` (what is still queued is
  /// dropped with io_: the constructor is failing).
  template <class Done, class Message>
  void run_until(clock::time_point deadline, Done&& done, Message&& timeout_message) {
    io_.restart();
    while (!done()) {
      check_refusals();
      auto wake = deadline;
      for (const auto& [r, f] : refused_) wake = std::min(wake, f.until);
      if (io_.run_one_until(wake) == 0 && clock::now() >= deadline) {
        // the handlers still queued refer to the caller's frame: they are dropped with io_, never run
        accepting_ = false;
        throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + timeout_message());
      }
      if (io_.stopped()) io_.restart();
    }
  }

  // The connecting side.

  struct handshake_result {
    enum outcome { ok, retry, failed, wrong_token } what = failed;
    std::string why;
    detail::proof tls_key{};
  };
  /// The connection's TLS key (zeros without TLS): both ends derive it from the two hellos.
  detail::proof tls_key(const detail::hello& client, const detail::hello& server) const {
    return o_.tls ? detail::make_proof(token_, detail::tls_label, client, server) : detail::proof{};
  }
  /// Sends our hello on `s`, reads the answer and, with a token, exchanges the proofs; `done` gets the
  /// result. A connection closed before the answer is `retry` (the peer was at its handshake cap).
  void start_handshake(asio::ip::tcp::socket& s, detail::hello_kind kind, int peer,
                       std::function<void(handshake_result)> done) {
    struct state {
      detail::hello mine, theirs;
      detail::proof proof;
    };
    auto st = std::make_shared<state>();
    st->mine = my_hello(kind);
    auto fail = [done](int what, std::string why) { done({handshake_result::outcome(what), std::move(why)}); };
    asio::async_write(s, asio::buffer(&st->mine, sizeof st->mine), [this, &s, kind, peer, st, done, fail](std::error_code ec, std::size_t) {
      if (ec) return fail(handshake_result::retry, ec.message());
      asio::async_read(s, asio::buffer(&st->theirs, sizeof st->theirs), [this, &s, kind, peer, st, done, fail](std::error_code e, std::size_t n) {
        if (e && n < detail::hello_prefix) return fail(handshake_result::retry, e.message());
        if (st->theirs.magic != detail::hello_magic) return fail(handshake_result::failed, "answered with something that is not a dtrain handshake");
        std::string why = detail::check_hello(st->theirs, expectation(kind, peer));
        if (!why.empty())
          return fail(st->theirs.authenticated != st->mine.authenticated || st->theirs.tls != st->mine.tls
                          ? handshake_result::wrong_token
                          : handshake_result::failed,
                      "does not match: " + why);
        if (e) return fail(handshake_result::retry, e.message());
        if (!st->theirs.accepted)
          return fail(handshake_result::failed, "refused the handshake (a worker of another job, a duplicate rank or a mismatched "
                                                "world size or job token; see its log)");
        if (token_.empty()) return done({handshake_result::ok, "", {}});
        asio::async_read(s, asio::buffer(st->proof), [this, &s, st, done, fail](std::error_code e2, std::size_t) {
          if (e2) return fail(handshake_result::failed, "closed the connection during the handshake (" + e2.message() + ")");
          if (!detail::verify_proof(token_, detail::server_label, st->mine, st->theirs, st->proof))
            return fail(handshake_result::wrong_token, "does not hold this job's token (another DTRAIN_JOB_TOKEN, or not a worker of this job)");
          st->proof = detail::make_proof(token_, detail::client_label, st->mine, st->theirs);
          asio::async_write(s, asio::buffer(st->proof), [this, st, done, fail](std::error_code e3, std::size_t) {
            if (e3) return fail(handshake_result::failed, "closed the connection during the handshake (" + e3.message() + ")");
            done({handshake_result::ok, "", tls_key(st->mine, st->theirs)});
          });
        });
      });
    });
  }
  /// Connects to `peer` at `address` and completes the handshake (io_ keeps serving the listening side
  /// meanwhile), retrying while the deadline allows when the peer closes the connection first.
  asio::ip::tcp::socket handshake_with(int peer, const std::string& address, detail::hello_kind kind, clock::time_point deadline,
                                       detail::proof* key = nullptr) {
    const std::string who = "rank " + std::to_string(peer) + " (" + address + ")";
    unsigned unanswered = 0;
    for (auto backoff = std::chrono::milliseconds(50);; backoff = std::min(backoff * 2, std::chrono::milliseconds(1000))) {
      asio::ip::tcp::socket s = connect_with_retry(address, deadline, who);
      std::optional<handshake_result> r;
      start_handshake(s, kind, peer, [&r](handshake_result x) { r = std::move(x); });
      run_until(deadline, [&] { return r.has_value(); }, [&] { return "timed out waiting for " + who + " to answer the handshake"; });
      const std::string what = "ring_tcp: rank " + std::to_string(rank()) + ": " + who + " " + r->why;
      if (r->what == handshake_result::ok) {
        if (key) *key = r->tls_key;
        return s;
      }
      if (r->what == handshake_result::wrong_token) throw config_error(what);
      if (r->what == handshake_result::failed) throw comm_error(what);
      if (clock::now() + backoff > deadline) throw comm_error(what + " (closed before answering the handshake)");
      if (std::has_single_bit(++unanswered))  // 1, 2, 4, ...: said, never silent, never flooding
        o_.log(who + " closed the connection before answering the handshake (" + r->why +
               "); retrying until the connect deadline: it may be at its cap of pending handshakes, or have "
               "refused this worker (see its log)");
      std::this_thread::sleep_for(backoff);
    }
  }

  void gather_joins(clock::time_point deadline) {
    std::vector<std::optional<asio::ip::tcp::socket>> joined(static_cast<std::size_t>(size()));
    int count = 1;
    o_.log("waiting for workers (1/" + std::to_string(size()) + ")");
    start_accepting({expectation(detail::hello_kind::join, -1),
                     [&](const detail::hello& h) {
                       if (h.rank == 0) return std::string("rank 0 is this worker");
                       return joined[h.rank] ? "rank " + std::to_string(h.rank) + " joined twice" : std::string();
                     },
                     [&](asio::ip::tcp::socket& s, const detail::hello& h, const detail::proof&) {
                       std::error_code ig;
                       if (o_.addresses.size() <= 1)  // torchrun style: the address table is built from who joined
                         peers_[h.rank] = s.remote_endpoint(ig).address().to_string() + ":" + std::to_string(h.listen_port);
                       joined[h.rank].emplace(std::move(s));
                       ++count;
                       o_.log("waiting for workers (" + std::to_string(count) + "/" + std::to_string(size()) + ")");
                     }});
    run_until(deadline, [&] { return count == size(); }, [&] {
      std::string missing;
      for (int r = 1; r < size(); ++r)
        if (!joined[std::size_t(r)]) missing += (missing.empty() ? "" : ", ") + peer_name(r);
      return "timed out after " + std::to_string(o_.connect_timeout.count() / 1000) + " s waiting for workers (" +
             std::to_string(count) + "/" + std::to_string(size()) + "); missing: " + missing;
    });
    stop_accepting();
    if (o_.addresses.size() <= 1 && peers_[0].empty()) peers_[0] = o_.addresses.empty() ? "" : o_.addresses[0];
    // the address table: count, then (length, bytes) per rank
    std::string table;
    auto put32 = [&](std::uint32_t v) { table.append(reinterpret_cast<const char*>(&v), 4); };
    put32(detail::table_magic);
    put32(std::uint32_t(size()));
    for (const auto& p : peers_) put32(std::uint32_t(p.size())), table += p;
    for (int r = 1; r < size(); ++r) write_all(*joined[std::size_t(r)], table.data(), table.size(), peer_name(r));
  }

  void join_master(clock::time_point deadline) {
    const std::string master = o_.addresses[0];
    asio::ip::tcp::socket s = handshake_with(0, master, detail::hello_kind::join, deadline);
    std::uint32_t head[2];
    read_exact(s, head, sizeof head, deadline, "rank 0 (" + master + ") sending the address table");
    if (head[0] != detail::table_magic || head[1] != std::uint32_t(size()))
      throw comm_error("ring_tcp: rank 0 (" + master + ") sent a malformed address table");
    for (int r = 0; r < size(); ++r) {
      std::uint32_t len = 0;
      read_exact(s, &len, 4, deadline, "rank 0 (" + master + ") sending the address table");
      if (len > 300) throw comm_error("ring_tcp: rank 0 (" + master + ") sent a malformed address table");
      std::string a(len, '\0');
      read_exact(s, a.data(), len, deadline, "rank 0 (" + master + ") sending the address table");
      if (o_.addresses.size() <= 1 || peers_[std::size_t(r)].empty()) peers_[std::size_t(r)] = a;
    }
    if (peers_[0].empty()) peers_[0] = master;
  }

  void read_exact(asio::ip::tcp::socket& s, void* p, std::size_t n, clock::time_point deadline, const std::string& who) {
    std::error_code ec;
    asio::async_read(s, asio::buffer(p, n), [&](std::error_code e, std::size_t) { ec = e; });
    io_.restart();
    io_.run_until(deadline);
    if (!io_.stopped()) {
      std::error_code ig;
      s.close(ig);
      io_.restart();
      io_.run();
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": timed out waiting for " + who);
    }
    if (ec) throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": lost " + who + ": " + ec.message());
  }

  asio::ip::tcp::socket connect_with_retry(const std::string& address, clock::time_point deadline, const std::string& who) {
    auto [host, port] = detail::split_address(address);
    auto backoff = std::chrono::milliseconds(50);
    auto last_log = clock::now();
    for (;;) {
      asio::ip::tcp::socket s(io_);
      std::error_code ec;
      asio::ip::tcp::resolver res(io_);
      auto eps = res.resolve(host, std::to_string(port), ec);
      if (!ec) asio::connect(s, eps, ec);
      if (!ec) {
        s.set_option(asio::ip::tcp::no_delay(true), ec);
        return s;
      }
      if (clock::now() + backoff > deadline)
        throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": could not reach " + who + " within " +
                         std::to_string(o_.connect_timeout.count() / 1000) + " s: " + ec.message());
      if (clock::now() - last_log > std::chrono::seconds(10)) {
        o_.log("rank " + std::to_string(rank()) + " waiting for " + who + " (" + ec.message() + ")");
        last_log = clock::now();
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  /// Connects to the next rank, its ring connection then its heartbeat one, while accepting both from
  /// the previous rank: the handshakes make progress at once (each side waits for the other's answer,
  /// so doing them in turn would deadlock the ring). Then TLS on the ring connections.
  void connect_ring(clock::time_point deadline) {
    std::optional<asio::ip::tcp::socket> prev, prev_beat;
    detail::proof prev_key{}, next_key{};
    const auto slot = [&](const detail::hello& h) -> auto& { return h.kind == std::uint8_t(detail::hello_kind::beat) ? prev_beat : prev; };
    start_accepting({expectation(detail::hello_kind::ring, prev_rank()),
                     [&](const detail::hello& h) { return slot(h) ? "the previous rank is already connected" : std::string(); },
                     [&](asio::ip::tcp::socket& s, const detail::hello& h, const detail::proof& key) {
                       std::error_code ig;
                       s.set_option(asio::ip::tcp::no_delay(true), ig);
                       if (&slot(h) == &prev) prev_key = key;
                       slot(h).emplace(std::move(s));
                     },
                     detail::hello_kind::beat});
    next_ = handshake_with(next_rank(), peers_[std::size_t(next_rank())], detail::hello_kind::ring, deadline, &next_key);
    next_beat_ = handshake_with(next_rank(), peers_[std::size_t(next_rank())], detail::hello_kind::beat, deadline);
    run_until(deadline, [&] { return prev && prev_beat; }, [&] { return "timed out waiting for " + peer_name(prev_rank()) + " to connect"; });
    stop_accepting();
    prev_ = std::move(*prev), prev_beat_ = std::move(*prev_beat);
    if (o_.tls) start_tls(prev_key, next_key, deadline);
    // hand the listener to the stranger-rejecting thread
    stray_listener_.emplace(stray_io_);
    std::error_code ec;
    const auto protocol = listener_.local_endpoint().protocol();
    const auto fd = listener_.release(ec);
    stray_listener_->assign(protocol, fd, ec);
  }

  /// After the rendezvous: accepts connections only to log and close them.
  void reject_strangers() {
    std::function<void()> accept = [&] {
      auto s = std::make_shared<asio::ip::tcp::socket>(stray_io_);
      stray_listener_->async_accept(*s, [&, s](std::error_code ec) {
        if (ec == asio::error::operation_aborted || !stray_listener_->is_open()) return;
        if (!ec) {
          std::error_code ig;
          const auto r = s->remote_endpoint(ig);
          o_.log("rejected connection from " + r.address().to_string() + ":" + std::to_string(r.port()) +
                 ": the ring is complete (a stray client or a worker of another job)");
          s->close(ig);
        }
        accept();
      });
    };
    accept();
    stray_io_.run();
  }

  /// The TLS handshakes of both ring connections, run at once (each side waits for the other's
  /// answer, as in connect_ring).
  void start_tls(const detail::proof& prev_key, const detail::proof& next_key, clock::time_point deadline) {
    tls_ctx_.emplace();
    in_tls_ = std::make_unique<detail::tls_link>(tls_ctx_->get(), prev_.native_handle(), true, prev_key);
    out_tls_ = std::make_unique<detail::tls_link>(tls_ctx_->get(), next_.native_handle(), false, next_key);
    bool in_done = false, out_done = false;
    auto step = [&](detail::tls_link& l, bool& done, short& events, int peer) {
      try {
        if (!done) done = l.handshake(events);
      } catch (const comm_error& e) {
        throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + peer_name(peer) + ": " + e.what());
      }
    };
    for (;;) {
      short in_events = 0, out_events = 0;
      step(*in_tls_, in_done, in_events, prev_rank());
      step(*out_tls_, out_done, out_events, next_rank());
      if (in_done && out_done) return;
      pollfd fds[2];
      nfds_t n = 0;
      if (!in_done) fds[n++] = {prev_.native_handle(), in_events, 0};
      if (!out_done) fds[n++] = {next_.native_handle(), out_events, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0)
        throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": timed out in the TLS handshake with " +
                         peer_name(in_done ? next_rank() : prev_rank()));
      ::poll(fds, n, int(std::min<long long>(left, 1 << 30)));
    }
  }

  ring_tcp_options o_;
  std::string token_;
  std::optional<detail::tls_context> tls_ctx_;
  asio::io_context io_;
  asio::ip::tcp::acceptor listener_;
  asio::ip::tcp::socket prev_, next_;
  asio::ip::tcp::socket prev_beat_{io_}, next_beat_{io_};  // the heartbeats' connections
  std::unique_ptr<detail::heartbeat> heartbeat_;            // on them, once the ring is up
  std::uint16_t listen_port_ = 0;
  std::vector<std::string> peers_;
  std::unique_ptr<detail::tls_link> in_tls_, out_tls_;  // on prev_ and next_, with TLS
  admission admission_;                                 // the listening side's rules while accepting_
  bool accepting_ = false;
  std::set<incoming_ptr> pending_;  // handshakes in progress
  struct refusal {
    std::string from, why;
    clock::time_point until;
  };
  std::map<std::uint32_t, refusal> refused_;  // ranks whose claimants failed on credentials (note_refusal)
  std::size_t capped_ = 0;          // connections closed at the handshake cap

  asio::io_context stray_io_;
  std::optional<asio::ip::tcp::acceptor> stray_listener_;
  std::thread stray_;
};

}  // namespace dtrain::comm
