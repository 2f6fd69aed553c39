#pragma once
/// \file
/// `comm::mpi`: the communicator over MPI, so `multi_worker_mirrored_strategy<comm::mpi>` runs under
/// `mpirun` or `srun` on the transports the cluster's MPI is tuned for (shared memory, InfiniBand).
///
/// Membership comes from MPI itself (`resolve_cluster()`: MPI_COMM_WORLD's rank and size), not from
/// TF_CONFIG or addresses. MPI is initialized on first use (MPI_THREAD_SERIALIZED: one thread at a time
/// calls it) and finalized at exit, unless the program initialized it itself. Collectives run on a
/// duplicate of MPI_COMM_WORLD whose errors return instead of aborting, so an MPI error becomes a
/// `comm_error` naming the collective.
///
/// Contract differences from `ring_tcp`, all MPI's:
/// - Before each collective the ranks compare what they are about to do (kind, size, root) in one small
///   MPI_Allreduce, so a mismatch is a `comm_error` on every rank, not MPI's undefined behaviour;
///   `check_collectives = false` skips that round trip and trusts the callers, as MPI does.
/// - Every wait polls (MPI_Test), against `operation_timeout` where one is set (default none: there is
///   no heartbeat here): a hung or dead rank then makes the others throw `comm_error` (the training
///   programs then exit 138). MPI does not say which rank it was, and
///   under `mpirun` a rank that dies usually makes mpirun end the others first (with SIGTERM).
/// - `all_reduce_async` is MPI_Iallreduce: Open MPI advances it only inside MPI calls, so it overlaps
///   with the caller's work less than ring_tcp's communication thread does.
/// - Results are bitwise identical on all ranks when the MPI's reduction is (Open MPI's are; the tests
///   check it).
/// - In 16 bits (`compression`), the values travel as MPI_UINT16_T under a user-defined operation that
///   widens both operands, adds (or takes the max or min) in FP32 and rounds: each reduction step
///   rounds once, as ring_tcp's hops do; the result is widened (a mean divided and rounded again).

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "dtrain/core/trace.hpp"
#include "dtrain/distribute/cluster.hpp"
#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain::comm {

struct mpi_options {
  /// What the strategy resolved; checked against MPI's own rank and size.
  int rank = 0;
  int world_size = 1;
  std::uint64_t fingerprint = 0;
  std::chrono::milliseconds operation_timeout{0};  // zero: none (Open MPI ends the job when a rank dies)
  std::chrono::milliseconds connect_timeout{300'000};
  /// Compare every collective's kind, size and root across the ranks first (one small all-reduce).
  bool check_collectives = true;
};

namespace detail {
/// Set when a collective failed: MPI_Finalize waits for every rank, so after a failure (a rank may be
/// hung) the process exits without it, and mpirun ends the job.
inline std::atomic<bool> mpi_failed{false};

/// MPI_Init_thread on first use; MPI_Finalize at exit when dtrain initialized it and nothing failed.
inline void ensure_mpi() {
  struct session {
    bool ours = false;
    session() {
      int up = 0;
      MPI_Initialized(&up);
      if (up) return;
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        throw comm_error("comm::mpi: MPI_Init_thread failed");
      ours = true;
    }
    ~session() {
      int down = 0;
      MPI_Finalized(&down);
      if (ours && !down && !mpi_failed) MPI_Finalize();
    }
  };
  static session s;
}
}  // namespace detail

class mpi {
 public:
  using clock = std::chrono::steady_clock;

  /// This process's place in MPI_COMM_WORLD (initializing MPI): what `multi_worker_mirrored_strategy<mpi>`
  /// uses instead of TF_CONFIG or a launcher's variables. Rank 0 is the chief.
  static cluster_info resolve_cluster() {
    detail::ensure_mpi();
    cluster_info c;
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.world_size);
    c.task_id = c.rank;
    c.source = "MPI";
    return c;
  }

  /// Checks `cluster` (what `resolve_cluster` found) against MPI_COMM_WORLD with a strategy's timeouts.
  static mpi connect(const cluster_info& c, const communication_options& o) {
    return mpi({.rank = c.rank, .world_size = c.world_size, .fingerprint = c.fingerprint(),
                .operation_timeout = o.timeout, .connect_timeout = o.connect_timeout});
  }
  explicit mpi(mpi_options o = {}) : o_(std::move(o)) {
    detail::ensure_mpi();
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (o_.world_size != size || o_.rank != rank)
      throw config_error("comm::mpi: the cluster says rank " + std::to_string(o_.rank) + " of " +
                         std::to_string(o_.world_size) + " but MPI says rank " + std::to_string(rank) + " of " +
                         std::to_string(size) + " (let the strategy take the cluster from MPI: pass no cluster)");
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) throw comm_error("comm::mpi: MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    // every rank must run the same cluster: compare the fingerprints (as ring_tcp's handshake does)
    std::uint64_t fp[2] = {o_.fingerprint, ~o_.fingerprint};
    check(MPI_Allreduce(MPI_IN_PLACE, fp, 2, MPI_UINT64_T, MPI_MAX, comm_), "the rendezvous");
    if (fp[0] != o_.fingerprint || ~fp[1] != o_.fingerprint)
      fail("the ranks were started for different clusters (cluster fingerprints differ)");
  }
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  ~mpi() {
    int down = 0;
    MPI_Finalized(&down);
    if (down) return;
    for (MPI_Op& op : wire_ops_)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const { return o_.rank; }
  int size() const { return o_.world_size; }

  /// Completion of an MPI_Iallreduce (the mean is divided when it completes; 16-bit values widened).
  class handle {
   public:
    handle() = default;
    void wait() {
      if (!owner_) return;
      const trace::scope traced("comm", "all_reduce (wait)", std::int64_t(data_.size_bytes()));
      mpi* o = std::exchange(owner_, nullptr);
      o->complete(request_, "all_reduce");
      std::visit([&]<class W>(const W& wire) {
        if constexpr (!std::same_as<W, std::monostate>) widen(wire.data(), wire.size(), data_.data());
        if (op_ != reduce_op::mean) return;
        for (auto& v : data_) v /= float(o->size());
        if constexpr (!std::same_as<W, std::monostate>)
          round_through<typename W::value_type>(data_.data(), data_.size());
      }, wire_);
    }

   private:
    friend class mpi;
    using wire_values = std::variant<std::monostate, std::vector<bfloat16>, std::vector<float16>>;
    handle(mpi* owner, MPI_Request r, std::span<float> data, reduce_op op, wire_values wire = {})
        : owner_(owner), request_(r), data_(data), op_(op), wire_(std::move(wire)) {}
    mpi* owner_ = nullptr;
    MPI_Request request_ = MPI_REQUEST_NULL;
    std::span<float> data_;
    reduce_op op_ = reduce_op::sum;
    wire_values wire_;  // in 16 bits: what MPI reduces (moving the vector keeps its buffer)
  };

  /// All-reduce, in 16 bits on the wire with `c` bf16 or fp16 (communicator.hpp's contract).
  handle all_reduce_async(std::span<float> data, reduce_op op, compression c = compression::none) {
    if (data.size() > std::size_t(INT_MAX)) {  // beyond one MPI count: blocking pieces
      for (std::size_t at = 0; at < data.size(); at += std::size_t(INT_MAX))
        all_reduce_async(data.subspan(at, std::min(data.size() - at, std::size_t(INT_MAX))), op, c).wait();
      return {};
    }
    agree(kind::all_reduce, data.size(), int(op) + 8 * int(c));
    MPI_Request r = MPI_REQUEST_NULL;
    if (c == compression::none || size() == 1) {
      check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), int(data.size()), MPI_FLOAT, mpi_op(op), comm_, &r), "all_reduce");
      return handle(this, r, data, op);
    }
    return dtrain::detail::with_wire_type(c, [&]<half_float T>(T) {
      std::vector<T> wire(data.size());
      round_to(data.data(), data.size(), wire.data());
      check(MPI_Iallreduce(MPI_IN_PLACE, wire.data(), int(wire.size()), MPI_UINT16_T, wire_op<T>(op), comm_, &r),
            "all_reduce");
      return handle(this, r, data, op, std::move(wire));
    });
  }
  void all_reduce(std::span<float> data, reduce_op op, compression c = compression::none) {
    const trace::scope traced("comm", "all_reduce", std::int64_t(data.size_bytes()));
    all_reduce_async(data, op, c).wait();
  }
  void broadcast(std::span<std::byte> data, int root) {
    check_root(root);
    const trace::scope traced("comm", "broadcast", std::int64_t(data.size()));
    agree(kind::broadcast, data.size(), root);
    for (std::size_t at = 0; at < data.size(); at += std::size_t(INT_MAX)) {
      const auto piece = data.subspan(at, std::min(data.size() - at, std::size_t(INT_MAX)));
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Ibcast(piece.data(), int(piece.size()), MPI_BYTE, root, comm_, &r), "broadcast");
      complete(r, "broadcast");
    }
  }
  void broadcast(std::span<float> data, int root) { broadcast(std::as_writable_bytes(data), root); }
  void all_gather(std::span<const float> in, std::span<float> out) {
    if (out.size() != in.size() * std::size_t(size()))
      throw value_error("all_gather: output holds " + std::to_string(out.size()) + " floats, need size() * " +
                        std::to_string(in.size()));
    if (in.size() > std::size_t(INT_MAX) / std::size_t(size()))
      throw value_error("all_gather: " + std::to_string(in.size()) + " floats per rank is more than one MPI call moves");
    const trace::scope traced("comm", "all_gather", std::int64_t(out.size_bytes()));
    agree(kind::all_gather, in.size(), 0);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallgather(in.data(), int(in.size()), MPI_FLOAT, out.data(), int(in.size()), MPI_FLOAT, comm_, &r),
          "all_gather");
    complete(r, "all_gather");
  }
  void barrier() {
    const trace::scope traced("comm", "barrier");
    agree(kind::barrier, 0, 0);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &r), "barrier");
    complete(r, "barrier");
  }

 private:
  enum class kind : std::int64_t { all_reduce = 1, broadcast, all_gather, barrier };
  static const char* name(kind k) {
    switch (k) {
      case kind::all_reduce: return "all_reduce";
      case kind::broadcast: return "broadcast";
      case kind::all_gather: return "all_gather";
      default: return "barrier";
    }
  }

  static MPI_Op mpi_op(reduce_op op) {
    return op == reduce_op::max ? MPI_MAX : op == reduce_op::min ? MPI_MIN : MPI_SUM;
  }
  /// The user-defined operation that reduces T values (as MPI_UINT16_T) with `op` in FP32, made on
  /// first use: inout[i] = T(float(in[i]) op float(inout[i])).
  template <half_float T>
  MPI_Op wire_op(reduce_op op) {
    const int which = 3 * int(std::same_as<T, float16>) + (op == reduce_op::max ? 1 : op == reduce_op::min ? 2 : 0);
    MPI_Op& made = wire_ops_[std::size_t(which)];
    if (made != MPI_OP_NULL) return made;
    MPI_User_function* f = nullptr;
    if (op == reduce_op::max) f = &combine<T, reduce_op::max>;
    else if (op == reduce_op::min) f = &combine<T, reduce_op::min>;
    else f = &combine<T, reduce_op::sum>;
    check(MPI_Op_create(f, 1, &made), "MPI_Op_create");
    return made;
  }
  template <half_float T, reduce_op Op>
  static void combine(void* in, void* inout, int* len, MPI_Datatype*) {
    const auto* a = static_cast<const T*>(in);
    auto* b = static_cast<T*>(inout);
    for (int i = 0; i < *len; ++i) {
      const float x = float(a[i]), y = float(b[i]);
      b[i] = T::from(Op == reduce_op::max ? std::max(x, y) : Op == reduce_op::min ? std::min(x, y) : x + y);
    }
  }
  void check_root(int root) const {
    if (root < 0 || root >= size())
      throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of " + std::to_string(size()));
  }

  /// The first failure latches: later calls rethrow it.
  [[noreturn]] void fail(const std::string& what) {
    failure_ = "comm::mpi (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + "): " + what;
    detail::mpi_failed = true;
    throw comm_error(failure_);
  }
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int n = 0;
    MPI_Error_string(rc, text, &n);
    fail(std::string(what) + " failed: " + std::string(text, std::size_t(n)));
  }
  /// Waits for `r` until the operation deadline, polling so that a hung rank cannot block forever.
  void complete(MPI_Request& r, const char* what) {
    const auto deadline = dtrain::detail::deadline_after(o_.operation_timeout);
    for (int spins = 0;; ++spins) {
      int done = 0;
      check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (clock::now() > deadline)
        fail(std::string(what) + " did not complete within " + std::to_string(o_.operation_timeout.count()) +
             " ms: a rank is dead or hung (MPI does not say which)");
      if (spins > 1000) std::this_thread::yield();
    }
  }
  /// Every rank states the collective it is about to run; a difference is a comm_error on all of them.
  void agree(kind k, std::size_t count, int arg) {
    if (!failure_.empty()) throw comm_error(failure_);
    if (!o_.check_collectives || size() == 1) return;
    const auto kind_id = std::int64_t(k), n = std::int64_t(count);
    std::int64_t v[6] = {kind_id, n, arg, -kind_id, -n, -arg};  // max and -min in one MPI_MAX
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, v, 6, MPI_INT64_T, MPI_MAX, comm_, &r), name(k));
    complete(r, name(k));
    if (v[0] != -v[3] || v[1] != -v[4] || v[2] != -v[5]) {
      const auto range = [&](int i, const char* what) {
        return std::string(what) + " " + std::to_string(-v[i + 3]) + (v[i] != -v[i + 3] ? ".." + std::to_string(v[i]) : "");
      };
      fail(std::string("the ranks disagree on the collective: this rank runs ") + name(k) + " of " + std::to_string(count) +
           " elements (op/root " + std::to_string(arg) + "); across the ranks: " + range(0, "kind") + ", " +
           range(1, "elements") + ", " + range(2, "op/root"));
    }
  }

  mpi_options o_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::array<MPI_Op, 6> wire_ops_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::string failure_;
};

static_assert(cluster_communicator<mpi> && compressing_communicator<mpi>);

}  // namespace dtrain::comm
