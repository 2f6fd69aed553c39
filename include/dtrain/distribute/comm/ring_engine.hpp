#pragma once
/// \file
/// The ring engine: moves one collective's data around the ring that `tcp_rendezvous` connected. A
/// collective is a list of steps (`ring_step`): at each, send to the next rank while receiving from the
/// previous one, in frames (wire.hpp) of at most `chunk_bytes`, non-blocking on both sockets, spinning
/// briefly and then sleeping in poll() when neither can move; a step may send only what an earlier
/// step has received, so the ring never pauses between steps. Each received frame goes to the
/// collective's `on_frame` as it lands (the algorithms in ring_tcp.hpp reduce it there).
///
/// A collective waits as long as its neighbours are alive (their heartbeats, heartbeat.hpp), or, with an
/// `operation_timeout`, until that long has passed with no byte moving. On a failure the engine names
/// the rank that failed (a closed connection, a neighbour's silent heartbeat, an abort frame from the
/// previous rank, or, after a timeout, a probe of the previous rank's host), tells the next rank with an
/// abort frame, closes the ring and throws a `comm_error`.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "dtrain/core/threads.hpp"
#include "dtrain/distribute/comm/rendezvous.hpp"

namespace dtrain::comm {

class ring_engine {
 public:
  using clock = std::chrono::steady_clock;

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

  /// Over the ring `rv` connected, with `o`'s chunk size and timeout (both must outlive the engine).
  ring_engine(tcp_rendezvous& rv, const ring_tcp_options& o) : rv_(rv), o_(o), yield_(cores_short(rv)) {}

  /// Starts the next collective: its frames carry this sequence number.
  void begin_collective() { ++seq_; }

  /// Runs the steps of one collective: frames leave in step order and arrive in step order, with
  /// non-blocking send/recv on the two sockets and poll() when neither can move. The deadline
  /// (operation_timeout, if any) counts from the last byte that moved. `on_frame(step, offset, data, bytes)`.
  template <class OnFrame>
  void run_steps(const std::vector<ring_step>& steps, OnFrame&& on_frame) {
    run_both_ways(steps, {}, on_frame);
  }

  /// Runs `forward` as run_steps does and, at the same time, `backward` the other way round the ring:
  /// sending to the previous rank and receiving from the next one, over the same two connections (each
  /// carries data both ways then). An all-gather this way takes ceil((p - 1) / 2) latency steps instead
  /// of p - 1. on_frame numbers backward's steps after forward's. Abort frames still go forward only.
  template <class OnFrame>
  void run_both_ways(const std::vector<ring_step>& forward, const std::vector<ring_step>& backward, OnFrame&& on_frame) {
    lane lanes[2] = {lane(forward, next_end(), prev_end(), 0, true), lane(backward, prev_end(), next_end(), forward.size(), false)};
    if (forward.empty() && backward.empty()) return;
    const std::size_t chunk = o_.chunk_bytes & ~std::size_t{63};
    for (int i = 0; i < 2; ++i) lanes[i].prepare(done_[i], scratch_[i], chunk);
    std::error_code failure;
    int failed_peer = -1, reported = -1;
    bool timed_out = false, send_stalled = false;
    // a failure: what went wrong, on whose connection, and the rank an abort frame named (or -1)
    auto fail = [&](std::error_code ec, int peer, int named) { failure = ec, failed_peer = peer, reported = named; };
    protocol_error_.clear(), liveness_error_.clear();
    auto deadline = dtrain::detail::deadline_after(o_.operation_timeout);
    clock::time_point idle_since{};  // since when nothing moved (spin_while_idle)
    for (;;) {
      bool progress = false;
      for (lane& l : lanes) {
        progress |= pump_out(l, chunk, fail);
        if (!failure) progress |= pump_in(l, chunk, fail, on_frame);
        if (failure) break;
      }
      if (failure) break;
      if (lanes[0].finished() && lanes[1].finished()) return;
      if (progress) {
        deadline = dtrain::detail::deadline_after(o_.operation_timeout);
        idle_since = {};
        continue;
      }
      if (spin_while_idle(idle_since)) continue;
      if (auto dead = rv_.peer_failure()) {  // nothing moves and a neighbour has stopped beating
        liveness_error_ = dead->why;
        fail(asio::error::timed_out, dead->rank, -1);
        break;
      }
      pollfd fds[5];
      nfds_t nfds = 0;
      for (const lane& l : lanes) {
        if (l.want_in) fds[nfds++] = {l.from.fd, l.in_events, 0};
        if (l.want_out) fds[nfds++] = {l.to.fd, l.out_events, 0};
      }
      if (rv_.peer_failure_fd() >= 0) fds[nfds++] = {rv_.peer_failure_fd(), POLLIN, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        send_stalled = lanes[0].want_out;  // the next rank stopped taking data: the stronger evidence
        break;
      }
      if (::poll(fds, nfds, int(std::min<long long>(left, 1 << 30))) < 0 && errno != EINTR)
        fail(std::error_code(errno, std::system_category()), lanes[0].receiving() ? prev_rank() : next_rank(), -1);
    }
    lane& f = lanes[0];
    constexpr std::size_t head = sizeof(detail::frame_header);
    // A closed connection may be a neighbour leaving after a failure further on: its abort frame, sent
    // before it closed, may still wait on the previous rank's connection (which ends at once where the
    // previous rank itself closed; a collective that runs both ways may see that close on the other
    // direction first).
    if (!timed_out && reported < 0 && liveness_error_.empty() && (failed_peer == next_rank() || protocol_error_.empty()))
      reported = await_abort(f.in_h, f.in_at, f.in_at >= head ? head + f.in_n : head, std::chrono::milliseconds(300));
    const bool receiving = f.receiving() && !send_stalled;
    bool unreachable = false;
    if (timed_out && receiving) {
      // Everyone waits for its previous rank, so the wait alone does not say who failed. A host that is
      // down or cut off does not acknowledge a probe: then it is the previous rank. Otherwise the
      // previous rank is waiting too, and the rank after the failed one tells the others shortly.
      const auto window = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), o_.operation_timeout / 4);
      unreachable = !acknowledges_probe(rv_.prev().native_handle(), window);
      if (!unreachable) reported = await_abort(f.in_h, f.in_at, f.in_at >= head ? head + f.in_n : head, 2 * window);
    }
    const bool from_next = !receiving && !send_stalled && lanes[1].receiving();  // waiting for the next rank's data
    collective_failed(timed_out, reported, failed_peer, failure, receiving, unreachable, from_next);
  }

 private:
  /// This rank's connection to a neighbour (it carries data both ways): the socket, its TLS link (or null),
  /// the peer.
  struct end {
    int fd;
    detail::tls_link* tls;
    int rank;
  };
  end next_end() { return {rv_.next().native_handle(), rv_.next_tls(), next_rank()}; }
  end prev_end() { return {rv_.prev().native_handle(), rv_.prev_tls(), prev_rank()}; }

  /// One direction of a collective: its steps, where they go and come from, and how far each has got.
  struct lane {
    lane(const std::vector<ring_step>& s, end t, end f, std::size_t first, bool fwd)
        : steps(s), to(t), from(f), first_step(first), forward(fwd) {}
    const std::vector<ring_step>& steps;
    end to, from;
    std::size_t first_step;  // on_frame's number of steps[0]
    bool forward;            // to the next rank (abort frames come this way only)
    std::vector<std::size_t>* done = nullptr;              // bytes received and processed, per step
    std::byte* scratch = nullptr;                           // where frames of a step without recv land
    std::size_t ss = 0, sent = 0, out_n = 0, out_at = 0;    // send: step, its bytes sent; frame payload, bytes written
    std::size_t rs = 0, received = 0, in_n = 0, in_at = 0;  // receive: the same
    bool out_busy = false, want_out = false, want_in = false;
    short out_events = POLLOUT, in_events = POLLIN;  // TLS may need the other direction
    std::byte* in_dst = nullptr;
    detail::frame_header out_h, in_h;

    void prepare(std::vector<std::size_t>& d, std::vector<float>& buffer, std::size_t chunk) {
      d.assign(steps.size(), 0), done = &d;
      std::size_t need = 0;
      for (const auto& st : steps)
        if (!st.recv) need = std::max(need, std::min(chunk, st.recv_bytes));
      if (buffer.size() * 4 < need) buffer.resize((need + 3) / 4);
      scratch = reinterpret_cast<std::byte*>(buffer.data());
    }
    bool receiving() const { return rs < steps.size(); }
    bool finished() const { return ss == steps.size() && rs == steps.size(); }
  };

  /// Sends `l`'s frames until its socket is full or the next frame has not arrived yet. Whether any
  /// byte moved.
  template <class Fail>
  bool pump_out(lane& l, std::size_t chunk, Fail&& fail) {
    constexpr std::size_t head = sizeof(detail::frame_header);
    const std::size_t ns = l.steps.size();
    bool progress = false;
    l.want_out = false, l.out_events = POLLOUT;
    for (;;) {
      if (!l.out_busy) {
        while (l.ss < ns && l.sent >= l.steps[l.ss].send_bytes) ++l.ss, l.sent = 0;
        if (l.ss == ns) break;
        const ring_step& st = l.steps[l.ss];
        const std::size_t n = std::min(chunk, st.send_bytes - l.sent);
        if (st.gate >= 0 && (*l.done)[std::size_t(st.gate)] < l.sent + n) break;
        l.out_h = detail::frame_header{};
        l.out_h.seq = seq_, l.out_h.step = std::uint32_t(l.ss), l.out_h.length = std::uint32_t(n), l.out_h.offset = l.sent;
        if (checksums()) l.out_h.flags = detail::frame_has_checksum, l.out_h.checksum = dtrain::detail::crc32c(st.send + l.sent, n);
        l.out_n = n, l.out_at = 0, l.out_busy = true;
      }
      iovec iov[2];
      int k = 0;
      if (l.out_at < head) iov[k++] = {reinterpret_cast<char*>(&l.out_h) + l.out_at, head - l.out_at};
      const std::size_t pay = l.out_at < head ? 0 : l.out_at - head;
      iov[k++] = {const_cast<std::byte*>(l.steps[l.ss].send + l.sent + pay), l.out_n - pay};
      std::error_code ec;
      const long w = send_some(l.to, iov, k, l.out_events, ec);
      if (w <= 0) {
        if (w == 0) l.want_out = true;
        else fail(ec ? ec : std::error_code(asio::error::invalid_argument), l.to.rank, -1);
        break;
      }
      progress = true;
      l.out_at += std::size_t(w);
      if (l.out_at == head + l.out_n) l.sent += l.out_n, l.out_busy = false;
    }
    if (!l.out_busy)
      while (l.ss < ns && l.sent >= l.steps[l.ss].send_bytes) ++l.ss, l.sent = 0;
    return progress;
  }

  /// Receives `l`'s frames until its socket is empty or a frame is complete (which may unblock a
  /// send), checking each header and handing each payload to on_frame. Whether any byte moved.
  template <class Fail, class OnFrame>
  bool pump_in(lane& l, std::size_t chunk, Fail&& fail, OnFrame& on_frame) {
    constexpr std::size_t head = sizeof(detail::frame_header);
    const std::size_t ns = l.steps.size();
    bool progress = false;
    l.want_in = false, l.in_events = POLLIN;
    for (;;) {
      if (l.in_at == 0) {
        while (l.rs < ns && l.received >= l.steps[l.rs].recv_bytes) ++l.rs, l.received = 0;
        if (l.rs == ns) break;
      }
      const bool header = l.in_at < head;
      std::byte* p = header ? reinterpret_cast<std::byte*>(&l.in_h) + l.in_at : l.in_dst + (l.in_at - head);
      std::error_code ec;
      const long got = receive_some(l.from, p, header ? head - l.in_at : head + l.in_n - l.in_at, l.in_events, ec);
      if (got <= 0) {
        if (got == 0) l.want_in = true;
        else fail(ec ? ec : std::error_code(asio::error::invalid_argument), l.from.rank, -1);
        return progress;
      }
      progress = true;
      l.in_at += std::size_t(got);
      if (header) {
        if (l.in_at < head) continue;
        const std::size_t want = std::min(chunk, l.steps[l.rs].recv_bytes - l.received);
        const auto v = detail::check_frame(l.in_h, seq_, std::uint32_t(l.rs), l.received, std::uint32_t(want), size());
        if (v.kind == detail::frame_verdict::abort) {
          fail(asio::error::connection_aborted, l.from.rank, l.forward ? v.failed_rank : -1);
          return progress;
        }
        if (v.kind == detail::frame_verdict::bad) {
          protocol_error_ = "unexpected frame from " + peer_name(l.from.rank) + " (" + v.why + ")";
          fail(asio::error::invalid_argument, l.from.rank, -1);
          return progress;
        }
        l.in_n = want;
        l.in_dst = l.steps[l.rs].recv ? l.steps[l.rs].recv + l.received : l.scratch;
        continue;
      }
      if (l.in_at < head + l.in_n) continue;
      if (checksums()) {
        std::string why;
        if (!(l.in_h.flags & detail::frame_has_checksum))
          why = "it carries no checksum and this rank requires one (set DTRAIN_FRAME_CHECKSUMS the same on every worker)";
        else if (dtrain::detail::crc32c(l.in_dst, l.in_n) != l.in_h.checksum)
          why = "its payload fails its CRC-32C check: the bytes were changed on the way (a faulty NIC, cable or "
                "middlebox; TLS would also authenticate them) and none was used";
        if (!why.empty()) {
          protocol_error_ = "frame from " + peer_name(l.from.rank) + " (collective " + std::to_string(seq_) + ", step " +
                            std::to_string(l.rs) + ", bytes " + std::to_string(l.received) + " to " +
                            std::to_string(l.received + l.in_n) + "): " + why;
          fail(asio::error::invalid_argument, l.from.rank, -1);
          return progress;
        }
      }
      on_frame(l.first_step + l.rs, l.received, static_cast<const std::byte*>(l.in_dst), l.in_n);
      l.received += l.in_n, (*l.done)[l.rs] = l.received, l.in_at = 0;
      break;
    }
    if (l.in_at == 0)
      while (l.rs < ns && l.received >= l.steps[l.rs].recv_bytes) ++l.rs, l.received = 0;
    return progress;
  }

  /// Non-blocking send to `to` (through TLS when on; TLS takes iov[0] only): bytes sent (> 0),
  /// 0 when it would block (`events`: what to poll its socket for), -1 on failure (`ec`, or for a TLS
  /// failure an empty `ec` and protocol_error_ set).
  long send_some(end to, iovec* iov, int k, short& events, std::error_code& ec) {
    if (to.tls) {
      const long w = to.tls->write(iov[0].iov_base, iov[0].iov_len, events, ec);
      if (w < 0 && !ec) protocol_error_ = "TLS with " + peer_name(to.rank) + " failed: " + to.tls->describe(ec);
      return w;
    }
    msghdr msg{};
    msg.msg_iov = iov, msg.msg_iovlen = std::size_t(k);
    for (;;) {
      const ssize_t w = ::sendmsg(to.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w >= 0) return long(w);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return events = POLLOUT, 0;
      ec = std::error_code(errno, std::system_category());
      return -1;
    }
  }
  /// Non-blocking receive from `from`, as send_some (eof when it closed).
  long receive_some(end from, void* p, std::size_t n, short& events, std::error_code& ec) {
    if (from.tls) {
      const long got = from.tls->read(p, n, events, ec);
      if (got < 0 && !ec) protocol_error_ = peer_name(from.rank) + " sent data that failed TLS: " + from.tls->describe(ec);
      return got;
    }
    for (;;) {
      const ssize_t got = ::recv(from.fd, p, n, MSG_DONTWAIT);
      if (got > 0) return long(got);
      if (got == 0) return ec = asio::error::eof, -1;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return events = POLLIN, 0;
      ec = std::error_code(errno, std::system_category());
      return -1;
    }
  }

  /// Whether the host at the other end of the TCP connection `fd` acknowledges one probe byte within
  /// `window` (the kernel acknowledges for a hung process too; nothing does for a host that is down or
  /// cut off). The byte goes against the data's direction, after a failure, just before the ring closes.
  static bool acknowledges_probe(int fd, std::chrono::milliseconds window) {
    const char probe = 0;
    if (::send(fd, &probe, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) return true;  // no evidence either way
    return detail::host_acknowledges(fd, window);
  }

  /// The next rank closed on us, or the previous one went silent: it may have stopped because of a
  /// failure further on. Reads what the previous rank still sends for up to `wait`, skipping data frames
  /// (first the rest of the one in progress: `at` of its `end` bytes read, `h` its header), until an abort frame names the failed
  /// rank. Returns that rank, or -1.
  int await_abort(detail::frame_header h, std::size_t at, std::size_t end, std::chrono::milliseconds wait) {
    if (!rv_.prev().is_open()) return -1;
    constexpr std::size_t head = sizeof(detail::frame_header);
    const int fd = rv_.prev().native_handle();
    const auto deadline = clock::now() + wait;
    std::array<std::byte, 4096> sink;
    auto read = [&](std::byte* p, std::size_t n) {  // exactly n bytes (into the sink when p is null) by the deadline
      while (n > 0) {
        const std::size_t want = p ? n : std::min(n, sink.size());
        short events = POLLIN;
        std::error_code ec;
        const long got = receive_some(prev_end(), p ? p : sink.data(), want, events, ec);
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
  /// was `receiving` from it, else the next rank: it stopped taking this one's data, or sending its own
  /// (`from_next`: a collective that runs both ways).
  [[noreturn]] void collective_failed(bool timed_out, int reported, int failed_peer, std::error_code failure,
                                      bool receiving, bool unreachable, bool from_next) {
    // Name the rank that failed, tell the next rank (which tells its next...), and close the ring.
    const int culprit = reported >= 0 ? reported : timed_out ? (receiving ? prev_rank() : next_rank()) : failed_peer;
    if (culprit != next_rank()) {
      detail::frame_header a;
      a.magic = detail::abort_magic, a.seq = seq_, a.offset = std::uint64_t(culprit);
      iovec iov{&a, sizeof a};
      short events = 0;
      std::error_code ig;
      send_some(next_end(), &iov, 1, events, ig);  // best effort: a full socket means the next rank is gone too
    }
    rv_.close();
    std::string what;
    if (timed_out && unreachable && reported < 0)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) +
             ", whose host does not acknowledge (down or cut off)";
    else if (reported >= 0)
      what = peer_name(reported) + " failed (reported around the ring by " + peer_name(prev_rank()) + ")";
    else if (timed_out && culprit == next_rank() && from_next)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) + " (it died, hung or is unreachable)";
    else if (timed_out && culprit == next_rank())
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + ": " + peer_name(culprit) + " stopped taking data (it died, hung or is unreachable)";
    else if (timed_out)
      what = "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
             std::to_string(seq_) + " waiting for " + peer_name(culprit) +
             " (it, or a rank before it in the ring, died or hung)";
    else if (!liveness_error_.empty())
      what = peer_name(culprit) + " " + liveness_error_ + " (collective " + std::to_string(seq_) + ")";
    else if (!protocol_error_.empty())
      what = "protocol error: " + protocol_error_;
    else if (failure == asio::error::eof || failure == asio::error::connection_reset ||
             failure == asio::error::broken_pipe)
      what = peer_name(culprit) + " closed the connection (it died or stopped) during collective " + std::to_string(seq_);
    else
      what = peer_name(culprit) + " failed: " + failure.message() + " during collective " + std::to_string(seq_);
    throw comm_error("ring_tcp: rank " + std::to_string(rank()) + ": " + what);
  }

  /// When nothing can move: sleeping in poll() until a frame arrives costs a wake-up (tens of
  /// microseconds on a VM; a small all-reduce is little else), so first the sockets are tried again for
  /// a while, as MPI and NCCL do: pausing for 50 us when this host has a core for each of its ranks, else
  /// yielding for 200 us, so that the core goes to a rank that has yet to send (spinning starves it).
  /// It took a 4 KiB all-reduce over loopback on 2 cores from 36 to 9 us (2 ranks), 132 to 93 us (4 ranks).
  /// Returns false once it is time to sleep.
  bool spin_while_idle(clock::time_point& idle_since) const {
    const auto now = clock::now();
    if (idle_since == clock::time_point{}) idle_since = now;
    if (now - idle_since >= std::chrono::microseconds(yield_ ? 200 : 50)) return false;
    if (yield_) std::this_thread::yield();
    else
      for (int i = 0; i < 16; ++i) dtrain::detail::cpu_pause();
    return true;
  }
  /// Whether this host has fewer cores than ranks of the ring (those with its address's host).
  static bool cores_short(const tcp_rendezvous& rv) {
    if (rv.size() < 2) return false;
    const auto host = [&](int r) {  // "host:port" as the rendezvous exchanged it
      const std::string& a = rv.address_of(r);
      return a.substr(0, a.rfind(':'));
    };
    const std::string mine = host(rv.rank());
    int here = 0;
    for (int r = 0; r < rv.size(); ++r) {
      const std::string h = host(r);
      here += h == mine || (detail::is_loopback(h) && detail::is_loopback(mine));
    }
    return std::thread::hardware_concurrency() < unsigned(here);
  }

  int rank() const { return rv_.rank(); }
  int size() const { return rv_.size(); }
  int prev_rank() const { return rv_.prev_rank(); }
  int next_rank() const { return rv_.next_rank(); }
  std::string peer_name(int r) const { return rv_.peer_name(r); }

  /// Whether frames carry and are checked against a CRC-32C (without TLS, which authenticates them).
  bool checksums() const { return o_.frame_checksums && !o_.tls; }

  tcp_rendezvous& rv_;
  const ring_tcp_options& o_;
  std::uint32_t seq_ = 0;
  std::vector<float> scratch_[2];           // per lane: where frames of a step without a recv buffer land
  std::vector<std::size_t> done_[2];        // per lane: bytes received per step
  std::string protocol_error_;
  std::string liveness_error_;  // a neighbour's heartbeat stopped: the evidence
  bool yield_;  // spin_while_idle yields (ranks outnumber this host's cores) instead of pausing
};

}  // namespace dtrain::comm
