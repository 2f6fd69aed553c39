#pragma once
/// \file
/// Liveness apart from slowness. Every rank keeps one more connection to each ring neighbour (opened by
/// the rendezvous beside the data connections, with the same handshake) and, from a thread of its own,
/// sends a beat on each several times per `timeout` while reading theirs. A neighbour that sends none
/// for `timeout` has failed: its process ended or stopped as a whole (SIGSTOP, a frozen VM), or its host
/// is down or cut off; the kernel's acknowledgements of our own beats tell the last apart. A neighbour
/// that is only slow (the chief saving for minutes, a worker reaching the first collective late) keeps
/// beating, and the collectives wait for it as long as it takes. They ask `failure()` whenever they
/// would block; it is one atomic load while all is well.
///
/// A beat is 8 bytes: "DTRB" and a counter. Anything else on the connection is a verdict at once. The
/// beats are not encrypted (with TLS neither is the handshake that opened their connection, which the
/// job token authenticates): someone on the path can end a job by dropping them, as by dropping data.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace dtrain::comm::detail {

inline constexpr std::uint32_t beat_magic = 0x42525444;  // "DTRB"

/// Whether the host at the other end of TCP connection `fd` acknowledges, within `window`, all that was
/// sent to it (the kernel acknowledges for a stopped or hung process too; nothing does for a host
/// that is down or cut off).
inline bool host_acknowledges(int fd, std::chrono::milliseconds window) {
  for (const auto end = std::chrono::steady_clock::now() + window;;) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_unacked == 0) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

class heartbeat {
 public:
  using clock = std::chrono::steady_clock;

  /// A neighbour's heartbeat connection: its socket (owned by the caller, open while this lives) and the
  /// neighbour's rank.
  struct link {
    int fd;
    int rank;
  };
  /// A neighbour found dead: its rank and the evidence, to follow its name ("sent no heartbeat for 10 s: ...").
  struct verdict {
    int rank;
    std::string why;
  };

  /// Starts beating on, and watching, every link; `timeout` zero: beats go out, nobody is judged.
  heartbeat(std::vector<link> links, std::chrono::milliseconds timeout)
      : links_(std::move(links)), timeout_(timeout),
        interval_(timeout.count() > 0 ? std::clamp(timeout / 5, std::chrono::milliseconds(10), std::chrono::milliseconds(1000))
                                      : std::chrono::milliseconds(1000)),
        stop_fd_(::eventfd(0, EFD_CLOEXEC)), failed_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (stop_fd_ < 0 || failed_fd_ < 0) throw std::system_error(errno, std::system_category(), "heartbeat: eventfd");
    thread_ = std::thread([this] { run(); });
  }
  heartbeat(const heartbeat&) = delete;
  heartbeat& operator=(const heartbeat&) = delete;
  ~heartbeat() {
    const std::uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
    ::close(stop_fd_), ::close(failed_fd_);
  }

  /// The first neighbour found dead, or nullopt.
  std::optional<verdict> failure() const {
    if (failed_.load(std::memory_order_acquire) < 0) return std::nullopt;
    return verdict{failed_.load(std::memory_order_relaxed), why_};
  }
  /// A descriptor that becomes readable once failure() has a value (for a caller's poll()).
  int wake_fd() const { return failed_fd_; }

 private:
  struct watch {
    clock::time_point heard;
    bool open = true;
    std::size_t got = 0;   // bytes of the beat being received
    std::uint32_t word[2]{};
    std::size_t put = 8;   // bytes of the beat being sent (8: none pending)
    std::uint32_t out[2]{};
  };

  void run() {
    std::vector<watch> w(links_.size());
    for (auto& x : w) x.heard = clock::now();
    std::uint32_t count = 0;
    auto last_turn = clock::now(), next_send = last_turn;
    for (;;) {
      const auto now = clock::now();
      // This thread itself did not run for a while (the host was overloaded, the process stopped): no
      // one is judged on silence that this side may have caused.
      if (now - last_turn > timeout_ / 2)
        for (auto& x : w) x.heard = now;
      last_turn = now;
      if (now >= next_send) {
        ++count;
        for (std::size_t i = 0; i < w.size(); ++i)
          if (w[i].open) send_beat(links_[i].fd, w[i], count);
        next_send = now + interval_;
      }
      for (std::size_t i = 0; i < w.size(); ++i)
        if (timeout_.count() > 0 && now - w[i].heard > timeout_) judge(i, w[i]);
      pollfd fds[8];
      nfds_t n = 0;
      std::size_t which[8];
      fds[n++] = {stop_fd_, POLLIN, 0};
      for (std::size_t i = 0; i < w.size() && n < 8; ++i)
        if (w[i].open) which[n] = i, fds[n++] = {links_[i].fd, POLLIN, 0};
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_send - clock::now()).count();
      if (::poll(fds, n, int(std::max<long long>(wait, 0))) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      for (nfds_t k = 1; k < n; ++k)
        if (fds[k].revents) receive(which[k], w[which[k]]);
    }
  }

  /// Sends a beat to a neighbour, or the rest of one a full socket cut short (the stream stays whole
  /// beats); a socket still full is skipped: the neighbour is not reading, which is its business.
  static void send_beat(int fd, watch& x, std::uint32_t count) {
    if (x.put == sizeof x.out) x.out[0] = beat_magic, x.out[1] = count, x.put = 0;
    const ssize_t n = ::send(fd, reinterpret_cast<const char*>(x.out) + x.put, sizeof x.out - x.put, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) x.put += std::size_t(n);
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) x.open = false;
  }

  /// Reads what neighbour i sent: beats refresh it, the end of the connection stops the reading (its
  /// silence is then judged as any other), anything else is judged at once.
  void receive(std::size_t i, watch& x) {
    for (;;) {
      const ssize_t got = ::recv(links_[i].fd, reinterpret_cast<char*>(x.word) + x.got, sizeof x.word - x.got, MSG_DONTWAIT);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (got <= 0) {
        x.open = false;
        return;
      }
      x.got += std::size_t(got);
      if (x.got < sizeof x.word) continue;
      x.got = 0;
      if (x.word[0] != beat_magic) {
        x.open = false;
        decide(links_[i].rank, "sent bytes that are not a heartbeat on its heartbeat connection");
        return;
      }
      x.heard = clock::now();
    }
  }

  /// Neighbour i has been silent for the timeout: what the evidence says.
  void judge(std::size_t i, watch& x) {
    if (failed_.load(std::memory_order_relaxed) >= 0) return;
    const auto ms = timeout_.count();
    const std::string silent = "sent no heartbeat for " +
                               (ms % 1000 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s");
    std::string why;
    if (!x.open) why = silent + ": its heartbeat connection closed (the process ended)";
    else if (!host_acknowledges(links_[i].fd, std::min(interval_, std::chrono::milliseconds(500))))
      why = silent + ": its host does not acknowledge (down or cut off)";
    else
      why = silent + ": its host acknowledges, so the process is stopped, frozen or starved of CPU";
    decide(links_[i].rank, why);
  }
  void decide(int rank, std::string why) {
    if (failed_.load(std::memory_order_relaxed) >= 0) return;
    why_ = std::move(why);
    failed_.store(rank, std::memory_order_release);
    const std::uint64_t one = 1;
    (void)!::write(failed_fd_, &one, sizeof one);
  }

  std::vector<link> links_;
  std::chrono::milliseconds timeout_, interval_;
  int stop_fd_, failed_fd_;
  std::atomic<int> failed_{-1};
  std::string why_;  // written once, before failed_ is stored
  std::thread thread_;
};

}  // namespace dtrain::comm::detail
