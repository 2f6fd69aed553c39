#pragma once
/// \file
/// The parameter server job's connections: one TCP connection per pair of tasks that talk (the
/// coordinator to every worker and every ps task, every worker to every ps task), each opened with the
/// ring's handshake (comm/handshake.hpp: magic, protocol version, the job's fingerprint, the task, and
/// with a job token the mutual HMAC proof), then carrying requests and their replies one at a time.
///
/// Wire (host byte order): a message is a 24-byte header (magic "DTRP", kind, payload length, CRC-32C of
/// the payload) and the payload. The receiver says how long a payload it accepts before reading one,
/// and checks the checksum before using it: a message that does not fit is a protocol error naming the
/// peer, never an allocation sized by the sender. An `error` message carries the peer's reason as text.
///
/// Tasks are numbered across the job (`task_numbering`): the chief 0, workers 1..W, ps tasks W+1..W+P.
///
/// With TLS (`endpoint_identity::tls`, DTRAIN_TLS=1) every connection is the ring's TLS 1.3 keyed by the
/// job token (comm/tls.hpp) once the handshake is done; both ends must agree (the hello says it).
///
/// Liveness: every connection has the kernel watch its peer (`watch_liveness`): a peer whose host goes
/// down or is cut off fails the connection within about the liveness timeout, whether a request to it
/// is unanswered or the connection is quiet. A peer that is only slow, or a process stopped as a whole
/// (its kernel still answers), is waited for.

#include <asio.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/core/crc32c.hpp"
#include "dtrain/distribute/cluster.hpp"
#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/distribute/comm/handshake.hpp"
#include "dtrain/distribute/comm/rendezvous.hpp"
#include "dtrain/distribute/comm/tls.hpp"

namespace dtrain::ps {

using clock = std::chrono::steady_clock;

/// What a message asks or answers.
enum class message : std::uint32_t {
  ok = 1,       // a request done; payload: what it returns
  error = 2,    // a request refused or failed; payload: the reason (text)
  init = 3,     // coordinator -> ps: the placement and optimizer (JSON), then `values`
  values = 4,   // floats: a ps task's values, in its regions' order
  pull = 5,     // -> ps: send your values
  push = 6,     // -> ps: the step number (8 bytes), then the gradients of your regions; apply them
  step = 7,     // coordinator -> worker: run the step numbered in the payload (8 bytes)
  ran_out = 8,  // worker -> coordinator: my data ran out
  stop = 9,     // coordinator -> worker: training is over
  stats = 10,   // coordinator -> ps: how many steps you applied (JSON)
  shutdown = 11,  // coordinator -> ps: the job is over
  ps_failed = 12,  // worker -> coordinator: a ps task failed (text: which, and how)
  state = 13,      // coordinator -> ps: your optimizer's step count and slot count (JSON), then `values`:
                   // your values, then each slot's values
  closure = 14,    // coordinator -> worker: run a scheduled function (its number, the step's, its arguments);
                   // answered by `ok` (its result and the metric totals it added), `failed` or `ps_failed`
  sync = 15,       // coordinator -> worker: the coordinator's join / fetch / done returned (payload: its answer)
  failed = 16,     // worker -> coordinator: the scheduled function threw (text: what)
};

inline constexpr std::uint32_t message_magic = 0x50525444;  // "DTRP"

/// A ps task failed (the message names it): the job cannot go on.
struct ps_task_failed : comm_error {
  using comm_error::comm_error;
};

/// The peer closed the connection between two messages (its program ended, or it failed then).
struct connection_closed : comm_error {
  using comm_error::comm_error;
};

struct message_header {
  std::uint32_t magic = message_magic;
  std::uint32_t kind = 0;
  std::uint64_t length = 0;
  std::uint32_t checksum = 0;
  std::uint32_t pad = 0;
};
static_assert(sizeof(message_header) == 24);

/// The job's tasks in one numbering: the chief 0, the workers 1..W, the ps tasks W+1..W+P.
struct task_numbering {
  int workers = 0, ps = 0;
  int total() const { return 1 + workers + ps; }
  int worker(int i) const { return 1 + i; }
  int ps_task(int j) const { return 1 + workers + j; }
  std::string name(int n) const {
    if (n == 0) return "chief:0";
    if (n <= workers) return "worker:" + std::to_string(n - 1);
    return "ps:" + std::to_string(n - 1 - workers);
  }
};

/// A stable hash (FNV-1a) of every job and address of the spec: tasks of another job are refused.
inline std::uint64_t job_fingerprint(const cluster_spec& spec) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix("parameter_server");
  for (const auto& [job, tasks] : spec.jobs) {
    mix(job);
    for (const auto& a : tasks) mix(a);
  }
  return h;
}

/// One connection to another task of the job: requests and replies, one at a time.
class channel {
 public:
  channel(std::unique_ptr<asio::io_context> io, asio::ip::tcp::socket s, std::string peer)
      : io_(std::move(io)), s_(std::move(s)), peer_(std::move(peer)) {}
  channel(channel&&) noexcept = default;
  /// The old socket goes before the io_context it was made on (a defaulted assignment would replace the
  /// context first and leave the old socket on a destroyed one).
  channel& operator=(channel&& o) noexcept {
    if (this != &o) {
      close();
      tls_ = std::move(o.tls_);
      tls_context_ = std::move(o.tls_context_);
      s_ = std::move(o.s_);
      io_ = std::move(o.io_);
      peer_ = std::move(o.peer_);
    }
    return *this;
  }

  /// From now on the connection is TLS keyed by `key` (`server`: the accepting end); the TLS handshake
  /// must end by `deadline`.
  void start_tls(std::shared_ptr<comm::detail::tls_context> ctx, bool server, const comm::detail::proof& key,
                 clock::time_point deadline) {
    tls_context_ = std::move(ctx);
    tls_ = std::make_unique<comm::detail::tls_link>(tls_context_->get(), s_.native_handle(), server, key);
    short events = 0;
    try {
      while (!tls_->handshake(events))
        if (!wait(events, deadline)) throw comm_error("no TLS handshake within the deadline");
    } catch (const comm_error& e) {
      fail(std::string("failed the TLS handshake: ") + e.what());
    }
  }

  const std::string& peer() const { return peer_; }

  /// Sends a message whose payload is the concatenation of `parts`.
  void send(message kind, std::span<const asio::const_buffer> parts) {
    message_header h;
    h.kind = std::uint32_t(kind);
    for (const auto& b : parts) {
      h.length += b.size();
      h.checksum = dtrain::detail::crc32c(b.data(), b.size(), h.checksum);
    }
    std::vector<asio::const_buffer> all{asio::buffer(&h, sizeof h)};
    all.insert(all.end(), parts.begin(), parts.end());
    std::error_code ec;
    if (tls_) {
      std::string bytes;
      for (const auto& b : all) bytes.append(static_cast<const char*>(b.data()), b.size());
      for (std::size_t done = 0; done < bytes.size();) {
        short events = 0;
        const long w = tls_->write(bytes.data() + done, bytes.size() - done, events, ec);
        if (w < 0) throw comm_error("lost " + peer_ + ": " + tls_->describe(ec));
        if (w > 0) done += std::size_t(w);
        else wait(events, clock::time_point::max());
      }
      return;
    }
    asio::write(s_, all, ec);
    if (ec) throw comm_error("lost " + peer_ + ": " + ec.message());
  }
  void send(message kind, std::string_view text = {}) {
    const asio::const_buffer b = asio::buffer(text.data(), text.size());
    send(kind, std::span<const asio::const_buffer>(&b, 1));
  }
  void send(message kind, std::uint64_t number) {
    const asio::const_buffer b = asio::buffer(&number, sizeof number);
    send(kind, std::span<const asio::const_buffer>(&b, 1));
  }

  /// The next message's header, checked: an `error` message is thrown as the peer's reason; a payload
  /// longer than `max_length` is a protocol error. The payload is read next, with `read`.
  message_header receive(std::uint64_t max_length) {
    message_header h;
    std::error_code ec;
    const std::size_t got = read(asio::buffer(&h, sizeof h), ec);
    if (ec == asio::error::eof && got == 0) throw connection_closed(peer_ + " closed the connection");
    if (ec) throw comm_error("lost " + peer_ + ": " + ec.message());
    if (h.magic != message_magic) fail("sent something that is not a dtrain parameter server message");
    if (h.kind == std::uint32_t(message::error)) {
      if (h.length > 65536) fail("sent an error message of " + std::to_string(h.length) + " bytes");
      std::string why(h.length, '\0');
      read_payload(h, {asio::buffer(why)});
      throw comm_error(peer_ + ": " + why);
    }
    if (h.length > max_length)
      fail("sent a message of kind " + std::to_string(h.kind) + " and " + std::to_string(h.length) + " bytes, at most " +
           std::to_string(max_length) + " expected");
    return h;
  }
  /// Reads the payload of `h` into `parts` (exactly its length) and checks its checksum.
  void read_payload(const message_header& h, std::vector<asio::mutable_buffer> parts) {
    std::uint64_t n = 0;
    for (const auto& b : parts) n += b.size();
    if (n != h.length) fail("sent " + std::to_string(h.length) + " bytes where " + std::to_string(n) + " were expected");
    std::error_code ec;
    for (const auto& b : parts) {
      read(b, ec);
      if (ec) throw comm_error("lost " + peer_ + ": " + ec.message());
    }
    std::uint32_t c = 0;
    for (const auto& b : parts) c = dtrain::detail::crc32c(b.data(), b.size(), c);
    if (c != h.checksum) fail("sent a message whose checksum does not match (corrupted on the way)");
  }
  /// A whole message of kind `want` with at most `max_length` bytes, as text.
  std::string receive_text(message want, std::uint64_t max_length) {
    const message_header h = receive(max_length);
    expect(h, want);
    std::string s(h.length, '\0');
    read_payload(h, {asio::buffer(s)});
    return s;
  }
  /// A message of kind `want` with an 8-byte number.
  std::uint64_t receive_number(message want) {
    const message_header h = receive(8);
    expect(h, want);
    std::uint64_t n = 0;
    read_payload(h, {asio::buffer(&n, sizeof n)});
    return n;
  }
  void expect(const message_header& h, message want) {
    if (h.kind != std::uint32_t(want))
      fail("sent a message of kind " + std::to_string(h.kind) + " where kind " + std::to_string(std::uint32_t(want)) +
           " was expected");
  }
  [[noreturn]] void fail(const std::string& what) {
    std::error_code ig;
    s_.close(ig);
    throw comm_error(peer_ + " " + what);
  }
  /// Unblocks a read or write of another thread (it fails): the connection is over.
  void interrupt() { ::shutdown(s_.native_handle(), SHUT_RDWR); }
  void close() {
    std::error_code ig;
    s_.shutdown(asio::ip::tcp::socket::shutdown_both, ig);
    s_.close(ig);
  }

 private:
  /// Reads `b` whole (through TLS when on); returns the bytes read before an error.
  std::size_t read(asio::mutable_buffer b, std::error_code& ec) {
    if (!tls_) return asio::read(s_, b, ec);
    auto* p = static_cast<char*>(b.data());
    std::size_t done = 0;
    while (done < b.size()) {
      short events = 0;
      const long r = tls_->read(p + done, b.size() - done, events, ec);
      if (r < 0) {
        if (ec) return done;  // the connection's error (eof: the peer closed it)
        fail("sent what TLS rejects: " + tls_->describe(ec));
      }
      if (r > 0) done += std::size_t(r);
      else wait(events, clock::time_point::max());
    }
    return done;
  }
  /// Waits for `events` on the socket until `deadline`: false when it passed.
  bool wait(short events, clock::time_point deadline) {
    pollfd fd{s_.native_handle(), events ? events : short(POLLIN), 0};
    for (;;) {
      const auto left = deadline == clock::time_point::max()
                            ? -1
                            : int(std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count()));
      const int r = ::poll(&fd, 1, left);
      if (r > 0) return true;
      if (r == 0) return false;
      if (errno != EINTR) return true;  // the next read or write reports it
    }
  }

  std::unique_ptr<asio::io_context> io_;
  asio::ip::tcp::socket s_;
  std::string peer_;
  std::shared_ptr<comm::detail::tls_context> tls_context_;
  std::unique_ptr<comm::detail::tls_link> tls_;
};

namespace detail {
/// Reads exactly n bytes before `deadline` (the handshake's reads: a silent peer cannot stall it).
inline bool read_before(asio::ip::tcp::socket& s, void* p, std::size_t n, clock::time_point deadline) {
  auto* out = static_cast<unsigned char*>(p);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return false;
    pollfd fd{s.native_handle(), POLLIN, 0};
    if (::poll(&fd, 1, int(std::min<long long>(left, 1000))) <= 0) continue;
    std::error_code ec;
    const std::size_t got = s.read_some(asio::buffer(out, n), ec);
    if (ec) return false;
    out += got, n -= got;
  }
  return true;
}

inline comm::detail::hello make_hello(int me, const task_numbering& t, std::uint64_t fingerprint, bool token, bool tls) {
  comm::detail::hello h;
  h.tls = tls ? 1 : 0;
  h.kind = std::uint8_t(comm::detail::hello_kind::ps);
  h.world_size = std::uint32_t(t.total());
  h.rank = std::uint32_t(me);
  h.fingerprint = fingerprint;
  h.authenticated = token ? 1 : 0;
  h.nonce = comm::detail::make_nonce();
  return h;
}
}  // namespace detail

/// What both ends of a connection know: who this task is, the job, the token.
struct endpoint_identity {
  int me = 0;
  task_numbering tasks{};
  std::uint64_t fingerprint = 0;
  std::string token{};
  std::chrono::milliseconds handshake_timeout{5'000};
  std::chrono::milliseconds liveness_timeout{10'000};  // zero: the kernel's defaults (hours)
  /// TLS on every connection (keyed by the token, which it needs); the context all of them share.
  std::shared_ptr<comm::detail::tls_context> tls{};
};

/// Has the kernel check the peer of `s`: keepalive probes after a third of `t` of quiet, and the
/// connection fails once data or probes stay unacknowledged for `t` (TCP_USER_TIMEOUT).
inline void watch_liveness(asio::ip::tcp::socket& s, std::chrono::milliseconds t) {
  if (t.count() <= 0) return;
  const int fd = s.native_handle(), on = 1, count = 3;
  const int idle = std::max(1, int(t.count() / 3000)), interval = std::max(1, int(t.count() / 6000));
  const unsigned user = unsigned(t.count());
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
}

namespace detail {
/// Connects `s` to the first of `eps` that accepts before `until`: a host that does not answer at all
/// (down, cut off) costs no more than that, not the kernel's minutes of SYN retries.
inline void connect_before(asio::ip::tcp::socket& s, const asio::ip::tcp::resolver::results_type& eps, clock::time_point until,
                           std::error_code& ec) {
  ec = asio::error::host_not_found;
  for (const auto& e : eps) {
    std::error_code ig;
    s.close(ig);
    s.open(e.endpoint().protocol(), ec);
    if (!ec) s.non_blocking(true, ec);
    if (!ec) s.connect(e.endpoint(), ec);
    if (ec == asio::error::in_progress || ec == asio::error::would_block) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
      pollfd fd{s.native_handle(), POLLOUT, 0};
      if (::poll(&fd, 1, int(std::clamp<long long>(left, 0, 1 << 30))) <= 0) {
        ec = asio::error::timed_out;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
      ec = err ? std::error_code(err, std::system_category()) : std::error_code();
    }
    if (!ec) s.non_blocking(false, ec);
    if (!ec) return;
  }
}
}  // namespace detail

/// Connects to task `peer` at `address` (retrying until `deadline`) and runs the handshake.
inline channel connect(const endpoint_identity& id, int peer, const std::string& address, clock::time_point deadline) {
  namespace cd = comm::detail;
  const std::string name = id.tasks.name(peer) + " (" + address + ")";
  auto [host, port] = comm::detail::split_address(address);
  auto backoff = std::chrono::milliseconds(20);
  for (;;) {
    auto io = std::make_unique<asio::io_context>();
    asio::ip::tcp::socket s(*io);
    std::error_code ec;
    asio::ip::tcp::resolver res(*io);
    auto eps = res.resolve(host, std::to_string(port), ec);
    if (!ec) detail::connect_before(s, eps, std::min(deadline, clock::now() + id.handshake_timeout), ec);
    if (!ec) {
      s.set_option(asio::ip::tcp::no_delay(true), ec);
      watch_liveness(s, id.liveness_timeout);
      const cd::hello mine = detail::make_hello(id.me, id.tasks, id.fingerprint, !id.token.empty(), bool(id.tls));
      cd::hello theirs;
      asio::write(s, asio::buffer(&mine, sizeof mine), ec);
      const auto until = std::min(deadline, clock::now() + id.handshake_timeout);
      if (!ec && detail::read_before(s, &theirs, sizeof theirs, until)) {
        const std::string why =
            cd::check_hello(theirs, {cd::hello_kind::ps, std::uint32_t(id.tasks.total()), id.fingerprint, peer, !id.token.empty(), bool(id.tls)});
        if (!why.empty()) throw comm_error(name + " is not this job's task: " + why);
        if (!theirs.accepted) throw comm_error(name + " refused this task (" + id.tasks.name(id.me) + ")");
        if (!id.token.empty()) {
          cd::proof p{};
          if (!detail::read_before(s, p.data(), p.size(), until) || !cd::verify_proof(id.token, cd::server_label, mine, theirs, p))
            throw comm_error(name + " did not prove it holds the job token");
          const cd::proof own = cd::make_proof(id.token, cd::client_label, mine, theirs);
          asio::write(s, asio::buffer(own), ec);
        }
        if (!ec) {
          channel c(std::move(io), std::move(s), name);
          if (id.tls) c.start_tls(id.tls, false, cd::make_proof(id.token, cd::tls_label, mine, theirs), until);
          return c;
        }
      }
    }
    if (clock::now() + backoff > deadline)
      throw comm_error(id.tasks.name(id.me) + " could not reach " + name + (ec ? ": " + ec.message() : std::string()));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

/// A listening socket that admits tasks of the job: `accept(allowed)` waits for one whose task number
/// `allowed` approves, runs the handshake, and refuses (logging why) anyone else.
class listener {
 public:
  listener(const endpoint_identity& id, const std::string& address, std::function<void(const std::string&)> log)
      : id_(id), io_(std::make_unique<asio::io_context>()), a_(*io_), log_(std::move(log)) {
    auto [host, port] = comm::detail::split_address(address);
    std::error_code ec;
    asio::ip::tcp::resolver res(*io_);
    auto eps = res.resolve(host, std::to_string(port), ec);
    if (ec || eps.empty()) throw config_error(id.tasks.name(id.me) + ": cannot resolve its address " + address);
    const asio::ip::tcp::endpoint ep(eps.begin()->endpoint().address().is_loopback() ? eps.begin()->endpoint().address()
                                                                                     : asio::ip::address_v4::any(), port);
    a_.open(ep.protocol(), ec);
    if (!ec) a_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a_.bind(ep, ec);
    if (!ec) a_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw comm_error(id.tasks.name(id.me) + ": cannot listen on " + address + ": " + ec.message());
  }

  /// The next admitted connection, or nullopt once `deadline` passes (or `stop()` was called).
  std::optional<channel> accept(const std::function<bool(int)>& allowed, clock::time_point deadline) {
    namespace cd = comm::detail;
    while (!stopped_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd fd{a_.native_handle(), POLLIN, 0};
      if (::poll(&fd, 1, int(std::min<long long>(left, 200))) <= 0) continue;
      auto io = std::make_unique<asio::io_context>();
      asio::ip::tcp::socket s(*io);
      std::error_code ec;
      a_.accept(s, ec);
      if (ec) continue;
      s.set_option(asio::ip::tcp::no_delay(true), ec);
      watch_liveness(s, id_.liveness_timeout);
      std::string from = "unknown";
      if (auto r = s.remote_endpoint(ec); !ec) from = r.address().to_string() + ":" + std::to_string(r.port());
      cd::hello theirs;
      const auto until = clock::now() + id_.handshake_timeout;
      if (!detail::read_before(s, &theirs, sizeof theirs, until)) {
        log_("refused a connection from " + from + ": no handshake within the deadline");
        continue;
      }
      std::string why = cd::check_hello(theirs, {cd::hello_kind::ps, std::uint32_t(id_.tasks.total()), id_.fingerprint, -1,
                                                 !id_.token.empty(), bool(id_.tls)});
      if (why.empty() && !allowed(int(theirs.rank)))
        why = id_.tasks.name(int(theirs.rank)) + " has no business with " + id_.tasks.name(id_.me) + " now";
      cd::hello mine = detail::make_hello(id_.me, id_.tasks, id_.fingerprint, !id_.token.empty(), bool(id_.tls));
      mine.accepted = why.empty() ? 1 : 0;
      asio::write(s, asio::buffer(&mine, sizeof mine), ec);
      if (!why.empty() || ec) {
        log_("refused a connection from " + from + ": " + (why.empty() ? ec.message() : why));
        continue;
      }
      if (!id_.token.empty()) {
        const cd::proof own = cd::make_proof(id_.token, cd::server_label, theirs, mine);
        asio::write(s, asio::buffer(own), ec);
        cd::proof p{};
        if (ec || !detail::read_before(s, p.data(), p.size(), until) ||
            !cd::verify_proof(id_.token, cd::client_label, theirs, mine, p)) {
          log_("refused a connection from " + from + ": it did not prove it holds the job token");
          continue;
        }
      }
      channel c(std::move(io), std::move(s), id_.tasks.name(int(theirs.rank)));
      if (id_.tls) try {
          c.start_tls(id_.tls, true, cd::make_proof(id_.token, cd::tls_label, theirs, mine), until);
        } catch (const comm_error& e) {
          log_("refused a connection from " + from + ": " + e.what());
          continue;
        }
      return c;
    }
    return std::nullopt;
  }
  void stop() { stopped_ = true; }

 private:
  endpoint_identity id_;
  std::unique_ptr<asio::io_context> io_;
  asio::ip::tcp::acceptor a_;
  std::function<void(const std::string&)> log_;
  std::atomic<bool> stopped_{false};
};

}  // namespace dtrain::ps
