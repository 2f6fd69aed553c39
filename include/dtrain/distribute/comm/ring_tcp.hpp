#pragma once
/// \file
/// `ring_tcp`: the communicator of multi-worker training over TCP (standalone Asio).
///
/// Rendezvous: every rank listens on its own address. Ranks 1..n-1 join rank 0 (retrying with backoff
/// until the connect deadline); rank 0 logs `waiting for workers (k/n)` as they arrive, then sends
/// everyone the table of ring addresses (so launchers that give only rank 0's address, such as
/// torchrun or mpirun, work too). Then each rank connects to the next and accepts the previous one.
/// Every connection starts with a handshake (handshake.hpp: magic, protocol version, cluster
/// fingerprint, rank, world size and, with a job token, a mutual HMAC proof); a mismatch closes it with
/// a logged reason. Handshakes on the listening side run concurrently, each with its own deadline and
/// at most `max_pending_handshakes` at once, so silent connections (a port scanner) cannot stall the
/// rendezvous. After it a background thread keeps accepting on the listening port only to reject and
/// log strangers, so they never disturb training.
///
/// Data moves in frames whose fixed header (magic, type, collective sequence number, step, offset,
/// length) is checked against what this rank expects BEFORE any payload is read: a frame that does
/// not match is a protocol error, never an allocation. All-reduce is reduce-scatter then all-gather
/// around the ring (segments split as evenly as possible: the first n % p are one element longer,
/// empty ones allowed), each step sending and receiving at once in chunks of `chunk_bytes` (1 MiB by
/// default: on loopback it beat 4 MiB, since a smaller chunk is reduced while the next one arrives),
/// reducing each chunk as it lands. Asynchronous collectives run in order on one communication
/// thread, so `all_reduce_async` overlaps with the caller's work (the model's backward pass); a
/// blocking one with nothing queued runs on the caller's thread, saving two thread hand-offs.
///
/// Deadlines: every blocking wait has one (`operation_timeout`, default 60 s; `connect_timeout`,
/// default 300 s). The first error latches: it names the peer (rank, address), fails the pending
/// operations and is rethrown by every later call. Frames use the host's byte order (x86-64, arm64:
/// little endian); all ranks must share it.

#include <asio.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <chrono>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/distribute/comm/handshake.hpp"
#include "dtrain/distribute/comm/tls.hpp"

namespace dtrain::comm {

struct ring_tcp_options {
  int rank = 0;
  int world_size = 1;
  /// "host:port" of every rank in rank order, or of rank 0 alone (the others then listen on a free port).
  std::vector<std::string> addresses{};
  /// Hash of the cluster spec; peers with another fingerprint are refused.
  std::uint64_t fingerprint = 0;
  std::chrono::milliseconds operation_timeout{60'000};
  std::chrono::milliseconds connect_timeout{300'000};
  std::size_t chunk_bytes = std::size_t{1} << 20;  // frames; 1 MiB measured best on loopback (bench/README.md)
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
};

namespace detail {

inline constexpr std::uint32_t frame_magic = 0x46525444;  // "DTRF"
inline constexpr std::uint32_t table_magic = 0x54525444;  // "DTRT"
inline constexpr std::uint32_t abort_magic = 0x41525444;  // "DTRA": a rank failed; offset = its rank

struct frame_header {
  std::uint32_t magic = frame_magic;
  std::uint32_t seq = 0;   // collective number
  std::uint32_t step = 0;  // ring step within it
  std::uint32_t length = 0;
  std::uint64_t offset = 0;
  std::uint64_t reserved = 0;
};
static_assert(sizeof(frame_header) == 32);

/// What a received frame header is, checked against what the receiver expects next (collective `seq`,
/// ring `step`, byte `offset` within it, payload `length`) BEFORE any payload is read: data, an abort
/// naming the failed rank, or bad (with the reason). Nothing is ever sized from a header's claim.
struct frame_verdict {
  enum { data, abort, bad } kind = bad;
  int failed_rank = -1;  // abort: the rank that failed
  std::string why{};     // bad: what was expected
};
inline frame_verdict check_frame(const frame_header& h, std::uint32_t seq, std::uint32_t step, std::uint64_t offset,
                                 std::uint32_t length, int world_size) {
  if (h.magic == abort_magic && h.offset < std::uint64_t(world_size)) return {frame_verdict::abort, int(h.offset)};
  if (h.magic == frame_magic && h.seq == seq && h.step == step && h.offset == offset && h.length == length)
    return {frame_verdict::data};
  return {frame_verdict::bad, -1,
          "collective " + std::to_string(h.seq) + " step " + std::to_string(h.step) + " offset " + std::to_string(h.offset) +
              " length " + std::to_string(h.length) + "; expected collective " + std::to_string(seq) + " step " +
              std::to_string(step) + " offset " + std::to_string(offset) + " length " + std::to_string(length)};
}

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

class ring_tcp {
 public:
  using clock = std::chrono::steady_clock;
  using options_type = ring_tcp_options;

  /// Joins `cluster` (its ring's addresses, or rank 0's) with a strategy's options.
  static ring_tcp connect(const cluster_info& c, const communication_options& o) {
    return ring_tcp({.rank = c.rank, .world_size = c.world_size, .addresses = c.addresses(),
                     .fingerprint = c.fingerprint(), .operation_timeout = o.timeout,
                     .connect_timeout = o.connect_timeout, .chunk_bytes = o.chunk_bytes, .job_token = o.job_token,
                     .require_job_token = o.require_job_token, .tls = o.tls});
  }
  /// Connects the ring (blocks until every rank is there, or the connect deadline passes).
  explicit ring_tcp(ring_tcp_options o)
      : o_(std::move(o)), token_(o_.job_token ? *o_.job_token : job_token_from_environment()), listener_(io_), prev_(io_),
        next_(io_) {
    if (o_.world_size < 1 || o_.rank < 0 || o_.rank >= o_.world_size)
      throw config_error("ring_tcp: rank " + std::to_string(o_.rank) + " is not in a world of " +
                         std::to_string(o_.world_size));
    if (o_.world_size > 1 && o_.addresses.size() != std::size_t(o_.world_size) && o_.addresses.size() != 1)
      throw config_error("ring_tcp: need the addresses of all " + std::to_string(o_.world_size) +
                         " ranks or of rank 0 alone, got " + std::to_string(o_.addresses.size()));
    if (const char* v = std::getenv("DTRAIN_TLS"); v && std::string(v) == "1") o_.tls = true;
    if (o_.tls && token_.empty())
      throw config_error("ring_tcp: TLS (DTRAIN_TLS) is keyed by the job token: set DTRAIN_JOB_TOKEN or "
                         "DTRAIN_JOB_TOKEN_FILE too");
    if (!token_.empty() && token_.size() < min_job_token_size)
      throw config_error("ring_tcp: the job token has " + std::to_string(token_.size()) + " characters; use at least " +
                         std::to_string(min_job_token_size) + " random ones");
    if (o_.chunk_bytes < 4096) o_.chunk_bytes = 4096;
    if (!o_.log) o_.log = [](const std::string& s) { std::fprintf(stderr, "dtrain ring_tcp: %s\n", s.c_str()); };
    peers_.resize(std::size_t(o_.world_size));
    for (std::size_t i = 0; i < o_.addresses.size(); ++i) peers_[i] = o_.addresses[i];
    if (o_.world_size > 1) {
      check_job_token();
      rendezvous();
      worker_ = std::thread([this] { serve(); });
      stray_ = std::thread([this] { reject_strangers(); });
    }
  }
  ring_tcp(const ring_tcp&) = delete;
  ring_tcp& operator=(const ring_tcp&) = delete;
  ~ring_tcp() {
    {
      std::lock_guard lk(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    std::error_code ec;
    if (stray_.joinable()) {
      asio::post(stray_io_, [this] {
        std::error_code e;
        stray_listener_->close(e);
      });
      stray_.join();
    }
    prev_.close(ec), next_.close(ec);
  }

  int rank() const { return o_.rank; }
  int size() const { return o_.world_size; }
  /// "host:port" of a rank (after the rendezvous, for every rank).
  const std::string& address_of(int r) const { return peers_[std::size_t(r)]; }

  /// Completion of an asynchronous collective.
  class handle {
   public:
    handle() = default;
    explicit handle(std::shared_future<void> f) : f_(std::move(f)) {}
    void wait() {
      if (f_.valid()) f_.get();
    }

   private:
    std::shared_future<void> f_;
  };

  handle all_reduce_async(std::span<float> data, reduce_op op) {
    return submit([this, data, op] { ring_all_reduce(data, op); });
  }
  void all_reduce(std::span<float> data, reduce_op op) {
    run_now([this, data, op] { ring_all_reduce(data, op); });
  }
  void broadcast(std::span<std::byte> data, int root) {
    check_root(root);
    run_now([this, data, root] { ring_broadcast(data, root); });
  }
  void broadcast(std::span<float> data, int root) { broadcast(std::as_writable_bytes(data), root); }
  void all_gather(std::span<const float> in, std::span<float> out) {
    if (out.size() != in.size() * std::size_t(size()))
      throw value_error("all_gather: output holds " + std::to_string(out.size()) + " floats, need size() * " +
                        std::to_string(in.size()));
    run_now([this, in, out] { ring_all_gather(in, out); });
  }
  void barrier() {
    float token = 0.0f;
    all_reduce(std::span<float>(&token, 1), reduce_op::sum);
  }

 private:
  // ---- operation queue ----------------------------------------------------------------------------------

  /// Runs one collective (on whichever thread holds the turn), latching its failure.
  void execute(const std::function<void()>& job) {
    if (error_) std::rethrow_exception(error_);
    try {
      job();
    } catch (...) {
      {
        std::lock_guard lk(m_);
        error_ = std::current_exception();
      }
      std::error_code ec;
      prev_.close(ec), next_.close(ec);
      throw;
    }
  }
  /// A blocking collective: when nothing is queued it runs right here, saving two thread hand-offs
  /// (what small messages pay most for); otherwise it queues behind the others, keeping the order.
  void run_now(std::function<void()> job) {
    if (size() == 1) return job();  // no peers: the ring algorithms reduce to local copies
    {
      std::unique_lock lk(m_);
      if (error_) std::rethrow_exception(error_);
      if (!q_.empty() || running_) {
        lk.unlock();
        return submit(std::move(job)).wait();
      }
      running_ = true;
    }
    struct release {
      ring_tcp* self;
      ~release() {
        bool queued = false;
        {
          std::lock_guard lk(self->m_);
          self->running_ = false;
          queued = !self->q_.empty();
        }
        if (queued) self->cv_.notify_all();  // only a queued job waits for the turn (waking the idle worker costs a context switch)
      }
    } guard{this};
    execute(job);
  }
  handle submit(std::function<void()> job) {
    if (size() == 1) {
      job();
      return handle();
    }
    auto task = std::make_shared<std::packaged_task<void()>>([this, job = std::move(job)] { execute(job); });
    handle h(task->get_future().share());
    {
      std::lock_guard lk(m_);
      if (error_) std::rethrow_exception(error_);
      q_.push_back([task] { (*task)(); });
    }
    cv_.notify_all();
    return h;
  }
  void serve() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return (stopping_ && q_.empty()) || (!q_.empty() && !running_); });
        if (q_.empty()) return;
        job = std::move(q_.front());
        q_.pop_front();
        running_ = true;
      }
      job();  // a failure is stored in the job's future and latched in error_
      {
        std::lock_guard lk(m_);
        running_ = false;
      }
      cv_.notify_all();
    }
  }

  // ---- I/O with deadlines -----------------------------------------------------------------------------------

  std::string peer_name(int r) const {
    return "rank " + std::to_string(r) + " (" + (peers_[std::size_t(r)].empty() ? "?" : peers_[std::size_t(r)]) + ")";
  }
  int prev_rank() const { return (rank() + size() - 1) % size(); }
  int next_rank() const { return (rank() + 1) % size(); }

  // ---- rendezvous ----------------------------------------------------------------------------------------

  void rendezvous() {
    const auto deadline = clock::now() + o_.connect_timeout;
    listen();
    if (rank() == 0) gather_joins(deadline);
    else join_master(deadline);
    connect_ring(deadline);
    o_.log("rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " connected: previous " +
           peer_name(prev_rank()) + ", next " + peer_name(next_rank()) +
           (token_.empty() ? "" : o_.tls ? " (authenticated by the job token, TLS 1.3)" : " (authenticated by the job token)"));
  }

  /// Without a job token anyone who can reach a worker's port and read TF_CONFIG can join: fine on
  /// loopback, worth one warning (or a refusal, by option) anywhere else.
  void check_job_token() {
    const bool require = o_.require_job_token || [] {
      const char* v = std::getenv("DTRAIN_REQUIRE_JOB_TOKEN");
      return v && std::string(v) == "1";
    }();
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
      if (c->theirs.version != detail::protocol_version) return reply(c, detail::check_hello(c->theirs, admission_.expect));
      auto* rest = reinterpret_cast<char*>(&c->theirs) + detail::hello_prefix;
      asio::async_read(c->s, asio::buffer(rest, sizeof(detail::hello) - detail::hello_prefix),
                       [this, c](std::error_code e, std::size_t) {
                         if (e) return give_up(c, e.message());
                         std::string why = detail::check_hello(c->theirs, admission_.expect);
                         if (why.empty()) why = admission_.refuse(c->theirs);
                         reply(c, why);
                       });
    });
  }
  /// Answers a hello: accepted (with our proof when there is a token) or refused, with the reason logged.
  void reply(const incoming_ptr& c, const std::string& why) {
    c->mine = my_hello(detail::hello_kind(admission_.expect.kind));
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
        if (e) return give_up(c, e.message());
        if (!detail::verify_proof(token_, detail::client_label, c->theirs, c->mine, c->proof))
          return give_up(c, "its proof of the job token is wrong (a stranger, or a worker with another DTRAIN_JOB_TOKEN)");
        admit(c);
      });
    });
  }
  void admit(const incoming_ptr& c) {
    if (std::string why = admission_.refuse(c->theirs); !why.empty()) return give_up(c, why);  // taken meanwhile
    c->timer.cancel();
    pending_.erase(c);
    admission_.admit(c->s, c->theirs, tls_key(c->theirs, c->mine));
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
      if (io_.run_one_until(deadline) == 0 && clock::now() >= deadline) {
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

  /// Connects to the next rank while accepting the previous one: both handshakes make progress at
  /// once (each side waits for the other's answer, so doing them in turn would deadlock the ring).
  void connect_ring(clock::time_point deadline) {
    bool have_prev = false;
    detail::proof prev_key{}, next_key{};
    start_accepting({expectation(detail::hello_kind::ring, prev_rank()),
                     [&](const detail::hello&) { return have_prev ? "the previous rank is already connected" : std::string(); },
                     [&](asio::ip::tcp::socket& s, const detail::hello&, const detail::proof& key) {
                       std::error_code ig;
                       s.set_option(asio::ip::tcp::no_delay(true), ig);
                       prev_ = std::move(s);
                       prev_key = key;
                       have_prev = true;
                     }});
    next_ = handshake_with(next_rank(), peers_[std::size_t(next_rank())], detail::hello_kind::ring, deadline, &next_key);
    run_until(deadline, [&] { return have_prev; }, [&] { return "timed out waiting for " + peer_name(prev_rank()) + " to connect"; });
    stop_accepting();
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

  // ---- collectives --------------------------------------------------------------------------------------

  void check_root(int root) const {
    if (root < 0 || root >= size())
      throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size()));
  }

  /// One ring step of a collective: send `send_bytes` from `send` to the next rank while receiving
  /// `recv_bytes` from the previous one, both in frames of at most chunk_bytes. Received frames land in
  /// `recv` (in scratch when it is null) and the collective's on_frame runs for each. A step with a
  /// `gate` sends only what step `gate` has received (and on_frame processed) so far: in a ring, what a
  /// rank sends at step k is what it received at step k - 1, so the frames of step k leave while step
  /// k - 1 is still arriving and the ring never pauses between steps; a broadcast forwards what arrives.
  struct ring_step {
    const std::byte* send = nullptr;
    std::size_t send_bytes = 0;
    std::byte* recv = nullptr;
    std::size_t recv_bytes = 0;
    int gate = -1;
  };

  /// Non-blocking send to the next rank (through TLS when on; TLS takes iov[0] only): bytes sent (> 0),
  /// 0 when it would block (`events`: what to poll its socket for), -1 on failure (`ec`, or for a TLS
  /// failure an empty `ec` and protocol_error_ set).
  long send_some(iovec* iov, int k, short& events, std::error_code& ec) {
    if (out_tls_) {
      const long w = out_tls_->write(iov[0].iov_base, iov[0].iov_len, events, ec);
      if (w < 0 && !ec) protocol_error_ = "TLS with " + peer_name(next_rank()) + " failed: " + out_tls_->describe(ec);
      return w;
    }
    msghdr msg{};
    msg.msg_iov = iov, msg.msg_iovlen = std::size_t(k);
    for (;;) {
      const ssize_t w = ::sendmsg(next_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w >= 0) return long(w);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return events = POLLOUT, 0;
      ec = std::error_code(errno, std::system_category());
      return -1;
    }
  }
  /// Non-blocking receive from the previous rank, as send_some (eof when it closed).
  long receive_some(void* p, std::size_t n, short& events, std::error_code& ec) {
    if (in_tls_) {
      const long got = in_tls_->read(p, n, events, ec);
      if (got < 0 && !ec) protocol_error_ = peer_name(prev_rank()) + " sent data that failed TLS: " + in_tls_->describe(ec);
      return got;
    }
    for (;;) {
      const ssize_t got = ::recv(prev_.native_handle(), p, n, MSG_DONTWAIT);
      if (got > 0) return long(got);
      if (got == 0) return ec = asio::error::eof, -1;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return events = POLLIN, 0;
      ec = std::error_code(errno, std::system_category());
      return -1;
    }
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

  /// Runs the steps of one collective: frames leave in step order and arrive in step order, with
  /// non-blocking send/recv on the two sockets and poll() when neither can move. The deadline
  /// (operation_timeout) counts from the last byte that moved. `on_frame(step, offset, data, bytes)`.
  template <class OnFrame>
  void run_steps(const std::vector<ring_step>& steps, OnFrame&& on_frame) {
    const std::size_t ns = steps.size(), chunk = o_.chunk_bytes & ~std::size_t{63};
    if (ns == 0) return;
    std::vector<std::size_t>& done = done_;  // bytes received and processed, per step
    done.assign(ns, 0);
    std::size_t scratch = 0;
    for (const auto& st : steps)
      if (!st.recv) scratch = std::max(scratch, std::min(chunk, st.recv_bytes));
    if (scratch_.size() * 4 < scratch) scratch_.resize((scratch + 3) / 4);
    const int in_fd = prev_.native_handle(), out_fd = next_.native_handle();
    constexpr std::size_t head = sizeof(detail::frame_header);
    std::size_t ss = 0, sent = 0, out_n = 0, out_at = 0;      // send: step, its bytes sent; frame payload, bytes written
    std::size_t rs = 0, received = 0, in_n = 0, in_at = 0;  // receive: the same
    bool out_busy = false;
    std::byte* in_dst = nullptr;
    detail::frame_header out_h, in_h;
    std::error_code failure;
    int failed_peer = -1, reported = -1;
    bool timed_out = false, send_stalled = false;
    auto fail = [&](std::error_code ec, int peer) { failure = ec, failed_peer = peer; };
    protocol_error_.clear();
    auto deadline = clock::now() + o_.operation_timeout;
    for (;;) {
      bool progress = false, want_out = false, want_in = false;
      short in_events = POLLIN, out_events = POLLOUT;  // TLS may need the other direction
      for (;;) {  // send until the socket is full or the next frame has not arrived yet
        if (!out_busy) {
          while (ss < ns && sent >= steps[ss].send_bytes) ++ss, sent = 0;
          if (ss == ns) break;
          const ring_step& st = steps[ss];
          const std::size_t n = std::min(chunk, st.send_bytes - sent);
          if (st.gate >= 0 && done[std::size_t(st.gate)] < sent + n) break;
          out_h = detail::frame_header{};
          out_h.seq = seq_, out_h.step = std::uint32_t(ss), out_h.length = std::uint32_t(n), out_h.offset = sent;
          out_n = n, out_at = 0, out_busy = true;
        }
        iovec iov[2];
        int k = 0;
        if (out_at < head) iov[k++] = {reinterpret_cast<char*>(&out_h) + out_at, head - out_at};
        const std::size_t pay = out_at < head ? 0 : out_at - head;
        iov[k++] = {const_cast<std::byte*>(steps[ss].send + sent + pay), out_n - pay};
        std::error_code ec;
        const long w = send_some(iov, k, out_events, ec);
        if (w <= 0) {
          if (w == 0) want_out = true;
          else fail(ec ? ec : std::error_code(asio::error::invalid_argument), next_rank());
          break;
        }
        progress = true;
        out_at += std::size_t(w);
        if (out_at == head + out_n) sent += out_n, out_busy = false;
      }
      while (!failure) {  // receive until the socket is empty or a frame is complete (it may unblock a send)
        if (in_at == 0) {
          while (rs < ns && received >= steps[rs].recv_bytes) ++rs, received = 0;
          if (rs == ns) break;
        }
        const bool header = in_at < head;
        std::byte* p = header ? reinterpret_cast<std::byte*>(&in_h) + in_at : in_dst + (in_at - head);
        std::error_code ec;
        const long got = receive_some(p, header ? head - in_at : head + in_n - in_at, in_events, ec);
        if (got <= 0) {
          if (got == 0) want_in = true;
          else fail(ec ? ec : std::error_code(asio::error::invalid_argument), prev_rank());
          break;
        }
        progress = true;
        in_at += std::size_t(got);
        if (header) {
          if (in_at < head) continue;
          const std::size_t want = std::min(chunk, steps[rs].recv_bytes - received);
          const auto v = detail::check_frame(in_h, seq_, std::uint32_t(rs), received, std::uint32_t(want), size());
          if (v.kind == detail::frame_verdict::abort) {
            reported = v.failed_rank;
            fail(asio::error::connection_aborted, prev_rank());
            break;
          }
          if (v.kind == detail::frame_verdict::bad) {
            protocol_error_ = "unexpected frame from " + peer_name(prev_rank()) + " (" + v.why + ")";
            fail(asio::error::invalid_argument, prev_rank());
            break;
          }
          in_n = want;
          in_dst = steps[rs].recv ? steps[rs].recv + received : reinterpret_cast<std::byte*>(scratch_.data());
          continue;
        }
        if (in_at < head + in_n) continue;
        on_frame(rs, received, static_cast<const std::byte*>(in_dst), in_n);
        received += in_n, done[rs] = received, in_at = 0;
        break;
      }
      if (failure) break;
      if (!out_busy)
        while (ss < ns && sent >= steps[ss].send_bytes) ++ss, sent = 0;
      if (in_at == 0)
        while (rs < ns && received >= steps[rs].recv_bytes) ++rs, received = 0;
      if (ss == ns && rs == ns) return;
      if (progress) {
        deadline = clock::now() + o_.operation_timeout;
        continue;
      }
      pollfd fds[2];
      nfds_t nfds = 0;
      if (want_in) fds[nfds++] = {in_fd, in_events, 0};
      if (want_out) fds[nfds++] = {out_fd, out_events, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        send_stalled = want_out;  // the next rank stopped taking data: the stronger evidence
        break;
      }
      if (::poll(fds, nfds, int(std::min<long long>(left, 1 << 30))) < 0 && errno != EINTR)
        fail(std::error_code(errno, std::system_category()), rs < ns ? prev_rank() : next_rank());
    }
    if (!timed_out && reported < 0 && failed_peer == next_rank())
      reported = await_abort(in_h, in_at, in_at >= head ? head + in_n : head, std::chrono::milliseconds(300));
    const bool receiving = rs < ns && !send_stalled;
    bool unreachable = false;
    if (timed_out && receiving) {
      // Everyone waits for its previous rank, so the wait alone does not say who failed. A host that is
      // down or cut off does not acknowledge a probe: then it is the previous rank. Otherwise the
      // previous rank is waiting too, and the rank after the failed one tells the others shortly.
      const auto window = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), o_.operation_timeout / 4);
      unreachable = !acknowledges_probe(prev_.native_handle(), window);
      if (!unreachable) reported = await_abort(in_h, in_at, in_at >= head ? head + in_n : head, 2 * window);
    }
    collective_failed(timed_out, reported, failed_peer, failure, receiving, unreachable);
  }

  /// Whether the host at the other end of the TCP connection `fd` acknowledges one probe byte within
  /// `window` (the kernel acknowledges for a hung process too; nothing does for a host that is down or
  /// cut off). The byte goes against the data's direction, after a failure, just before the ring closes.
  static bool acknowledges_probe(int fd, std::chrono::milliseconds window) {
    const char probe = 0;
    if (::send(fd, &probe, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) return true;  // no evidence either way
    for (const auto end = clock::now() + window; clock::now() < end;) {
      tcp_info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_unacked == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  /// The next rank closed on us, or the previous one went silent: it may have stopped because of a
  /// failure further on. Reads what the previous rank still sends for up to `wait`, skipping data frames
  /// (first the rest of the one in progress: `at` of its `end` bytes read, `h` its header), until an abort frame names the failed
  /// rank. Returns that rank, or -1.
  int await_abort(detail::frame_header h, std::size_t at, std::size_t end, std::chrono::milliseconds wait) {
    if (!prev_.is_open()) return -1;
    constexpr std::size_t head = sizeof(detail::frame_header);
    const int fd = prev_.native_handle();
    const auto deadline = clock::now() + wait;
    std::array<std::byte, 4096> sink;
    auto read = [&](std::byte* p, std::size_t n) {  // exactly n bytes (into the sink when p is null) by the deadline
      while (n > 0) {
        const std::size_t want = p ? n : std::min(n, sink.size());
        short events = POLLIN;
        std::error_code ec;
        const long got = receive_some(p ? p : sink.data(), want, events, ec);
        if (got > 0) {
          n -= std::size_t(got);
          if (p) p += got;
          continue;
        }
        if (got < 0) return false;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
        pollfd pfd{fd, events, 0};
        if (left <= 0 || ::poll(&pfd, 1, int(left)) == 0) return false;
      }
      return true;
    };
    if (at > 0) {  // finish the frame in progress
      if (at < head && !read(reinterpret_cast<std::byte*>(&h) + at, head - at)) return -1;
      if (at <= head) end = h.magic == detail::frame_magic ? head + h.length : head;
      if (at < end && !read(nullptr, end - std::max(at, head))) return -1;
      if (h.magic == detail::abort_magic) return h.offset < std::uint64_t(size()) ? int(h.offset) : -1;
    }
    for (;;) {
      if (!read(reinterpret_cast<std::byte*>(&h), head)) return -1;
      if (h.magic == detail::abort_magic) return h.offset < std::uint64_t(size()) ? int(h.offset) : -1;
      if (h.magic != detail::frame_magic || !read(nullptr, h.length)) return -1;
    }
  }

  /// After a failed or timed-out collective: names the rank that failed, tells the next rank (which
  /// tells its next...), closes the ring and throws. A timeout blames the previous rank when this one
  /// was `receiving` from it, else the next rank (which stopped taking this one's data).
  [[noreturn]] void collective_failed(bool timed_out, int reported, int failed_peer, std::error_code failure,
                                      bool receiving, bool unreachable) {
    // Name the rank that failed, tell the next rank (which tells its next...), and close the ring.
    const int culprit = reported >= 0 ? reported : timed_out ? (receiving ? prev_rank() : next_rank()) : failed_peer;
    if (culprit != next_rank()) {
      detail::frame_header a;
      a.magic = detail::abort_magic, a.seq = seq_, a.offset = std::uint64_t(culprit);
      iovec iov{&a, sizeof a};
      short events = 0;
      std::error_code ig;
      send_some(&iov, 1, events, ig);  // best effort: a full socket means the next rank is gone too
    }
    std::error_code ig;
    prev_.close(ig), next_.close(ig);
    std::string what;
    if (timed_out && unreachable && reported < 0)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) +
             ", whose host does not acknowledge (down or cut off)";
    else if (reported >= 0)
      what = peer_name(reported) + " failed (reported around the ring by " + peer_name(prev_rank()) + ")";
    else if (timed_out && culprit == next_rank())
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + ": " + peer_name(culprit) + " stopped taking data (it died, hung or is unreachable)";
    else if (timed_out)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) +
             " (it, or a rank before it in the ring, died or hung)";
    else if (!protocol_error_.empty())
      what = "protocol error: " + protocol_error_;
    else if (failure == asio::error::eof || failure == asio::error::connection_reset ||
             failure == asio::error::broken_pipe)
      what = peer_name(culprit) + " closed the connection (it died or stopped) during collective " + std::to_string(seq_);
    else
      what = peer_name(culprit) + " failed: " + failure.message() + " during collective " + std::to_string(seq_);
    throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + what);
  }

  static void reduce_into(float* dst, const float* src, std::size_t n, reduce_op op) {
    switch (op) {
      case reduce_op::sum:
      case reduce_op::mean:
        for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
        break;
      case reduce_op::max:
        for (std::size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
        break;
      case reduce_op::min:
        for (std::size_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
        break;
    }
  }

  void ring_all_reduce(std::span<float> data, reduce_op op) {
    ++seq_;
    const std::size_t p = std::size_t(size()), n = data.size(), r = std::size_t(rank());
    std::vector<std::size_t>& off = offsets_;
    off.assign(p + 1, 0);
    for (std::size_t i = 0; i < p; ++i) off[i + 1] = off[i] + n / p + (i < n % p ? 1 : 0);
    auto seg = [&](std::size_t i) { return std::pair{off[i % p], off[i % p + 1] - off[i % p]}; };
    float* d = data.data();
    auto bytes = [&](std::size_t at) { return reinterpret_cast<std::byte*>(d + at); };
    std::vector<ring_step>& steps = steps_;
    steps.clear();
    for (std::size_t k = 0; k + 1 < p; ++k) {  // reduce-scatter: what arrives at step k leaves at step k + 1
      const auto [so, sn] = seg(r + p - k);
      const auto [ro, rn] = seg(r + p - k - 1);
      steps.push_back({bytes(so), sn * 4, nullptr, rn * 4, int(k) - 1});
    }
    for (std::size_t k = 0; k + 1 < p; ++k) {  // all-gather: the owned segment first, then what arrives
      const auto [so, sn] = seg(r + 1 + p - k);
      const auto [ro, rn] = seg(r + p - k);
      steps.push_back({bytes(so), sn * 4, bytes(ro), rn * 4, int(p + k) - 2});
    }
    const float inv = 1.0f / float(p);
    run_steps(steps, [&](std::size_t s, std::size_t at, const std::byte* src, std::size_t nb) {
      if (s + 1 >= p) return;  // all-gather: the frame landed in place
      float* dst = d + seg(r + p - s - 1).first + at / 4;
      reduce_into(dst, reinterpret_cast<const float*>(src), nb / 4, op);
      if (op == reduce_op::mean && s + 2 == p)  // the owned segment is complete: divide it once, so every rank gets the same bits
        for (std::size_t i = 0; i < nb / 4; ++i) dst[i] *= inv;
    });
  }

  void ring_all_gather(std::span<const float> in, std::span<float> out) {
    ++seq_;
    const std::size_t p = std::size_t(size()), k = in.size(), r = std::size_t(rank());
    std::memcpy(out.data() + r * k, in.data(), in.size_bytes());
    auto block = [&](std::size_t i) { return reinterpret_cast<std::byte*>(out.data() + (i % p) * k); };
    std::vector<ring_step>& steps = steps_;
    steps.clear();
    for (std::size_t s = 0; s + 1 < p; ++s) steps.push_back({block(r + p - s), k * 4, block(r + p - s - 1), k * 4, int(s) - 1});
    run_steps(steps, [](std::size_t, std::size_t, const std::byte*, std::size_t) {});
  }

  void ring_broadcast(std::span<std::byte> data, int root) {
    ++seq_;
    const bool is_root = rank() == root, last = next_rank() == root;
    std::vector<ring_step>& steps = steps_;
    steps.assign(1, {data.data(), last ? 0 : data.size(), is_root ? nullptr : data.data(), is_root ? 0 : data.size(),
                     is_root ? -1 : 0});
    run_steps(steps, [](std::size_t, std::size_t, const std::byte*, std::size_t) {});
  }

  ring_tcp_options o_;
  std::string token_;
  std::optional<detail::tls_context> tls_ctx_;
  asio::io_context io_;
  asio::ip::tcp::acceptor listener_;
  asio::ip::tcp::socket prev_, next_;
  std::uint16_t listen_port_ = 0;
  std::vector<std::string> peers_;
  std::unique_ptr<detail::tls_link> in_tls_, out_tls_;  // on prev_ and next_, with TLS
  std::uint32_t seq_ = 0;
  std::vector<float> scratch_;
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> done_;  // run_steps: bytes received per step
  std::vector<ring_step> steps_;
  std::string protocol_error_;
  admission admission_;       // the listening side's rules while accepting_
  bool accepting_ = false;
  std::set<incoming_ptr> pending_;  // handshakes in progress
  std::size_t capped_ = 0;          // connections closed at the handshake cap

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::exception_ptr error_;
  bool stopping_ = false, running_ = false;  // running_: a collective holds the sockets
  std::thread worker_;

  asio::io_context stray_io_;
  std::optional<asio::ip::tcp::acceptor> stray_listener_;
  std::thread stray_;
};

static_assert(cluster_communicator<ring_tcp>);

}  // namespace dtrain::comm
