#pragma once
/// \file
/// What state that every replica of a step touches (a free optimizer's variables, a standalone metric's
/// totals) needs of the strategy that runs the replicas, seen from below distribute/: which replica the
/// calling thread computes for, how many this process runs at once, a barrier among them, and a sum over
/// the workers. Strategies set it on their replicas' threads inside `strategy.run`.
///
/// `replica_copies<T>` keeps one T per replica of this process, as TF's mirrored and sync-on-read
/// variables do, so that no two replica threads ever write the same state.

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace dtrain::detail {

/// The replicas a strategy runs, as their threads see them.
class replica_group {
 public:
  virtual ~replica_group() = default;
  /// The replicas this process runs at once (mirrored_strategy: its devices; one per worker process).
  virtual int num_local_replicas() const = 0;
  /// Returns once every replica of this process has entered it (from the replicas' threads).
  virtual void local_barrier() = 0;
  /// Sums `values` over the workers' processes, in cross-replica context (outside `strategy.run`): a
  /// collective, which every worker calls at the same point of its program.
  virtual void sum_over_workers(std::span<float> values) = 0;
};

/// Which of its process's replicas the calling thread computes for inside `strategy.run`; -1 outside
/// (TF's cross-replica context).
inline int& current_local_replica() {
  thread_local int current = -1;
  return current;
}
/// The group of the replica the calling thread computes for; empty outside `strategy.run`.
inline std::shared_ptr<replica_group>& current_replica_group() {
  thread_local std::shared_ptr<replica_group> current;
  return current;
}

/// While it lives, the calling thread computes for replica `index` of `group` (what strategies open
/// on their replicas' threads in `run`).
class replica_thread {
 public:
  replica_thread(int index, std::shared_ptr<replica_group> group)
      : index_(std::exchange(current_local_replica(), index)),
        group_(std::exchange(current_replica_group(), std::move(group))) {}
  replica_thread(const replica_thread&) = delete;
  replica_thread& operator=(const replica_thread&) = delete;
  ~replica_thread() {
    current_local_replica() = index_;
    current_replica_group() = std::move(group_);
  }

 private:
  int index_;
  std::shared_ptr<replica_group> group_;
};

/// One T per replica of this process: replica 0's is the owner's own (passed to `get`), the others'
/// are kept here, made by `make(own)` at the first `get` of a run that finds them missing (between two
/// barriers, so that no replica reads them while replica 0 makes them). `clear()` (outside a run)
/// drops them, and the next run makes them again.
template <class T>
class replica_copies {
 public:
  replica_copies() = default;
  replica_copies(const replica_copies&) {}  // a copy of the owner starts without replicas
  replica_copies& operator=(const replica_copies&) {
    copies_.clear();
    return *this;
  }
  replica_copies(replica_copies&&) noexcept = default;
  replica_copies& operator=(replica_copies&&) noexcept = default;

  /// The calling replica's T (`own` outside a run, or for a process of one replica).
  template <class Make>
  T& get(T& own, Make&& make) {
    const int r = current_local_replica();
    replica_group* group = current_replica_group().get();
    const int n = group && r >= 0 ? group->num_local_replicas() : 1;
    if (n <= 1) return own;
    if (copies_.size() != std::size_t(n - 1)) {  // read by every replica before the first barrier
      group->local_barrier();
      if (r == 0) copies_.assign(std::size_t(n - 1), make(own));
      group->local_barrier();
    }
    return r == 0 ? own : copies_[std::size_t(r) - 1];
  }
  /// The other replicas' T (replicas 1, 2, ...), for a cross-replica read.
  const std::vector<T>& others() const { return copies_; }
  void clear() { copies_.clear(); }

 private:
  std::vector<T> copies_;
};

}  // namespace dtrain::detail
