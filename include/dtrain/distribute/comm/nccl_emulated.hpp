#pragma once
/// \file
/// `comm::nccl_emulated`: `basic_nccl` on an emulation of NCCL among the threads of one process, on
/// `cuda_emulated` devices (whose memory is host memory), so that every machine runs comm::nccl's code:
/// its rendezvous, deadlines, aborts and error paths, and mirrored_strategy's grouped calls.
///
/// The ranks of a job find each other in a process-wide table by their unique id, as NCCL's do through
/// its bootstrap. A collective is posted and returns at once, as NCCL's are placed on a stream; it runs
/// when every rank has posted it, by the thread of the last one, for all ranks in rank order (so every
/// rank gets the same bits), and a rank's event happens once the collectives it posted before have run.
/// A collective that a rank never posts never runs (as on a GPU, the others wait: basic_nccl's
/// deadline ends it); ranks that post different collectives fail the job, each rank's poll saying so.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dtrain/backend/cuda/emulator.hpp"
#include "dtrain/distribute/comm/basic_nccl.hpp"

namespace dtrain::comm {

struct emulated_nccl_api {
  static constexpr const char* name = "nccl_emulated";
  using device_type = cuda_emulated;
  struct unique_id {
    std::array<std::uint64_t, 2> value;
  };

 private:
  enum class kind { all_reduce, broadcast, all_gather };
  static const char* name_of(kind k) {
    constexpr const char* names[] = {"all_reduce", "broadcast", "all_gather"};
    return names[int(k)];
  }
  struct op {
    kind what;
    const void* in;
    void* out;
    std::size_t n;  // floats (bytes for a broadcast)
    int arg;        // the reduce op or the root
  };
  struct job {
    explicit job(int n) : size(n), posted(std::size_t(n)), ran(std::size_t(n), 0), joined(std::size_t(n), 0), gone(std::size_t(n), 0) {}
    const int size;
    std::mutex m;
    std::vector<std::deque<op>> posted;  // per rank: posted, not yet run
    std::vector<std::uint64_t> ran;      // per rank: collectives run
    std::vector<char> joined, gone;      // per rank: opened; aborted
    std::string failure;                 // latched for every rank
  };
  static std::mutex& table_mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<std::array<std::uint64_t, 2>, std::weak_ptr<job>>& table() {
    static std::map<std::array<std::uint64_t, 2>, std::weak_ptr<job>> t;
    return t;
  }

 public:
  struct comm {
    std::shared_ptr<job> j;
    int rank = -1;
  };
  struct event {
    std::shared_ptr<job> j;
    int rank = -1;
    std::uint64_t after = 0;  // happens once the rank has run this many collectives
  };

  static unique_id new_unique_id() {
    static std::atomic<std::uint64_t> counter{0};
    static const std::uint64_t salt = std::random_device{}();
    return {{salt, ++counter}};
  }
  static comm init(const unique_id& id, int size, int rank, const device_type&) {
    std::lock_guard lock(table_mutex());
    auto& t = table();
    std::erase_if(t, [](const auto& e) { return e.second.expired(); });
    std::shared_ptr<job> j = t[id.value].lock();
    if (!j) t[id.value] = j = std::make_shared<job>(size);
    std::lock_guard jl(j->m);
    if (size != j->size || rank < 0 || rank >= j->size) {
      j->failure = "nccl_emulated: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                   " joined a job of " + std::to_string(j->size);
      return {j, std::clamp(rank, 0, j->size - 1)};
    }
    if (j->joined[std::size_t(rank)]) j->failure = "nccl_emulated: rank " + std::to_string(rank) + " joined twice";
    j->joined[std::size_t(rank)] = 1;
    return {j, rank};
  }
  static std::vector<comm> init_group(const unique_id& id, std::span<const device_type> devices) {
    std::vector<comm> c;
    for (std::size_t i = 0; i < devices.size(); ++i) c.push_back(init(id, int(devices.size()), int(i), devices[i]));
    return c;
  }
  static nccl_state poll(comm& c, std::string& why) {
    if (!c.j) return why = "nccl_emulated: no communicator", nccl_state::failed;
    std::lock_guard lock(c.j->m);
    if (!c.j->failure.empty()) return why = c.j->failure, nccl_state::failed;
    if (c.j->gone[std::size_t(c.rank)]) return why = "nccl_emulated: the communicator was aborted", nccl_state::failed;
    for (char joined : c.j->joined)
      if (!joined) return nccl_state::in_progress;
    return nccl_state::ready;
  }

  static void all_reduce(comm& c, const float* in, float* out, std::size_t n, reduce_op o, const device_type& d) {
    post(c, {kind::all_reduce, in, out, n, int(o)}, d);
  }
  static void broadcast(comm& c, std::byte* data, std::size_t bytes, int root, const device_type& d) {
    post(c, {kind::broadcast, data, data, bytes, root}, d);
  }
  static void all_gather(comm& c, const float* in, float* out, std::size_t n, const device_type& d) {
    post(c, {kind::all_gather, in, out, n, 0}, d);
  }
  static void group_start() {}
  static void group_end() {}  // posting never waits, so one thread may post for every rank

  static event record(comm& c, const device_type& d) {
    d.synchronize();  // the emulated stream's own work has run when issued
    std::lock_guard lock(c.j->m);
    const std::size_t r = std::size_t(c.rank);
    return {c.j, c.rank, c.j->ran[r] + c.j->posted[r].size()};
  }
  static bool done(event& e) {
    if (!e.j) return true;
    std::lock_guard lock(e.j->m);
    return e.j->ran[std::size_t(e.rank)] >= e.after;
  }
  static void abort(comm& c) {
    if (!c.j) return;
    std::lock_guard lock(c.j->m);
    c.j->gone[std::size_t(c.rank)] = 1;
    c.j->posted[std::size_t(c.rank)].clear();
    c.j.reset();
  }

 private:
  static void post(comm& c, const op& o, const device_type& d) {
    d.synchronize();  // what the backend recorded before the collective runs first
    std::lock_guard lock(c.j->m);
    job& j = *c.j;
    if (j.gone[std::size_t(c.rank)]) throw comm_error("nccl_emulated: a collective on an aborted communicator");
    j.posted[std::size_t(c.rank)].push_back(o);
    run_ready(j);
  }
  /// Runs every collective all ranks have posted, oldest first (the caller holds the job's lock).
  static void run_ready(job& j) {
    while (j.failure.empty()) {
      for (const auto& q : j.posted)
        if (q.empty()) return;
      const op& first = j.posted[0].front();
      for (std::size_t r = 1; r < j.posted.size(); ++r) {
        const op& o = j.posted[r].front();
        if (o.what != first.what || o.n != first.n || o.arg != first.arg) {
          j.failure = "nccl_emulated: ranks posted different collectives: rank 0 " + std::string(name_of(first.what)) +
                      " of " + std::to_string(first.n) + " (arg " + std::to_string(first.arg) + "), rank " +
                      std::to_string(r) + " " + name_of(o.what) + " of " + std::to_string(o.n) + " (arg " +
                      std::to_string(o.arg) + ")";
          return;
        }
      }
      run(j, first);
      for (std::size_t r = 0; r < j.posted.size(); ++r) j.posted[r].pop_front(), ++j.ran[r];
    }
  }
  static void run(job& j, const op& first) {
    const std::size_t p = j.posted.size(), n = first.n;
    auto in = [&](std::size_t r) { return static_cast<const float*>(j.posted[r].front().in); };
    auto out = [&](std::size_t r) { return static_cast<float*>(j.posted[r].front().out); };
    switch (first.what) {
      case kind::all_reduce: {
        const auto o = reduce_op(first.arg);
        std::vector<float> acc(in(0), in(0) + n);
        for (std::size_t r = 1; r < p; ++r) dtrain::detail::reduce_into(acc.data(), in(r), n, o);
        if (o == reduce_op::mean)
          for (auto& v : acc) v *= 1.0f / float(p);
        for (std::size_t r = 0; r < p; ++r) std::copy(acc.begin(), acc.end(), out(r));
        break;
      }
      case kind::broadcast: {
        const auto* src = static_cast<const std::byte*>(j.posted[std::size_t(first.arg)].front().in);
        for (std::size_t r = 0; r < p; ++r)
          if (r != std::size_t(first.arg)) std::copy(src, src + n, static_cast<std::byte*>(j.posted[r].front().out));
        break;
      }
      case kind::all_gather: {
        std::vector<float> all;
        for (std::size_t r = 0; r < p; ++r) all.insert(all.end(), in(r), in(r) + n);
        for (std::size_t r = 0; r < p; ++r) std::copy(all.begin(), all.end(), out(r));
        break;
      }
    }
  }
};

static_assert(nccl_api<emulated_nccl_api>);

/// comm::nccl's code on the emulation: GPU workers as threads of one process on `cuda_emulated`.
using nccl_emulated = basic_nccl<emulated_nccl_api>;
static_assert(cluster_communicator<nccl_emulated> && device_communicator<nccl_emulated, cuda_emulated> &&
              compressing_communicator<nccl_emulated>);

}  // namespace dtrain::comm
