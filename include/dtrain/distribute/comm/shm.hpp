#pragma once
/// \file
/// The shared-memory transport of `ring_tcp`: when every rank of the ring runs on this host, all-reduce
/// goes through one POSIX shared-memory segment instead of loopback TCP (as Open MPI's `vader` and
/// NCCL's SHM transport do): copies in cache and a counter per rank instead of the kernel's socket path.
///
/// Joining: after the ring is connected, rank 0 creates a segment (mode 0600, a random name) and sends
/// its name and a random nonce around the ring; every rank maps it and checks the nonce; one all-reduce
/// over TCP says whether all could (a rank on another host, or in a container with its own /dev/shm,
/// cannot), and rank 0 unlinks the name, so nothing is left behind in /dev/shm. Either all ranks use the
/// segment or none does.
///
/// An all-reduce of at most `small_bytes`: each rank copies its buffer into its slot (two sets, taken in
/// turn), meets the others at a barrier, and reduces all slots in rank order (every rank the same bits):
/// one barrier. A larger one, in chunks of `slot_bytes`: each rank copies the parts of its chunk that
/// the others reduce into its slot; barrier; rank r reduces the r-th part of every slot into its own
/// buffer and publishes it; barrier; each copies the others' parts out. Every part is reduced by one
/// rank only, so every rank gets the same bits.
///
/// In 16 bits (`all_reduce<T>`), the slots hold the wire type: each rank rounds what it copies in, the
/// reducing rank widens and adds in FP32 and publishes its part of the sum rounded (keeping the rounded
/// value), and the others widen it as they copy it out; the small path reduces the widened slots in rank
/// order and rounds the result. Half the bytes through the caches, the same sums as the TCP ring's.
///
/// The barrier is a counter per rank. A waiting rank spins briefly, then sleeps on a futex that the
/// arriving rank wakes. When ranks outnumber cores it yields instead of spinning, so that the core goes
/// to a rank that has yet to arrive; otherwise it does not yield: in training the thread it would yield
/// to is its own worker's math thread, which keeps the core for a whole time slice while the others
/// wait. While it waits it watches for failures: a rank that left (its destructor says so in the
/// segment), a closed connection to either ring neighbour (what a crashed process leaves), a neighbour
/// whose heartbeat stopped (a stopped process), an abort another rank published, and the deadline
/// (`operation_timeout`, if set): the rank that has not arrived is named, as the TCP ring names it.

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <thread>

#include "dtrain/core/threads.hpp"
#include "dtrain/distribute/comm/rendezvous.hpp"

namespace dtrain::comm {

class shm_transport {
 public:
  using clock = std::chrono::steady_clock;

  /// What rank 0 sends around the ring: the segment's name and the nonce it wrote into it.
  struct invitation {
    char name[48] = {};
    std::uint64_t nonce = 0;
    std::uint64_t bytes = 0;
  };

  /// Joins (or, on rank 0, creates) the segment; `broadcast(bytes)` from rank 0 and `all_reduce_min`
  /// are the ring's TCP collectives. Null when some rank could not map it: then every rank stays on TCP.
  template <class Broadcast, class AllReduceMin>
  static std::unique_ptr<shm_transport> join(tcp_rendezvous& rv, const ring_tcp_options& o, Broadcast&& broadcast,
                                             AllReduceMin&& all_reduce_min) {
    const int p = rv.size();
    const std::size_t slot = slot_bytes_for(o), small = small_bytes_for(o);
    const std::size_t bytes = layout_bytes(p, slot, small);
    invitation inv;
    std::unique_ptr<shm_transport> t;
    struct unlink_at_exit {  // the name goes once every rank has it mapped, or the ring failed
      const char* name;
      bool created = false;
      ~unlink_at_exit() {
        if (created) ::shm_unlink(name);
      }
    } name_guard{inv.name, false};
    if (rv.rank() == 0 && o.shared_memory) {
      std::random_device rd;
      const std::uint64_t id = (std::uint64_t(rd()) << 32) ^ rd();
      inv.nonce = (std::uint64_t(rd()) << 32) ^ rd() ^ 1;  // never 0
      inv.bytes = bytes;
      std::snprintf(inv.name, sizeof inv.name, "/dtrain-%d-%016llx", int(::getpid()), static_cast<unsigned long long>(id));
      const int fd = ::shm_open(inv.name, O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd >= 0) {
        name_guard.created = true;
        // allocated now, not on first touch: a /dev/shm without room (a container's 64 MiB) fails here,
        // and the ring stays on TCP, instead of a SIGBUS in the middle of an all-reduce
        if (::posix_fallocate(fd, 0, off_t(bytes)) == 0) t = map(fd, bytes, rv, o, slot, small, inv.nonce, true);
        ::close(fd);
      }
      if (!t) inv.nonce = 0;  // tells the others not to try
    }
    broadcast(std::as_writable_bytes(std::span<invitation>(&inv, 1)));
    if (rv.rank() != 0 && o.shared_memory && inv.nonce != 0 && inv.bytes == bytes) {
      inv.name[sizeof inv.name - 1] = 0;
      const int fd = ::shm_open(inv.name, O_RDWR, 0);
      struct stat st{};
      if (fd >= 0 && ::fstat(fd, &st) == 0 && std::uint64_t(st.st_size) == bytes)
        t = map(fd, bytes, rv, o, slot, small, inv.nonce, false);
      if (fd >= 0) ::close(fd);
    }
    float ok = t ? 1.0f : 0.0f;
    all_reduce_min(std::span<float>(&ok, 1));  // every rank has mapped it (or given up) after this
    if (ok < 1.0f) t.reset();
    return t;
  }

  shm_transport(const shm_transport&) = delete;
  shm_transport& operator=(const shm_transport&) = delete;
  ~shm_transport() {
    rank_state(rank_).departed.store(1);
    wake_all();
    ::munmap(base_, bytes_);
  }

  /// Reduces `data` over the ranks with `op`; every rank gets the same bits. Throws `comm_error` naming
  /// the rank that failed.
  void all_reduce(std::span<float> data, reduce_op op) {
    reduce_through<float>(data, op, [](const float* src, std::size_t n, float* dst) { copy(dst, src, n); },
                          [](const float* src, std::size_t n, float* dst) { copy(dst, src, n); });
  }
  /// The same with the values in the segment rounded to T (bfloat16 or float16), summed in FP32.
  template <half_float T>
  void all_reduce(std::span<float> data, reduce_op op) {
    reduce_through<T>(data, op, [](const float* src, std::size_t n, T* dst) { round_to(src, n, dst); },
                      [](const T* src, std::size_t n, float* dst) { widen(src, n, dst); });
  }

 private:
  /// The all-reduce, with E the element type in the segment: `in(src, n, dst)` copies (or rounds) floats
  /// into it, `out(src, n, dst)` copies (or widens) them back.
  template <class E, class In, class Out>
  void reduce_through(std::span<float> data, reduce_op op, In in, Out out) {
    ++collective_;
    const std::size_t n = data.size();
    if (n == 0) return;
    if (n * sizeof(E) <= small_bytes_) return small_all_reduce<E>(data, op, in, out);
    const std::size_t p = std::size_t(size_), r = std::size_t(rank_), chunk = slot_bytes_ / sizeof(E);
    constexpr std::size_t line = 64 / sizeof(E);
    E* const mine = slot<E>(rank_);
    E* const result = slot<E>(size_);
    for (std::size_t c0 = 0; c0 < n; c0 += chunk) {
      const std::size_t m = std::min(chunk, n - c0);
      float* d = data.data() + c0;
      auto lo = [&](std::size_t q) { return std::min(m, (m * q / p + line - 1) & ~(line - 1)); };  // 64-byte parts
      const std::size_t a = lo(r), b = lo(r + 1);
      in(d, a, mine);
      in(d + b, m - b, mine + b);
      barrier();
      for (int q = 0; q < size_; ++q)
        if (q != rank_) dtrain::detail::reduce_into(d + a, slot<E>(q) + a, b - a, op);
      if (op == reduce_op::mean)
        for (std::size_t i = a; i < b; ++i) d[i] *= 1.0f / float(p);
      in(d + a, b - a, result + a);
      if constexpr (!std::same_as<E, float>) out(result + a, b - a, d + a);  // keep the rounded sum
      barrier();
      out(result, a, d);
      out(result + b, m - b, d + b);
    }
  }

  /// One rank's words in the segment, on a cache line of their own.
  struct alignas(64) rank_words {
    std::atomic<std::uint32_t> arrived{0};   // barriers passed; the futex word
    std::atomic<std::uint32_t> sleepers{0};  // ranks sleeping on `arrived`
    std::atomic<std::uint32_t> departed{0};  // 1 once this rank's transport is gone
  };
  struct alignas(64) header {
    std::uint64_t nonce;
    std::int32_t world_size;
    std::atomic<std::int32_t> abort_rank;  // a failed rank, published by whoever found it; -1 while none
    std::atomic<std::int32_t> abort_by;
  };
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free);

  static constexpr std::size_t page = 4096;
  static std::size_t slot_bytes_for(const ring_tcp_options& o) { return std::max<std::size_t>(o.chunk_bytes & ~std::size_t{4095}, 4096); }
  static std::size_t small_bytes_for(const ring_tcp_options& o) { return (std::max<std::size_t>(o.small_bytes, 64) + 63) & ~std::size_t{63}; }
  static std::size_t control_bytes(int p) { return (sizeof(header) + std::size_t(p) * sizeof(rank_words) + page - 1) & ~(page - 1); }
  /// Control page(s), p input slots and the result slot, then two sets of p small slots.
  static std::size_t layout_bytes(int p, std::size_t slot, std::size_t small) {
    return control_bytes(p) + std::size_t(p + 1) * slot + 2 * std::size_t(p) * small;
  }

  static std::unique_ptr<shm_transport> map(int fd, std::size_t bytes, tcp_rendezvous& rv, const ring_tcp_options& o,
                                            std::size_t slot, std::size_t small, std::uint64_t nonce, bool create) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return nullptr;
    auto* h = static_cast<header*>(base);
    if (create) {
      // the file is zeros: set up the control words before anyone else can know the name
      h->world_size = rv.size();
      h->abort_rank.store(-1), h->abort_by.store(-1);
      h->nonce = nonce;
    } else if (h->nonce != nonce || h->world_size != rv.size()) {
      ::munmap(base, bytes);
      return nullptr;
    }
    return std::unique_ptr<shm_transport>(new shm_transport(base, bytes, rv, o, slot, small));
  }
  shm_transport(void* base, std::size_t bytes, tcp_rendezvous& rv, const ring_tcp_options& o, std::size_t slot,
                std::size_t small)
      : base_(base), bytes_(bytes), rv_(rv), o_(o), rank_(rv.rank()), size_(rv.size()), slot_bytes_(slot),
        small_bytes_(small), yield_(std::thread::hardware_concurrency() < unsigned(size_)) {}

  header& head() { return *static_cast<header*>(base_); }
  rank_words& rank_state(int q) {
    return reinterpret_cast<rank_words*>(static_cast<std::byte*>(base_) + sizeof(header))[q];
  }
  /// Input slot q (q = size: the result slot), holding E.
  template <class E = float>
  E* slot(int q) {
    return reinterpret_cast<E*>(static_cast<std::byte*>(base_) + control_bytes(size_) + std::size_t(q) * slot_bytes_);
  }
  template <class E>
  E* small_slot(std::size_t set, int q) {
    return reinterpret_cast<E*>(reinterpret_cast<std::byte*>(slot(size_ + 1)) + (set * std::size_t(size_) + std::size_t(q)) * small_bytes_);
  }

  /// One barrier: every rank copies in, then all reduce the same slots in rank order (in 16 bits:
  /// widened, and the result rounded).
  template <class E, class In, class Out>
  void small_all_reduce(std::span<float> data, reduce_op op, In in, Out out) {
    const std::size_t n = data.size(), set = small_count_++ & 1;
    // A set is written again two small all-reduces later, after every rank has passed the barrier of
    // the one in between, so after it has finished reading.
    in(data.data(), n, small_slot<E>(set, rank_));
    barrier();
    float* d = data.data();
    if (rank_ != 0 || !std::same_as<E, float>) out(small_slot<E>(set, 0), n, d);
    for (int q = 1; q < size_; ++q) dtrain::detail::reduce_into(d, small_slot<E>(set, q), n, op);
    if (op == reduce_op::mean)
      for (std::size_t i = 0; i < n; ++i) d[i] *= 1.0f / float(size_);
    if constexpr (!std::same_as<E, float>) round_through<E>(d, n);
  }

  /// Arrives, then waits until every other rank has arrived as often.
  void barrier() {
    rank_words& me = rank_state(rank_);
    const std::uint32_t target = me.arrived.load(std::memory_order_relaxed) + 1;
    me.arrived.store(target);  // seq_cst: ordered before the load of sleepers (no lost wake-up)
    if (me.sleepers.load() != 0) futex(&me.arrived, FUTEX_WAKE, INT_MAX, nullptr);
    const auto deadline = dtrain::detail::deadline_after(o_.operation_timeout);
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && !reached(q, target)) wait_for(q, target, deadline);
  }
  bool reached(int q, std::uint32_t target) {
    return std::int32_t(rank_state(q).arrived.load(std::memory_order_acquire) - target) >= 0;
  }
  void wait_for(int q, std::uint32_t target, clock::time_point deadline) {
    if (!yield_ && dtrain::detail::spin_until([&] { return reached(q, target); }, std::chrono::microseconds(50))) return;
    for (unsigned i = 0; yield_ && i < 256; ++i) {  // more ranks than cores: the core goes to a rank that has to arrive
      if (reached(q, target)) return;
      if ((i & 15) == 15) check(q, target, deadline);
      std::this_thread::yield();
    }
    rank_words& w = rank_state(q);
    while (!reached(q, target)) {
      w.sleepers.fetch_add(1);
      const std::uint32_t seen = w.arrived.load();
      if (std::int32_t(seen - target) < 0) {
        timespec slice{0, 1'000'000};  // 1 ms, then look for failures again
        futex(&w.arrived, FUTEX_WAIT, seen, &slice);
      }
      w.sleepers.fetch_sub(1);
      if (!reached(q, target)) check(q, target, deadline);
    }
  }

  /// While waiting for rank q to reach `target`: throws if another rank published an abort, a rank
  /// that has not reached it left or closed its connection to this one, or the deadline passed.
  void check(int q, std::uint32_t target, clock::time_point deadline) {
    if (const int a = head().abort_rank.load(); a >= 0) fail(a, head().abort_by.load(), "");
    for (int k = 0; k < size_; ++k)
      if (k != rank_ && rank_state(k).departed.load() && !reached(k, target))
        fail(k, rank_, "left during collective " + std::to_string(collective_) + " (it stopped or failed)");
    for (auto [sock, peer] : {std::pair{&rv_.prev(), rv_.prev_rank()}, std::pair{&rv_.next(), rv_.next_rank()}}) {
      pollfd pfd{sock->is_open() ? sock->native_handle() : -1, POLLRDHUP, 0};
      if (pfd.fd >= 0 && ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) && !reached(peer, target))
        fail(peer, rank_, "closed the connection (it died or stopped) during collective " + std::to_string(collective_));
    }
    if (auto dead = rv_.peer_failure(); dead && !reached(dead->rank, target))
      fail(dead->rank, rank_, dead->why + " (collective " + std::to_string(collective_) + ")");
    if (clock::now() > deadline)
      fail(q, rank_, "timed out after " + std::to_string(o_.operation_timeout.count() / 1000) + " s in collective " +
                         std::to_string(collective_) + " waiting for " + rv_.peer_name(q) +
                         " (it hung or died; shared memory)");
  }
  /// Publishes the failed rank (the first report wins), wakes every sleeper and throws.
  [[noreturn]] void fail(int culprit, int by, const std::string& what) {
    std::int32_t none = -1;
    if (head().abort_rank.compare_exchange_strong(none, culprit)) head().abort_by.store(by);
    wake_all();
    std::string m;
    if (what.empty() || by != rank_)
      m = rv_.peer_name(culprit) + " failed (reported through shared memory by " +
          (by >= 0 && by < size_ ? rv_.peer_name(by) : std::string("another rank")) + ")";
    else if (what.rfind("timed out", 0) == 0)
      m = what;
    else
      m = rv_.peer_name(culprit) + " " + what;
    throw comm_error("ring_tcp: rank " + std::to_string(rank_) + ": " + m);
  }
  void wake_all() {
    for (int q = 0; q < size_; ++q) futex(&rank_state(q).arrived, FUTEX_WAKE, INT_MAX, nullptr);
  }
  static void futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) {
    // a shared (not FUTEX_PRIVATE) futex: the word is in memory other processes map
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
  }
  /// Copies n floats in 64-byte blocks: faster here than glibc's memcpy (its `rep movsb` path for these
  /// sizes) on lines another core just wrote: 2 ranks, 1 MiB, 16 against 13.6 GB/s of busbw.
  static void copy(float* dst, const float* src, std::size_t n) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) __builtin_memcpy(dst + i, src + i, 64);
    for (; i < n; ++i) dst[i] = src[i];
  }

  void* base_;
  std::size_t bytes_;
  tcp_rendezvous& rv_;
  const ring_tcp_options& o_;
  int rank_, size_;
  std::size_t slot_bytes_, small_bytes_;
  bool yield_;  // ranks outnumber cores: yield 256 times before sleeping instead of spinning 50 us
  std::size_t small_count_ = 0;
  std::uint32_t collective_ = 0;
};

}  // namespace dtrain::comm
