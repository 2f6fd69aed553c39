// netrelay: the switch between the hosts of the multi-host tests (tests/deploy/netns.py) when their
// links need delay or loss, which tc cannot add on a kernel without netem. It forwards every Ethernet
// frame read on one host's link to the link of the host that owns the destination MAC (learned from
// source MACs; broadcasts and unknown destinations go to every other link), each after a fixed one-way
// delay, dropping each with a given probability (a seeded generator: the same drops for the same
// traffic). Frames keep their virtio-net header (PACKET_VNET_HDR), so checksum offload and segmentation
// offload pass through as they would through a bridge.
//   netrelay --delay-us 500 --loss 0.01 --seed 1 IFACE...     (runs until SIGTERM or SIGINT)
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t stop = 0;

/// The virtio-net header PACKET_VNET_HDR puts before each frame (struct virtio_net_hdr: flags, gso_type,
/// hdr_len, gso_size, csum_start, csum_offset; linux/virtio_net.h is not C++).
constexpr std::size_t vnet_header = 10;

using clock_type = std::chrono::steady_clock;

struct frame {
  clock_type::time_point due;
  std::size_t out;
  std::vector<unsigned char> bytes;  // virtio-net header, then the Ethernet frame
};

int open_link(const std::string& name) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
  if (fd < 0) return std::perror("netrelay: socket"), -1;
  const int on = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0) return std::perror("netrelay: PACKET_VNET_HDR"), -1;
  setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on);  // not our own sends
  const int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(ETH_P_ALL);
  a.sll_ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (a.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "netrelay: cannot bind to %s: %s\n", name.c_str(), std::strerror(errno));
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  long delay_us = 0;
  double loss = 0.0;
  unsigned seed = 1;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--delay-us" && i + 1 < argc) delay_us = std::atol(argv[++i]);
    else if (a == "--loss" && i + 1 < argc) loss = std::atof(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = static_cast<unsigned>(std::atol(argv[++i]));
    else names.push_back(a);
  }
  if (names.size() < 2 || delay_us < 0 || loss < 0 || loss >= 1) {
    std::fprintf(stderr, "usage: netrelay [--delay-us US] [--loss P] [--seed S] IFACE IFACE...\n");
    return 2;
  }
  signal(SIGTERM, [](int) { stop = 1; });
  signal(SIGINT, [](int) { stop = 1; });
  std::vector<pollfd> fds;
  for (const auto& n : names) {
    const int fd = open_link(n);
    if (fd < 0) return 1;
    fds.push_back({fd, POLLIN, 0});
  }
  std::mt19937_64 random(seed);
  std::bernoulli_distribution drop(loss);
  std::map<std::array<unsigned char, 6>, std::size_t> owner;  // MAC -> link
  std::deque<frame> queue;  // one fixed delay: due times only grow, so a FIFO is the schedule
  std::vector<unsigned char> buf(65536 + vnet_header);
  const auto delay = std::chrono::microseconds(delay_us);
  std::uint64_t forwarded = 0, dropped = 0;
  std::printf("netrelay: %zu links, delay %ld us, loss %.4f\n", names.size(), delay_us, loss);
  std::fflush(stdout);

  while (!stop) {
    // wait for a frame, or until the first queued frame is due
    timespec wait{0, 50'000'000};
    if (!queue.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(queue.front().due - clock_type::now());
      const long ns = std::max<long>(0, left.count());
      wait = {ns / 1'000'000'000, ns % 1'000'000'000};
    }
    if (ppoll(fds.data(), fds.size(), &wait, nullptr) < 0 && errno != EINTR) return std::perror("netrelay: ppoll"), 1;
    const auto now = clock_type::now();
    for (std::size_t in = 0; in < fds.size(); ++in) {
      if (!(fds[in].revents & POLLIN)) continue;
      for (;;) {
        const ssize_t n = recv(fds[in].fd, buf.data(), buf.size(), 0);
        if (n < 0) break;  // EAGAIN: drained
        const std::size_t eth = vnet_header;
        if (static_cast<std::size_t>(n) < eth + 14) continue;
        std::array<unsigned char, 6> dst, src;
        std::memcpy(dst.data(), buf.data() + eth, 6);
        std::memcpy(src.data(), buf.data() + eth + 6, 6);
        owner[src] = in;
        const auto it = (dst[0] & 1) ? owner.end() : owner.find(dst);  // group bit: broadcast or multicast
        for (std::size_t out = 0; out < fds.size(); ++out) {
          if (out == in || (it != owner.end() && it->second != out)) continue;
          if (drop(random)) {
            ++dropped;
            continue;
          }
          queue.push_back({now + delay, out, std::vector<unsigned char>(buf.begin(), buf.begin() + n)});
        }
      }
    }
    for (const auto t = clock_type::now(); !queue.empty() && queue.front().due <= t; queue.pop_front()) {
      const frame& f = queue.front();
      if (send(fds[f.out].fd, f.bytes.data(), f.bytes.size(), 0) < 0) {
        if (errno == EAGAIN || errno == ENOBUFS) break;  // the link's queue is full: again after the next poll
        ++dropped;                                       // anything else: lost, as on a wire
        continue;
      }
      ++forwarded;
    }
  }
  std::printf("netrelay: forwarded %llu frames, dropped %llu\n", static_cast<unsigned long long>(forwarded),
              static_cast<unsigned long long>(dropped));
  return 0;
}
