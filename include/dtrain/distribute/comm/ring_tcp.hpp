#pragma once
/// \file
/// `ring_tcp`: the communicator of multi-worker training over TCP (standalone Asio).
///
/// Rendezvous: every rank listens on its own address. Ranks 1..n-1 join rank 0 (retrying with backoff
/// until the connect deadline); rank 0 logs `waiting for workers (k/n)` as they arrive, then sends
/// everyone the table of ring addresses (so launchers that give only rank 0's address, such as
/// torchrun or mpirun, work too). Then each rank connects to the next and accepts the previous one.
/// Every connection starts with a handshake (magic, protocol version, cluster fingerprint, rank, world
/// size); a mismatch closes it with a logged reason. After the rendezvous a background thread keeps
/// accepting on the listening port only to reject and log strangers, so they never disturb training.
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

#include <cerrno>
#include <chrono>
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
#include <string>
#include <thread>
#include <vector>

#include "dtrain/distribute/comm/communicator.hpp"

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
  /// Where log lines go (default: stderr, prefixed "dtrain ring_tcp:").
  std::function<void(const std::string&)> log{};
};

namespace detail {

inline constexpr std::uint32_t hello_magic = 0x48525444;  // "DTRH"
inline constexpr std::uint32_t frame_magic = 0x46525444;  // "DTRF"
inline constexpr std::uint32_t table_magic = 0x54525444;  // "DTRT"
inline constexpr std::uint32_t abort_magic = 0x41525444;  // "DTRA": a rank failed; offset = its rank
inline constexpr std::uint16_t protocol_version = 1;

enum class hello_kind : std::uint8_t { join = 1, ring = 2 };

struct hello {
  std::uint32_t magic = hello_magic;
  std::uint16_t version = protocol_version;
  std::uint8_t kind = 0;
  std::uint8_t accepted = 0;  // set in the reply
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  std::uint64_t fingerprint = 0;
  std::uint16_t listen_port = 0;
  std::uint16_t pad[3]{};
};
static_assert(sizeof(hello) == 32);

struct frame_header {
  std::uint32_t magic = frame_magic;
  std::uint32_t seq = 0;   // collective number
  std::uint32_t step = 0;  // ring step within it
  std::uint32_t length = 0;
  std::uint64_t offset = 0;
  std::uint64_t reserved = 0;
};
static_assert(sizeof(frame_header) == 32);

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

}  // namespace detail

class ring_tcp {
 public:
  using clock = std::chrono::steady_clock;
  using options_type = ring_tcp_options;

  /// Connects the ring (blocks until every rank is there, or the connect deadline passes).
  explicit ring_tcp(ring_tcp_options o) : o_(std::move(o)), listener_(io_), prev_(io_), next_(io_) {
    if (o_.world_size < 1 || o_.rank < 0 || o_.rank >= o_.world_size)
      throw config_error("ring_tcp: rank " + std::to_string(o_.rank) + " is not in a world of " +
                         std::to_string(o_.world_size));
    if (o_.world_size > 1 && o_.addresses.size() != std::size_t(o_.world_size) && o_.addresses.size() != 1)
      throw config_error("ring_tcp: need the addresses of all " + std::to_string(o_.world_size) +
                         " ranks or of rank 0 alone, got " + std::to_string(o_.addresses.size()));
    if (o_.chunk_bytes < 4096) o_.chunk_bytes = 4096;
    if (!o_.log) o_.log = [](const std::string& s) { std::fprintf(stderr, "dtrain ring_tcp: %s\n", s.c_str()); };
    peers_.resize(std::size_t(o_.world_size));
    for (std::size_t i = 0; i < o_.addresses.size(); ++i) peers_[i] = o_.addresses[i];
    if (o_.world_size > 1) {
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
           peer_name(prev_rank()) + ", next " + peer_name(next_rank()));
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

  /// Reads a hello with a short deadline; nullopt (and a log line) for anything that is not one.
  std::optional<detail::hello> read_hello(asio::ip::tcp::socket& s, const std::string& from) {
    detail::hello h;
    std::error_code ec;
    bool done = false;
    asio::async_read(s, asio::buffer(&h, sizeof h), [&](std::error_code e, std::size_t) { ec = e, done = true; });
    io_.restart();
    io_.run_for(std::chrono::seconds(5));
    if (!done) {
      std::error_code ig;
      s.close(ig);
      io_.restart();
      io_.run();
      o_.log("rejected connection from " + from + ": no handshake within 5 s");
      return std::nullopt;
    }
    if (ec) {
      o_.log("rejected connection from " + from + ": " + ec.message());
      return std::nullopt;
    }
    return h;
  }
  /// Why a hello is unacceptable, or "" if it is fine.
  std::string check_hello(const detail::hello& h, detail::hello_kind kind, int want_rank) const {
    if (h.magic != detail::hello_magic) return "wrong magic (not a dtrain worker)";
    if (h.version != detail::protocol_version)
      return "protocol version " + std::to_string(h.version) + ", expected " + std::to_string(detail::protocol_version);
    if (h.fingerprint != o_.fingerprint) return "cluster fingerprint differs (a worker of another job?)";
    if (h.world_size != std::uint32_t(size()))
      return "world size " + std::to_string(h.world_size) + ", expected " + std::to_string(size());
    if (h.kind != std::uint8_t(kind)) return "unexpected handshake kind";
    if (h.rank >= std::uint32_t(size()) || (want_rank >= 0 && h.rank != std::uint32_t(want_rank)))
      return "rank " + std::to_string(h.rank) + (want_rank >= 0 ? ", expected " + std::to_string(want_rank) : " out of range");
    return "";
  }
  detail::hello my_hello(detail::hello_kind kind) const {
    detail::hello h;
    h.kind = std::uint8_t(kind);
    h.world_size = std::uint32_t(size());
    h.rank = std::uint32_t(rank());
    h.fingerprint = o_.fingerprint;
    h.listen_port = listen_port_;
    return h;
  }
  /// Writes all of [p, p + n) to `who`; a peer that reset or closed the connection is a comm_error.
  void write_all(asio::ip::tcp::socket& s, const void* p, std::size_t n, const std::string& who) const {
    std::error_code ec;
    asio::write(s, asio::buffer(p, n), ec);
    if (ec)
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + who + " closed the connection (" +
                       ec.message() + ") during the rendezvous; it died or stopped");
  }

  /// Accepts one connection before `deadline` and reads its handshake; nullopt when it is not one
  /// (already logged). Past the deadline the listener is closed and `timeout_message()` thrown.
  template <class Message>
  std::optional<std::pair<asio::ip::tcp::socket, detail::hello>> accept_hello(clock::time_point deadline,
                                                                               Message&& timeout_message) {
    asio::ip::tcp::socket s(io_);
    std::error_code ec;
    bool done = false;
    listener_.async_accept(s, [&](std::error_code e) { ec = e, done = true; });
    io_.restart();
    io_.run_until(deadline);
    if (!done) {
      std::error_code ig;
      listener_.close(ig);
      io_.restart();
      io_.run();
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + timeout_message());
    }
    if (ec) return std::nullopt;
    std::error_code ig;
    const auto remote = s.remote_endpoint(ig);
    from_ = remote.address().to_string() + ":" + std::to_string(remote.port());
    auto h = read_hello(s, from_);
    if (!h) return std::nullopt;
    return std::pair{std::move(s), *h};
  }

  void gather_joins(clock::time_point deadline) {
    std::vector<std::optional<asio::ip::tcp::socket>> joined(static_cast<std::size_t>(size()));
    int count = 1;
    o_.log("waiting for workers (1/" + std::to_string(size()) + ")");
    while (count < size()) {
      auto got = accept_hello(deadline, [&] {
        std::string missing;
        for (int r = 1; r < size(); ++r)
          if (!joined[std::size_t(r)]) missing += (missing.empty() ? "" : ", ") + peer_name(r);
        return "timed out after " + std::to_string(o_.connect_timeout.count() / 1000) + " s waiting for workers (" +
               std::to_string(count) + "/" + std::to_string(size()) + "); missing: " + missing;
      });
      if (!got) continue;
      auto& [s, h] = *got;
      std::string why = check_hello(h, detail::hello_kind::join, -1);
      if (why.empty() && joined[h.rank]) why = "rank " + std::to_string(h.rank) + " joined twice";
      detail::hello reply = my_hello(detail::hello_kind::join);
      reply.accepted = why.empty();
      std::error_code ig;
      asio::write(s, asio::buffer(&reply, sizeof reply), ig);
      if (!why.empty()) {
        o_.log("rejected connection from " + from_ + ": " + why);
        continue;
      }
      if (o_.addresses.size() <= 1)  // torchrun style: the address table is built from who joined
        peers_[h.rank] = s.remote_endpoint(ig).address().to_string() + ":" + std::to_string(h.listen_port);
      joined[h.rank].emplace(std::move(s));
      ++count;
      o_.log("waiting for workers (" + std::to_string(count) + "/" + std::to_string(size()) + ")");
    }
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
    asio::ip::tcp::socket s = connect_with_retry(master, deadline, "rank 0 (" + master + ")");
    const detail::hello h = my_hello(detail::hello_kind::join);
    write_all(s, &h, sizeof h, "rank 0 (" + master + ")");
    detail::hello reply;
    read_exact(s, &reply, sizeof reply, deadline, "rank 0 (" + master + ") during the handshake");
    if (reply.magic != detail::hello_magic || !reply.accepted)
      throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": rank 0 (" + master +
                       ") refused the handshake (another job's worker, a duplicate rank or a mismatched world size; "
                       "see rank 0's log)");
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

  void connect_ring(clock::time_point deadline) {
    next_ = connect_with_retry(peers_[std::size_t(next_rank())], deadline, peer_name(next_rank()));
    const detail::hello h = my_hello(detail::hello_kind::ring);
    write_all(next_, &h, sizeof h, peer_name(next_rank()));
    for (;;) {  // accept until the previous rank shows up, rejecting anything else
      auto accepted = accept_hello(deadline, [&] { return "timed out waiting for " + peer_name(prev_rank()) + " to connect"; });
      if (!accepted) continue;
      auto& [s, h] = *accepted;
      const std::string why = check_hello(h, detail::hello_kind::ring, prev_rank());
      if (!why.empty()) {
        o_.log("rejected connection from " + from_ + ": " + why);
        continue;
      }
      std::error_code ig;
      s.set_option(asio::ip::tcp::no_delay(true), ig);
      prev_ = std::move(s);
      break;
    }
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
#ifdef MSG_NOSIGNAL
    constexpr int send_flags = MSG_DONTWAIT | MSG_NOSIGNAL;
#else
    constexpr int send_flags = MSG_DONTWAIT;
#endif
    std::size_t ss = 0, sent = 0, out_n = 0, out_at = 0;      // send: step, its bytes sent; frame payload, bytes written
    std::size_t rs = 0, received = 0, in_n = 0, in_at = 0;  // receive: the same
    bool out_busy = false;
    std::byte* in_dst = nullptr;
    detail::frame_header out_h, in_h;
    std::error_code failure;
    int failed_peer = -1, reported = -1;
    bool timed_out = false;
    auto fail = [&](std::error_code ec, int peer) { failure = ec, failed_peer = peer; };
    protocol_error_.clear();
    auto deadline = clock::now() + o_.operation_timeout;
    for (;;) {
      bool progress = false, want_out = false, want_in = false;
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
        msghdr msg{};
        msg.msg_iov = iov, msg.msg_iovlen = std::size_t(k);
        const ssize_t w = ::sendmsg(out_fd, &msg, send_flags);
        if (w < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) want_out = true;
          else fail(std::error_code(errno, std::system_category()), next_rank());
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
        const ssize_t got = ::recv(in_fd, p, header ? head - in_at : head + in_n - in_at, MSG_DONTWAIT);
        if (got <= 0) {
          if (got < 0 && errno == EINTR) continue;
          if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) want_in = true;
          else fail(got == 0 ? std::error_code(asio::error::eof) : std::error_code(errno, std::system_category()), prev_rank());
          break;
        }
        progress = true;
        in_at += std::size_t(got);
        if (header) {
          if (in_at < head) continue;
          if (in_h.magic == detail::abort_magic && in_h.offset < std::uint64_t(size())) {
            reported = int(in_h.offset);
            fail(asio::error::connection_aborted, prev_rank());
            break;
          }
          const std::size_t want = std::min(chunk, steps[rs].recv_bytes - received);
          if (in_h.magic != detail::frame_magic || in_h.seq != seq_ || in_h.step != rs || in_h.offset != received ||
              in_h.length != want) {
            protocol_error_ = "unexpected frame from " + peer_name(prev_rank()) + " (collective " +
                              std::to_string(in_h.seq) + " step " + std::to_string(in_h.step) + " offset " +
                              std::to_string(in_h.offset) + " length " + std::to_string(in_h.length) +
                              "; expected collective " + std::to_string(seq_) + " step " + std::to_string(rs) +
                              " offset " + std::to_string(received) + " length " + std::to_string(want) + ")";
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
      if (want_in) fds[nfds++] = {in_fd, POLLIN, 0};
      if (want_out) fds[nfds++] = {out_fd, POLLOUT, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      if (::poll(fds, nfds, int(std::min<long long>(left, 1 << 30))) < 0 && errno != EINTR)
        fail(std::error_code(errno, std::system_category()), rs < ns ? prev_rank() : next_rank());
    }
    if (!timed_out && reported < 0 && failed_peer == next_rank())
      reported = await_abort(in_h, in_at, in_at >= head ? head + in_n : head);
    collective_failed(timed_out, reported, failed_peer, failure, rs < ns);
  }

  /// The next rank closed on us: it may have stopped because of a failure further on. Reads what the
  /// previous rank still sends for up to 300 ms, skipping data frames (first the rest of the one in
  /// progress: `at` of its `end` bytes read, `h` its header), until an abort frame names the failed
  /// rank. Returns that rank, or -1.
  int await_abort(detail::frame_header h, std::size_t at, std::size_t end) {
    if (!prev_.is_open()) return -1;
    constexpr std::size_t head = sizeof(detail::frame_header);
    const int fd = prev_.native_handle();
    const auto deadline = clock::now() + std::chrono::milliseconds(300);
    std::array<std::byte, 4096> sink;
    auto read = [&](std::byte* p, std::size_t n) {  // exactly n bytes (into the sink when p is null) by the deadline
      while (n > 0) {
        const std::size_t want = p ? n : std::min(n, sink.size());
        const ssize_t got = ::recv(fd, p ? p : sink.data(), want, MSG_DONTWAIT);
        if (got > 0) {
          n -= std::size_t(got);
          if (p) p += got;
          continue;
        }
        if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
        pollfd pfd{fd, POLLIN, 0};
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
  /// tells its next...), closes the ring and throws.
  [[noreturn]] void collective_failed(bool timed_out, int reported, int failed_peer, std::error_code failure,
                                      bool receiving) {
    // Name the rank that failed, tell the next rank (which tells its next...), and close the ring.
    const int culprit = reported >= 0 ? reported : timed_out ? (receiving ? prev_rank() : next_rank()) : failed_peer;
    if (culprit != next_rank()) {
      detail::frame_header a;
      a.magic = detail::abort_magic, a.seq = seq_, a.offset = std::uint64_t(culprit);
      std::error_code ig;
      next_.non_blocking(true, ig);
      next_.send(asio::buffer(&a, sizeof a), 0, ig);
    }
    std::error_code ig;
    prev_.close(ig), next_.close(ig);
    std::string what;
    if (timed_out)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) +
             " (it, or a rank before it in the ring, died or hung)";
    else if (reported >= 0)
      what = peer_name(reported) + " failed (reported around the ring by " + peer_name(prev_rank()) + ")";
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
  asio::io_context io_;
  asio::ip::tcp::acceptor listener_;
  asio::ip::tcp::socket prev_, next_;
  std::uint16_t listen_port_ = 0;
  std::vector<std::string> peers_;
  std::uint32_t seq_ = 0;
  std::vector<float> scratch_;
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> done_;  // run_steps: bytes received per step
  std::vector<ring_step> steps_;
  std::string protocol_error_;
  std::string from_;  // the address of the connection accept_hello took last

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

static_assert(communicator<ring_tcp>);

}  // namespace dtrain::comm
