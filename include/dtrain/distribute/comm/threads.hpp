#pragma once
/// \file
/// `comm::threads`: the communicator of replicas that are threads of one process (`mirrored_strategy` on
/// the CPU). A collective is a rendezvous in shared memory: every rank publishes its buffer, then each
/// reduces its own slice of the buffers, element by element in rank order, and writes it into all of them,
/// so every rank ends with the same bits, and those of a sequential sum over ranks 0, 1, ... A second
/// rendezvous keeps a rank from touching its buffer while another still reads it.
///
/// Failures latch for the whole group: a kind or size that differs between ranks, a rank that does not
/// arrive within the timeout (named), or `abort(why)` (what a strategy calls when a replica's step threw)
/// fail every waiting and later collective with the same `comm_error`.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/threads.hpp"
#include "dtrain/core/trace.hpp"
#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain::comm {

class threads {
 public:
  /// `all_reduce_async` reduces at once (shared memory: nothing to overlap), so its handle has no work left.
  struct handle {
    void wait() {}
  };

  /// The `size` ranks of one new group, rank i at [i], each to be used by one thread. A rank that waits
  /// longer than `timeout` (zero: no limit) for the others fails the group.
  static std::vector<threads> make_group(int size, std::chrono::milliseconds timeout = std::chrono::minutes(1)) {
    if (size < 1) throw value_error("comm::threads: a group needs at least one rank, got " + std::to_string(size));
    auto g = std::make_shared<group>(size, timeout);
    std::vector<threads> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(threads(g, r));
    return ranks;
  }

  int rank() const { return rank_; }
  int size() const { return g_->size; }

  void all_reduce(std::span<float> data, reduce_op op) {
    collective(kind::all_reduce, data.size(), int(op), data.data(), [&](int me, const std::vector<slot>& s) {
      const std::size_t n = data.size(), p = s.size(), lo = n * std::size_t(me) / p, hi = n * std::size_t(me + 1) / p;
      const float inv = 1.0f / float(p);
      std::array<float, 2048> acc;  // a block of the slice, reduced in cache, then written to every rank
      for (std::size_t at = lo; at < hi; at += acc.size()) {
        const std::size_t m = std::min(acc.size(), hi - at);
        std::memcpy(acc.data(), static_cast<const float*>(s[0].data) + at, m * sizeof(float));
        for (std::size_t k = 1; k < p; ++k) dtrain::detail::reduce_into(acc.data(), static_cast<const float*>(s[k].data) + at, m, op);
        if (op == reduce_op::mean)
          for (std::size_t i = 0; i < m; ++i) acc[i] *= inv;
        for (const slot& k : s) std::memcpy(static_cast<float*>(k.data) + at, acc.data(), m * sizeof(float));
      }
    });
  }
  handle all_reduce_async(std::span<float> data, reduce_op op) {
    all_reduce(data, op);
    return {};
  }
  void broadcast(std::span<float> data, int root) { broadcast(std::as_writable_bytes(data), root); }
  void broadcast(std::span<std::byte> data, int root) {
    if (root < 0 || root >= size())
      throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size()));
    collective(kind::broadcast, data.size(), root, data.data(), [&](int me, const std::vector<slot>& s) {
      if (me != root && !data.empty()) std::memcpy(data.data(), s[std::size_t(root)].data, data.size());
    });
  }
  void all_gather(std::span<const float> in, std::span<float> out) {
    if (out.size() != in.size() * std::size_t(size()))
      throw value_error("all_gather: output must hold size() * input elements");
    collective(kind::all_gather, in.size(), 0, const_cast<float*>(in.data()), [&](int, const std::vector<slot>& s) {
      for (std::size_t k = 0; k < s.size(); ++k)
        if (!in.empty()) std::memcpy(out.data() + k * in.size(), s[k].data, in.size_bytes());
    });
  }
  void barrier() {
    collective(kind::barrier, 0, 0, nullptr, [](int, const std::vector<slot>&) {});
  }
  /// Fails the group: every rank's pending and later collectives throw `comm_error(why)`.
  void abort(const std::string& why) { g_->fail(why); }

 private:
  enum class kind { all_reduce, broadcast, all_gather, barrier };
  static const char* name(kind k) {
    constexpr const char* names[] = {"all_reduce", "broadcast", "all_gather", "barrier"};
    return names[int(k)];
  }
  /// What a rank brings to the current collective.
  struct slot {
    kind what = kind::barrier;
    std::size_t count = 0;
    int arg = 0;  // the reduce op or the root
    void* data = nullptr;
  };

  struct group {
    group(int n, std::chrono::milliseconds t) : size(n), timeout(t), slots(std::size_t(n)), entered(std::size_t(n), 0) {}
    const int size;
    const std::chrono::milliseconds timeout;
    std::mutex m;
    std::condition_variable cv;
    std::atomic<std::uint64_t> generation{0};  // rendezvous completed so far
    std::atomic<bool> failed{false};           // `failure` is set
    int arrived = 0;
    std::string failure;  // latched: the first failure's message
    std::vector<slot> slots;
    std::vector<std::uint64_t> entered;  // rendezvous each rank has entered (to name the missing ones)

    void fail(const std::string& why) {
      {
        std::lock_guard l(m);
        if (failure.empty()) failure = why;
        failed = true;
      }
      cv.notify_all();
    }
    /// Waits until every rank has arrived (or the group failed, or the timeout passed: then it fails).
    /// The replicas of a step arrive within microseconds of each other, so a waiting rank polls for a
    /// moment before it sleeps (waking a sleeping thread costs more than most collectives here).
    /// `publish` (the first rendezvous of a collective) is this rank's slot, written under the lock once
    /// the group is known not to have failed: after a failure the others may still be reading the slots.
    void rendezvous(int rank, const char* what, const slot* publish = nullptr) {
      std::unique_lock l(m);
      if (!failure.empty()) throw comm_error(failure);
      if (publish) slots[std::size_t(rank)] = *publish;
      const std::uint64_t gen = generation.load(std::memory_order_relaxed);
      ++entered[std::size_t(rank)];
      if (++arrived == size) {
        arrived = 0;
        generation.store(gen + 1, std::memory_order_release);
        l.unlock();
        cv.notify_all();
        return;
      }
      l.unlock();
      dtrain::detail::spin_until([&] { return generation.load(std::memory_order_acquire) != gen || failed.load(); },
                                 std::chrono::microseconds(50));
      if (generation.load(std::memory_order_acquire) != gen) return;
      l.lock();
      const auto arrived_or_failed = [&] { return generation.load(std::memory_order_acquire) != gen || !failure.empty(); };
      if (timeout.count() <= 0) cv.wait(l, arrived_or_failed);
      else if (!cv.wait_for(l, timeout, arrived_or_failed)) {
        std::string missing;
        for (int r = 0; r < size; ++r)
          if (entered[std::size_t(r)] < entered[std::size_t(rank)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        failure = "comm::threads: replica " + std::to_string(rank) + " waited " + std::to_string(timeout.count()) +
                  " ms in " + what + " for replica(s) " + missing + " (stuck, or not calling the same collectives)";
        failed = true;
        cv.notify_all();
      }
      if (generation.load(std::memory_order_acquire) == gen) throw comm_error(failure);
    }
  };

  threads(std::shared_ptr<group> g, int rank) : g_(std::move(g)), rank_(rank) {}

  /// Publishes this rank's part, meets the others, checks that all called the same collective, runs
  /// `work(rank, slots)` on this rank's share, and meets them again before returning.
  template <class Work>
  void collective(kind what, std::size_t count, int arg, void* data, Work&& work) {
    const trace::scope traced("comm", name(what), what == kind::broadcast ? std::int64_t(count) : std::int64_t(count * 4));
    const slot mine{what, count, arg, data};
    g_->rendezvous(rank_, name(what), &mine);
    const slot& first = g_->slots[0];
    for (std::size_t r = 1; r < g_->slots.size(); ++r) {
      const slot& s = g_->slots[r];
      if (s.what != first.what || s.count != first.count || s.arg != first.arg) {
        // every rank sees the same slots and so throws the same error
        const std::string why = "comm::threads: replicas called different collectives: replica 0 " +
                                std::string(name(first.what)) + " of " + std::to_string(first.count) +
                                " (arg " + std::to_string(first.arg) + "), replica " + std::to_string(r) + " " +
                                name(s.what) + " of " + std::to_string(s.count) + " (arg " + std::to_string(s.arg) + ")";
        g_->fail(why);
        throw comm_error(why);
      }
    }
    work(rank_, g_->slots);
    g_->rendezvous(rank_, name(what));
  }

  std::shared_ptr<group> g_;
  int rank_;
};

static_assert(communicator<threads>);

}  // namespace dtrain::comm
