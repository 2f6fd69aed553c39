#pragma once
/// \file
/// `basic_nccl<Api>`: the communicator of GPU workers, written once over the NCCL seam (`nccl_api`,
/// below). `comm::nccl` (nccl.hpp) runs it on NVIDIA's NCCL; `comm::nccl_emulated` (nccl_emulated.hpp)
/// on an emulation among the threads of one process on `cuda_emulated` devices, so that every machine
/// runs everything here but the NCCL calls themselves.
///
/// Two planes, as TF's MultiWorkerMirroredStrategy has them. The TCP ring (ring_tcp: rendezvous, job
/// token, TLS) connects the workers, hands NCCL's unique id out from rank 0, carries the training
/// loop's small host-memory collectives (metric states, flags, the chief's weights) and, after a
/// failure, names the worker that failed. The model's gradients, in device memory, go over NCCL on the
/// model's stream (`implementation` nccl or auto, TF's AUTO picking NCCL for GPU workers); with
/// `implementation` ring they take the TCP ring through pinned host memory instead.
///
/// No hangs: NCCL's communicators are non-blocking, and every device collective is waited for on the
/// host, polling NCCL's asynchronous error and the TCP ring's heartbeats (a worker that died or stopped
/// is named within the heartbeat timeout), and within the operation timeout where one is set. On an
/// error, a silent worker or a timeout NCCL is aborted (ncclCommAbort), the TCP ring is asked who
/// failed, and a `comm_error` naming it latches: every later call rethrows it (the examples then exit
/// with 138, retryable).
///
/// `make_local_group(devices)` opens one communicator per device of this process, for
/// `mirrored_strategy<Comm, B>`: its replica threads meet, and one of them issues the replicas'
/// collectives as one NCCL group.

#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/trace.hpp"
#include "dtrain/distribute/comm/ring_tcp.hpp"
#include "dtrain/distribute/comm/threads.hpp"

namespace dtrain::comm {

/// Where an NCCL communicator or its last call stands.
enum class nccl_state { ready, in_progress, failed };

/// The NCCL seam: what `basic_nccl` needs of NCCL, as static functions of `A`. Contract:
/// - `A::device_type`: the backend whose memory and stream the collectives use (`cuda`,
///   `cuda_emulated`); its pointers expose the device address (`.get()`).
/// - `A::new_unique_id()`: a new job's id (rank 0 makes it, the others receive its bytes).
///   `A::init(id, size, rank, device)` starts opening rank `rank`'s communicator of a job of `size`;
///   `A::init_group(id, devices)` opens ranks 0..n-1 of a job of n on `devices`, from one thread.
/// - `A::all_reduce(c, in, out, n, op, device)` (floats), `A::broadcast(c, bytes, n, root, device)`,
///   `A::all_gather(c, in, out, n, device)` (n floats from each rank): put the collective on the
///   device's stream after the work the backend recorded; they may return before it is fully placed.
///   Between `A::group_start()` and `A::group_end()` calls on several communicators form one operation.
///   A call that fails at once throws `comm_error`.
/// - `A::poll(c, why)`: ready once the communicator is open and its last call placed; in_progress;
///   failed (an asynchronous error: `why` says which).
/// - `A::record(c, device)`: an event after everything on the device's stream so far (c's collectives too); `A::done(e)` whether
///   it has happened (a failure of that work throws `device_error`).
/// - `A::abort(c)` frees the communicator at once, whatever its peers do (ncclCommAbort). basic_nccl
///   waits for every collective before it goes on, so nothing is in flight when a communicator is freed:
///   it is always freed this way, which never waits for a peer that is gone.
template <class A>
concept nccl_api =
    requires(typename A::comm& c, const typename A::unique_id& id, const typename A::device_type& d,
             std::span<const typename A::device_type> ds, const float* in, float* out, std::byte* bytes,
             std::size_t n, int i, typename A::event& e, std::string& why) {
      { A::name } -> std::convertible_to<const char*>;
      requires backend<typename A::device_type>;
      requires std::is_trivially_copyable_v<typename A::unique_id>;
      requires std::default_initializable<typename A::comm> && std::movable<typename A::comm>;
      requires std::default_initializable<typename A::event> && std::movable<typename A::event>;
      { A::new_unique_id() } -> std::same_as<typename A::unique_id>;
      { A::init(id, i, i, d) } -> std::same_as<typename A::comm>;
      { A::init_group(id, ds) } -> std::same_as<std::vector<typename A::comm>>;
      { A::poll(c, why) } -> std::same_as<nccl_state>;
      A::all_reduce(c, in, out, n, reduce_op::sum, d);
      A::broadcast(c, bytes, n, i, d);
      A::all_gather(c, in, out, n, d);
      A::group_start();
      A::group_end();
      { A::record(c, d) } -> std::same_as<typename A::event>;
      { A::done(e) } -> std::convertible_to<bool>;
      A::abort(c);
    };

namespace detail {
/// Waits on the host for `ready()` until `deadline`, polling: a few microseconds first (a collective of
/// a step often completes within them), backing off to a millisecond.
template <class Ready>
bool poll_until(Ready&& ready, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::microseconds(2);
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}
}  // namespace detail

template <nccl_api Api>
class basic_nccl {
 public:
  using device_type = typename Api::device_type;
  using span_type = device_span<float, device_type>;
  using clock = std::chrono::steady_clock;

  /// Joins `cluster` on `device` (the strategy's: the model's GPU and stream) with a strategy's options.
  static basic_nccl connect(const cluster_info& c, const communication_options& o, device_type device = {}) {
    return basic_nccl(ring_tcp::options_for(c, o), std::move(device), o);
  }
  /// Connects the TCP ring (`ring`), then, unless `o.implementation` is ring, opens NCCL on `device`,
  /// rank 0 handing its unique id out over the ring; all within the connect timeout.
  basic_nccl(ring_tcp_options ring, device_type device, const communication_options& o)
      : ring_(std::move(ring)), device_(std::move(device)), timeout_(o.timeout),
        nccl_(o.implementation != communication_options::implementation_type::ring) {
    if (!nccl_) return;
    typename Api::unique_id id{};
    if (rank() == 0) id = Api::new_unique_id();
    ring_.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
    comm_ = Api::init(id, size(), rank(), device_);
    open_ = true;
    settle("opening the NCCL communicator", o.connect_timeout);
  }
  basic_nccl(const basic_nccl&) = delete;
  basic_nccl& operator=(const basic_nccl&) = delete;
  ~basic_nccl() {
    if (open_) Api::abort(comm_);
  }

  int rank() const { return ring_.rank(); }
  int size() const { return ring_.size(); }
  /// Whether device memory goes over NCCL (implementation nccl or auto), else over the TCP ring.
  bool device_data_plane() const { return nccl_; }
  /// The device (and stream) the collectives are placed on.
  const device_type& device() const { return device_; }

  // ---- host memory: over the TCP ring (in 16 bits where asked, as ring_tcp) --------------------------------
  void all_reduce(std::span<float> data, reduce_op op, compression c = compression::none) {
    rethrow(), ring_.all_reduce(data, op, c);
  }
  auto all_reduce_async(std::span<float> data, reduce_op op, compression c = compression::none) {
    return rethrow(), ring_.all_reduce_async(data, op, c);
  }
  void broadcast(std::span<float> data, int root) { rethrow(), ring_.broadcast(data, root); }
  void broadcast(std::span<std::byte> data, int root) { rethrow(), ring_.broadcast(data, root); }
  void all_gather(std::span<const float> in, std::span<float> out) { rethrow(), ring_.all_gather(in, out); }
  void barrier() { rethrow(), ring_.barrier(); }

  // ---- device memory: over NCCL, on the device's stream ------------------------------------------------------
  /// A device collective's completion: `wait()` returns once it has happened on the device (within the
  /// timeout; else the communicator fails). The data must stay alive until then.
  class handle {
   public:
    handle() = default;
    handle(basic_nccl* c, typename Api::event e, std::uint64_t seq, const char* what)
        : c_(c), e_(std::move(e)), seq_(seq), what_(what) {}
    void wait() {
      if (c_) std::exchange(c_, nullptr)->await(e_, seq_, what_);
    }

   private:
    basic_nccl* c_ = nullptr;
    typename Api::event e_{};
    std::uint64_t seq_ = 0;
    const char* what_ = "";
  };

  handle all_reduce_async(span_type data, reduce_op op) {
    return start("all_reduce", data.size() * sizeof(float), [&] { Api::all_reduce(comm_, data.data().get(), data.data().get(), data.size(), op, device_); });
  }
  void all_reduce(span_type data, reduce_op op) { all_reduce_async(data, op).wait(); }
  void broadcast(span_type data, int root) {
    check_root(root);
    start("broadcast", data.size() * sizeof(float), [&] {
      Api::broadcast(comm_, reinterpret_cast<std::byte*>(data.data().get()), data.size() * sizeof(float), root, device_);
    }).wait();
  }
  void all_gather(device_span<const float, device_type> in, span_type out) {
    if (out.size() != in.size() * std::size_t(size()))
      throw value_error("all_gather: output holds " + std::to_string(out.size()) + " floats, need size() * " +
                        std::to_string(in.size()));
    start("all_gather", out.size() * sizeof(float), [&] { Api::all_gather(comm_, in.data().get(), out.data().get(), in.size(), device_); }).wait();
  }

  // ---- the replicas of one process (mirrored_strategy) ------------------------------------------------------
  class local_rank;
  /// One communicator per device, ranks in device order, each to be used by one replica thread; a
  /// replica that waits longer than `timeout` for the others, or for NCCL, fails the group.
  static std::vector<local_rank> make_local_group(const std::vector<device_type>& devices,
                                                  std::chrono::milliseconds timeout);

 private:
  static void check_root(int root, int n) {
    if (root < 0 || root >= n)
      throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(n));
  }
  void check_root(int root) const { check_root(root, size()); }
  /// Waits until `c` has placed its last call (or opened), until `deadline`: "" once it has, else what
  /// went wrong (`limit`: the wait, for the message).
  static std::string settled(typename Api::comm& c, clock::time_point deadline, std::chrono::milliseconds limit) {
    std::string why;
    nccl_state s = nccl_state::in_progress;
    if (!detail::poll_until([&] { return (s = Api::poll(c, why)) != nccl_state::in_progress; }, deadline))
      return "did not get under way within " + std::to_string(limit.count()) + " ms";
    return s == nccl_state::failed ? "failed: NCCL reported: " + why : std::string();
  }
  /// Waits until a local communicator has placed its last call (or opened); else throws.
  static void settle_local(typename Api::comm& c, std::size_t replica, const char* what, clock::time_point deadline,
                           std::chrono::milliseconds limit) {
    if (std::string e = settled(c, deadline, limit); !e.empty())
      throw comm_error("comm::nccl: replica " + std::to_string(replica) + "'s " + what + " " + e);
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }
  std::string who() const { return "comm::nccl (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")"; }

  /// Puts a device collective (of `bytes`) on the stream and returns its handle; the trace shows the
  /// issue here and the wait for it in `await`.
  template <class Issue>
  handle start(const char* what, std::size_t bytes, Issue&& issue) {
    const trace::scope traced("comm", what, std::int64_t(bytes));
    rethrow();
    if (!nccl_)
      throw usage_error(who() + ": " + what + " of device memory, but this communicator's implementation is ring "
                        "(device memory goes through host memory to the TCP ring)");
    ++seq_;
    try {
      issue();
    } catch (const error& e) {
      fail(what, e.what());
    }
    settle(what, timeout_);
    return handle(this, Api::record(comm_, device_), seq_, what);
  }
  /// Waits until NCCL has placed the last call (or opened the communicator), at most `limit`.
  void settle(const char* what, std::chrono::milliseconds limit) {
    if (std::string e = settled(comm_, dtrain::detail::deadline_after(limit), limit); !e.empty()) fail(what, e);
  }
  void await(typename Api::event& e, std::uint64_t seq, const char* what) {
    const trace::scope traced("comm", trace::active() ? std::string(what) + " (wait)" : std::string());
    rethrow();
    std::string why;
    nccl_state s = nccl_state::ready;
    bool happened = false, finished = false;
    std::optional<detail::heartbeat::verdict> dead;  // a worker that stopped beating: NCCL may wait for it forever
    try {
      finished = detail::poll_until(
          [&] {
            return (s = Api::poll(comm_, why)) == nccl_state::failed || (happened = Api::done(e)) ||
                   (dead = ring_.peer_failure()).has_value();
          },
          dtrain::detail::deadline_after(timeout_));
    } catch (const error& x) {  // the device's work before the collective failed
      fail(what, x.what());
    }
    if (!finished)
      fail(what, "did not complete within " + std::to_string(timeout_.count()) + " ms (collective " + std::to_string(seq) + ")");
    if (s == nccl_state::failed && !happened) fail(what, "failed: NCCL reported: " + why);
    if (dead && !happened)
      fail(what, "did not complete (collective " + std::to_string(seq) + "): rank " + std::to_string(dead->rank) + " (" +
                     ring_.address_of(dead->rank) + ") " + dead->why);
  }
  /// Aborts NCCL, asks the TCP ring who failed, latches the error and throws it.
  [[noreturn]] void fail(const char* what, const std::string& detail) {
    if (open_) Api::abort(comm_), open_ = false;
    std::string diagnosis;
    try {
      const std::chrono::milliseconds ask = std::chrono::seconds(5);
      ring_.set_operation_timeout(timeout_.count() > 0 ? std::min(timeout_, ask) : ask);
      ring_.barrier();
      diagnosis = "; every worker still answers on the TCP ring (NCCL itself failed)";
    } catch (const std::exception& e) {
      diagnosis = "; the TCP ring: " + std::string(e.what());
    }
    error_ = std::make_exception_ptr(comm_error(who() + ": " + what + " " + detail + diagnosis));
    std::rethrow_exception(error_);
  }

  ring_tcp ring_;
  device_type device_;
  std::chrono::milliseconds timeout_;
  bool nccl_;
  typename Api::comm comm_{};
  bool open_ = false;
  std::uint64_t seq_ = 0;
  std::exception_ptr error_;
};

/// One replica's communicator of a process's group (`make_local_group`). The replicas of a device
/// collective meet in host memory (a `comm::threads` group); then the first issues all of them as one
/// NCCL group, and each waits for its own. `abort(why)` fails the group (a replica's step threw).
template <nccl_api Api>
class basic_nccl<Api>::local_rank {
 public:
  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }

  void all_reduce(span_type data, reduce_op op) {
    collective("all_reduce", data.data().get(), data.size(), int(op), [op](auto& c, float* p, std::size_t n, const device_type& d) {
      Api::all_reduce(c, p, p, n, op, d);
    });
  }
  void broadcast(span_type data, int root) {
    check_root(root, size());
    collective("broadcast", data.data().get(), data.size(), root, [root](auto& c, float* p, std::size_t n, const device_type& d) {
      Api::broadcast(c, reinterpret_cast<std::byte*>(p), n * sizeof(float), root, d);
    });
  }
  void abort(const std::string& why) { host_.abort(why); }

 private:
  friend class basic_nccl;
  struct group {
    std::vector<device_type> devices;
    std::vector<typename Api::comm> comms;
    std::chrono::milliseconds timeout;
    std::vector<float*> buffers;                        // each replica's data in the current collective
    std::vector<std::pair<std::size_t, int>> shapes;    // and its size and argument
    std::vector<typename Api::event> events;
    bool failed = false;
    ~group() {
      for (auto& c : comms) Api::abort(c);
    }
  };
  local_rank(std::shared_ptr<group> g, threads host) : g_(std::move(g)), host_(std::move(host)) {}

  template <class Issue>
  void collective(const char* what, float* data, std::size_t count, int arg, Issue&& issue) {
    const trace::scope traced("comm", what, std::int64_t(count * sizeof(float)));
    group& g = *g_;
    const auto me = std::size_t(rank());
    g.devices[me].enqueue([](auto&) {});  // this replica's recorded work goes on its stream first
    g.buffers[me] = data, g.shapes[me] = {count, arg};
    host_.barrier();  // every replica has published its buffer
    if (me == 0) {    // one thread issues the group for every device
      try {
        issue_group(what, count, arg, issue);
      } catch (const std::exception& e) {
        g.failed = true;
        host_.abort(e.what());
      }
    }
    host_.barrier();  // issued (or failed: then this throws)
    bool done = false;
    try {
      done = detail::poll_until([&] { return bool(Api::done(g.events[me])); }, dtrain::detail::deadline_after(g.timeout));
    } catch (const std::exception& e) {
      fail(std::string("comm::nccl: replica ") + std::to_string(me) + "'s " + what + ": " + e.what());
    }
    if (!done)
      fail("comm::nccl: replica " + std::to_string(me) + "'s " + what + " did not complete within " +
           std::to_string(g.timeout.count()) + " ms");
    host_.barrier();  // no replica reuses the events before all have waited
  }
  template <class Issue>
  void issue_group(const char* what, std::size_t count, int arg, Issue& issue) {
    group& g = *g_;
    for (std::size_t i = 1; i < g.shapes.size(); ++i)
      if (g.shapes[i] != g.shapes[0])
        throw comm_error("comm::nccl: replicas called different collectives: replica 0 " + std::string(what) + " of " +
                         std::to_string(count) + " (arg " + std::to_string(arg) + "), replica " + std::to_string(i) +
                         " of " + std::to_string(g.shapes[i].first) + " (arg " + std::to_string(g.shapes[i].second) + ")");
    Api::group_start();
    try {
      for (std::size_t i = 0; i < g.devices.size(); ++i) issue(g.comms[i], g.buffers[i], count, g.devices[i]);
    } catch (...) {
      Api::group_end();
      throw;
    }
    Api::group_end();
    const auto deadline = dtrain::detail::deadline_after(g.timeout);
    for (std::size_t i = 0; i < g.devices.size(); ++i) {
      settle_local(g.comms[i], i, what, deadline, g.timeout);
      g.events[i] = Api::record(g.comms[i], g.devices[i]);
    }
  }
  [[noreturn]] void fail(const std::string& why) {
    g_->failed = true;
    host_.abort(why);
    throw comm_error(why);
  }

  std::shared_ptr<group> g_;
  threads host_;
};

template <nccl_api Api>
auto basic_nccl<Api>::make_local_group(const std::vector<device_type>& devices, std::chrono::milliseconds timeout)
    -> std::vector<local_rank> {
  if (devices.empty()) throw value_error("comm::nccl: a local group needs at least one device");
  auto g = std::make_shared<typename local_rank::group>();
  g->devices = devices, g->timeout = timeout;
  g->buffers.resize(devices.size()), g->shapes.resize(devices.size()), g->events.resize(devices.size());
  g->comms = Api::init_group(Api::new_unique_id(), std::span<const device_type>(g->devices));
  try {
    const auto deadline = dtrain::detail::deadline_after(timeout);
    for (std::size_t i = 0; i < g->comms.size(); ++i) settle_local(g->comms[i], i, "communicator", deadline, timeout);
  } catch (...) {
    g->failed = true;
    throw;
  }
  auto host = threads::make_group(int(devices.size()), timeout);
  std::vector<local_rank> ranks;
  for (std::size_t r = 0; r < devices.size(); ++r) ranks.push_back(local_rank(g, std::move(host[r])));
  return ranks;
}

}  // namespace dtrain::comm
