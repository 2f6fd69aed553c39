#pragma once
/// \file
/// `ring_tcp`: the communicator of multi-worker training over TCP (standalone Asio), in three parts as
/// Gloo has them: the rendezvous that connects the ring (rendezvous.hpp, with the job token's handshake
/// and TLS), the engine that moves a collective's frames around it (ring_engine.hpp, over the wire
/// format of wire.hpp), and here the algorithms and the queue that orders them.
///
/// All-reduce is reduce-scatter then all-gather around the ring (segments split as evenly as possible:
/// the first n % p are one element longer, empty ones allowed), each step sending and receiving at once
/// in chunks of `chunk_bytes` (1 MiB by default: on loopback it beat 4 MiB, since a smaller chunk is
/// reduced while the next one arrives), reducing each chunk as it lands. One of at most `small_bytes`
/// (16 KiB) is all-gathered instead, both ways round the ring at once, and reduced by every rank in rank
/// order: ceil((p - 1) / 2) latency steps instead of 2 (p - 1), where latency is all a small one pays for.
/// Up to 512 KiB (`both_ways_bytes`), with 3 or more ranks, the reduce-scatter and the all-gather each run
/// both ways round the ring: 2 ceil((p - 1) / 2) steps. When every rank is on this host, all-reduce
/// goes through shared memory instead (shm.hpp; the rest stays on TCP). Asynchronous collectives run in
/// order on one communication thread, so `all_reduce_async` overlaps with the caller's work (the model's
/// backward pass); a blocking one with nothing queued runs on the caller's thread, saving two thread
/// hand-offs.
///
/// In 16 bits (`compression`: bf16 or fp16), all-reduce sends the wire type: the reduce-scatter sends
/// each partial sum rounded, and the receiver widens it and adds in FP32, then rounds the new partial sum
/// for the next hop as the frame lands; the segment's owner rounds the full sum, keeps the rounded value
/// and all-gathers it, widened into place as it lands. A small one all-gathers every rank's rounded
/// values and reduces them in rank order in FP32, rounding the result. (The both-ways reduce-scatter is
/// not used: latency is what it saves, and 16 bits save bytes.)
///
/// Waits: a collective waits as long as the ring's neighbours send heartbeats (a neighbour silent for
/// `heartbeat_timeout`, default 10 s, has failed; heartbeat.hpp), so a slow worker is waited for and a
/// dead or stopped one is named within seconds; `operation_timeout` (default none) also bounds how long
/// nothing may move. The rendezvous has `connect_timeout` (default 300 s). The first error latches: it
/// names the peer (rank, address), fails the pending operations and is rethrown by every later call.

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "dtrain/core/environment.hpp"
#include "dtrain/core/trace.hpp"
#include "dtrain/distribute/comm/ring_engine.hpp"
#include "dtrain/distribute/comm/shm.hpp"

namespace dtrain::comm {

class ring_tcp {
 public:
  using clock = std::chrono::steady_clock;

  /// Joins `cluster` (its ring's addresses, or rank 0's) with a strategy's options.
  static ring_tcp connect(const cluster_info& c, const communication_options& o) { return ring_tcp(options_for(c, o)); }
  /// A rank's options for joining `cluster` with a strategy's options.
  static ring_tcp_options options_for(const cluster_info& c, const communication_options& o) {
    return {.rank = c.rank, .world_size = c.world_size, .addresses = c.addresses(), .fingerprint = c.fingerprint(),
            .operation_timeout = o.timeout, .connect_timeout = o.connect_timeout, .heartbeat_timeout = o.heartbeat_timeout,
            .chunk_bytes = o.chunk_bytes,
            .job_token = o.job_token, .require_job_token = o.require_job_token, .tls = o.tls,
            .shared_memory = o.shared_memory};
  }
  /// Connects the ring (blocks until every rank is there, or the connect deadline passes).
  explicit ring_tcp(ring_tcp_options o) : o_(normalized(std::move(o))), rv_(o_), engine_(rv_, o_) {
    if (size() > 1) {
      shm_ = shm_transport::join(
          rv_, o_, [this](std::span<std::byte> b) { ring_broadcast(b, 0); },
          [this](std::span<float> f) { ring_all_reduce(f, reduce_op::min); });
      if (shm_ && rank() == 0) o_.log("all " + std::to_string(size()) + " ranks are on this host: all-reduce through shared memory");
      worker_ = std::thread([this] { serve(); });
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
  }

  int rank() const { return o_.rank; }
  int size() const { return o_.world_size; }
  /// The deadline of the collectives started from now on, while none runs (comm::nccl shortens it to
  /// ask who failed).
  void set_operation_timeout(std::chrono::milliseconds t) { o_.operation_timeout = t; }
  /// A ring neighbour whose heartbeat has stopped (heartbeat.hpp), or nullopt.
  std::optional<detail::heartbeat::verdict> peer_failure() const { return rv_.peer_failure(); }
  /// "host:port" of a rank (after the rendezvous, for every rank).
  const std::string& address_of(int r) const { return rv_.address_of(r); }
  /// How all-reduce moves data: "shared memory" when every rank is on this host (shm.hpp), else "tcp".
  std::string transport() const { return shm_ ? "shared memory" : "tcp"; }

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

  /// All-reduce, in 16 bits on the wire with `c` bf16 or fp16 (communicator.hpp's contract).
  handle all_reduce_async(std::span<float> data, reduce_op op, compression c = compression::none) {
    return submit([this, data, op, c] { traced_all_reduce(data, op, c); });
  }
  void all_reduce(std::span<float> data, reduce_op op, compression c = compression::none) {
    run_now([this, data, op, c] { traced_all_reduce(data, op, c); });
  }
  void broadcast(std::span<std::byte> data, int root) {
    check_root(root);
    run_now([this, data, root] {
      const trace::scope traced("comm", "broadcast", std::int64_t(data.size()));
      ring_broadcast(data, root);
    });
  }
  void broadcast(std::span<float> data, int root) { broadcast(std::as_writable_bytes(data), root); }
  void all_gather(std::span<const float> in, std::span<float> out) {
    if (out.size() != in.size() * std::size_t(size()))
      throw value_error("all_gather: output holds " + std::to_string(out.size()) + " floats, need size() * " +
                        std::to_string(in.size()));
    run_now([this, in, out] {
      const trace::scope traced("comm", "all_gather", std::int64_t(out.size_bytes()));
      ring_all_gather(in, out);
    });
  }
  void barrier() {
    float token = 0.0f;
    all_reduce(std::span<float>(&token, 1), reduce_op::sum);
  }

 private:
  // ---- operation queue ----------------------------------------------------------------------------------

  void traced_all_reduce(std::span<float> data, reduce_op op, compression c) {
    const trace::scope traced("comm", "all_reduce", std::int64_t(data.size_bytes()));
    if (c == compression::none) return ring_all_reduce(data, op);
    if (size() == 1) return;  // nothing to send, nothing to round
    dtrain::detail::with_wire_type(c, [&]<half_float T>(T) {
      if (shm_) shm_->all_reduce<T>(data, op);
      else if (data.size() * sizeof(T) <= o_.small_bytes) gather_and_reduce<T>(data, op);
      else compressed_all_reduce<T>(data, op);
    });
  }

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
      rv_.close();
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
    auto task = std::make_shared<std::packaged_task<void()>>([this, job = std::move(job), t = trace::current_trace()] {
      const trace::adopt traced(t);  // the submitting thread's trace, if it has one
      execute(job);
    });
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
    trace::name_thread("ring_tcp");
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

  // ---- collectives --------------------------------------------------------------------------------------

  void check_root(int root) const {
    if (root < 0 || root >= size())
      throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(size()));
  }

  /// The ring's split of n elements into p segments, the first n % p one element longer: seg(i) is
  /// segment i mod p's (offset, count).
  auto segments(std::size_t n) {
    const std::size_t p = std::size_t(size());
    std::vector<std::size_t>& off = offsets_;
    off.assign(p + 1, 0);
    for (std::size_t i = 0; i < p; ++i) off[i + 1] = off[i] + n / p + (i < n % p ? 1 : 0);
    return [&off, p](std::size_t i) { return std::pair{off[i % p], off[i % p + 1] - off[i % p]}; };
  }

  void ring_all_reduce(std::span<float> data, reduce_op op) {
    if (shm_) return shm_->all_reduce(data, op);
    if (data.size_bytes() <= o_.small_bytes) return gather_and_reduce(data, op);
    if (size() > 2 && data.size_bytes() <= both_ways_bytes) return both_ways_all_reduce(data, op);
    engine_.begin_collective();
    const std::size_t p = std::size_t(size()), n = data.size(), r = std::size_t(rank());
    const auto seg = segments(n);
    float* d = data.data();
    auto bytes = [&](std::size_t at) { return reinterpret_cast<std::byte*>(d + at); };
    std::vector<ring_engine::ring_step>& steps = steps_;
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
    engine_.run_steps(steps, [&](std::size_t s, std::size_t at, const std::byte* src, std::size_t nb) {
      if (s + 1 >= p) return;  // all-gather: the frame landed in place
      float* dst = d + seg(r + p - s - 1).first + at / 4;
      dtrain::detail::reduce_into(dst, reinterpret_cast<const float*>(src), nb / 4, op);
      if (op == reduce_op::mean && s + 2 == p)  // the owned segment is complete: divide it once, so every rank gets the same bits
        for (std::size_t i = 0; i < nb / 4; ++i) dst[i] *= inv;
    });
  }

  /// ring_all_reduce in 16 bits: the partial sums travel as T in `wire`, rounded from the FP32 ones as
  /// each frame is reduced, and the owned segment's full sum is rounded in place before it is gathered.
  template <half_float T>
  void compressed_all_reduce(std::span<float> data, reduce_op op) {
    engine_.begin_collective();
    const std::size_t p = std::size_t(size()), n = data.size(), r = std::size_t(rank());
    const auto seg = segments(n);
    float* d = data.data();
    std::vector<T>& wire = wire_buffer<T>();
    wire.resize(n);
    T* w = wire.data();
    auto bytes = [&](std::size_t at) { return reinterpret_cast<std::byte*>(w + at); };
    constexpr std::size_t b = sizeof(T);
    const auto [first_at, first_n] = seg(r);
    round_to(d + first_at, first_n, w + first_at);
    std::vector<ring_engine::ring_step>& steps = steps_;
    steps.clear();
    for (std::size_t k = 0; k + 1 < p; ++k)  // reduce-scatter, as ring_all_reduce's
      steps.push_back({bytes(seg(r + p - k).first), seg(r + p - k).second * b, nullptr, seg(r + p - k - 1).second * b, int(k) - 1});
    for (std::size_t k = 0; k + 1 < p; ++k)  // all-gather of the rounded sums, in place in the wire buffer
      steps.push_back({bytes(seg(r + 1 + p - k).first), seg(r + 1 + p - k).second * b, bytes(seg(r + p - k).first),
                       seg(r + p - k).second * b, int(p + k) - 2});
    const float inv = 1.0f / float(p);
    engine_.run_steps(steps, [&](std::size_t s, std::size_t at, const std::byte* src, std::size_t nb) {
      const std::size_t m = nb / b;
      if (s + 1 >= p) {  // all-gather: widen what landed
        const std::size_t o = seg(r + p - (s + 1 - p)).first + at / b;
        return widen(w + o, m, d + o);
      }
      const std::size_t o = seg(r + p - s - 1).first + at / b;
      dtrain::detail::reduce_into(d + o, reinterpret_cast<const T*>(src), m, op);
      if (s + 2 == p) {  // the owned segment's full sum: divided once, rounded, kept as rounded
        if (op == reduce_op::mean)
          for (std::size_t i = 0; i < m; ++i) d[o + i] *= inv;
        round_to(d + o, m, w + o);
        widen(w + o, m, d + o);
      } else {
        round_to(d + o, m, w + o);  // the partial sum for the next hop
      }
    });
  }
  template <half_float T>
  std::vector<T>& wire_buffer() {
    if constexpr (std::same_as<T, bfloat16>) return wire_bf16_;
    else return wire_fp16_;
  }

  /// A mid-sized all-reduce (3 or more ranks) both ways round the ring, in two collectives. First a
  /// reduce-scatter in which rank t's segment is summed along two chains that end at t: forward from
  /// t - floor(p / 2) and backward from t + floor((p - 1) / 2), each rank adding its own part as the
  /// partial sum passes; t adds the backward chain's sum last, so every segment is summed in one order.
  /// Then a both-ways all-gather of the segments. 2 ceil((p - 1) / 2) latency steps instead of 2 (p - 1)
  /// (4 ranks: 4 instead of 6) for the same bytes per rank; the phases do not overlap, which above
  /// `both_ways_bytes` costs more than the steps save.
  void both_ways_all_reduce(std::span<float> data, reduce_op op) {
    const std::size_t p = std::size_t(size()), n = data.size(), r = std::size_t(rank()), f = p / 2, b = (p - 1) / 2;
    const auto seg = segments(n);
    float* d = data.data();
    auto bytes = [&](std::size_t at) { return reinterpret_cast<std::byte*>(d + at); };
    const auto [own_at, own_n] = seg(r);
    std::vector<float>& last = gathered_;  // the backward chain's sum for the owned segment
    last.resize(own_n);
    std::vector<ring_engine::ring_step>& forward = steps_;
    std::vector<ring_engine::ring_step>& backward = back_steps_;
    forward.clear(), backward.clear();
    for (std::size_t s = 0; s < f; ++s)  // the partial sum of segment r + f - s; receives that of r + f - s - 1
      forward.push_back({bytes(seg(r + f - s).first), seg(r + f - s).second * 4, nullptr, seg(r + f - s - 1).second * 4, int(s) - 1});
    for (std::size_t s = 0; s < b; ++s)  // the partial sum of segment r - b + s; receives that of r - b + s + 1
      backward.push_back({bytes(seg(r + p - b + s).first), seg(r + p - b + s).second * 4,
                          s + 1 == b ? reinterpret_cast<std::byte*>(last.data()) : nullptr,
                          seg(r + p - b + s + 1).second * 4, int(s) - 1});
    engine_.begin_collective();
    engine_.run_both_ways(forward, backward, [&](std::size_t s, std::size_t at, const std::byte* src, std::size_t nb) {
      const std::size_t t = s < f ? r + f - s - 1 : r + p - b + (s - f) + 1;  // the segment that arrived
      if (s >= f && s + 1 == f + b) return;  // the backward chain's sum for the owned segment: added below
      dtrain::detail::reduce_into(d + seg(t).first + at / 4, reinterpret_cast<const float*>(src), nb / 4, op);
    });
    if (b > 0) dtrain::detail::reduce_into(d + own_at, last.data(), own_n, op);
    if (op == reduce_op::mean)
      for (std::size_t i = 0; i < own_n; ++i) d[own_at + i] *= 1.0f / float(p);
    engine_.begin_collective();
    both_ways_gather([&](std::size_t i) { return std::pair{bytes(seg(i).first), seg(i).second * 4}; });
  }

  /// A small all-reduce: every rank's buffer goes around the ring (an all-gather), then each rank
  /// reduces them in rank order, so every rank computes the same bits.
  void gather_and_reduce(std::span<float> data, reduce_op op) {
    const std::size_t p = std::size_t(size()), n = data.size();
    gathered_.resize(p * n);
    ring_all_gather(data, gathered_);
    std::copy_n(gathered_.data(), n, data.data());  // (not memcpy: data may be empty and null)
    for (std::size_t k = 1; k < p; ++k) dtrain::detail::reduce_into(data.data(), gathered_.data() + k * n, n, op);
    if (op == reduce_op::mean)
      for (float& x : data) x *= 1.0f / float(p);
  }
  /// The same with every rank's values rounded to T on the wire, and the FP32 result rounded too.
  template <half_float T>
  void gather_and_reduce(std::span<float> data, reduce_op op) {
    const std::size_t p = std::size_t(size()), n = data.size(), r = std::size_t(rank());
    std::vector<T>& wire = wire_buffer<T>();
    wire.resize(p * n);
    round_to(data.data(), n, wire.data() + r * n);
    engine_.begin_collective();
    both_ways_gather([&](std::size_t i) { return std::pair{reinterpret_cast<std::byte*>(wire.data() + (i % p) * n), n * sizeof(T)}; });
    widen(wire.data(), n, data.data());
    for (std::size_t k = 1; k < p; ++k) dtrain::detail::reduce_into(data.data(), wire.data() + k * n, n, op);
    if (op == reduce_op::mean)
      for (float& x : data) x *= 1.0f / float(p);
    round_through<T>(data.data(), n);
  }

  void ring_all_gather(std::span<const float> in, std::span<float> out) {
    engine_.begin_collective();
    const std::size_t p = std::size_t(size()), k = in.size();
    std::copy_n(in.data(), k, out.data() + std::size_t(rank()) * k);  // (not memcpy: both may be empty and null)
    both_ways_gather([&](std::size_t i) { return std::pair{reinterpret_cast<std::byte*>(out.data() + (i % p) * k), k * 4}; });
  }

  /// An all-gather both ways round the ring at once of the blocks `block(i)` = (where, bytes), each rank's
  /// own already in place: rank r's block goes forward to r + 1, ..., r + floor(p / 2) and backward to
  /// r - 1, ..., r - floor((p - 1) / 2), so the last block lands after ceil((p - 1) / 2) steps instead of
  /// p - 1 (4 ranks: 2 instead of 3), which is most of a small all-reduce's time.
  template <class Block>
  void both_ways_gather(Block&& block) {
    const std::size_t p = std::size_t(size()), r = std::size_t(rank());
    auto step = [&](std::size_t send, std::size_t receive, std::size_t s) {
      const auto [out, out_bytes] = block(send);
      const auto [in, in_bytes] = block(receive);
      return ring_engine::ring_step{out, out_bytes, in, in_bytes, int(s) - 1};
    };
    steps_.clear(), back_steps_.clear();
    for (std::size_t s = 0; s < p / 2; ++s) steps_.push_back(step(r + p - s, r + p - s - 1, s));
    for (std::size_t s = 0; s < (p - 1) / 2; ++s) back_steps_.push_back(step(r + s, r + s + 1, s));
    engine_.run_both_ways(steps_, back_steps_, [](std::size_t, std::size_t, const std::byte*, std::size_t) {});
  }

  void ring_broadcast(std::span<std::byte> data, int root) {
    engine_.begin_collective();
    const bool is_root = rank() == root, last = rv_.next_rank() == root;
    std::vector<ring_engine::ring_step>& steps = steps_;
    steps.assign(1, {data.data(), last ? 0 : data.size(), is_root ? nullptr : data.data(), is_root ? 0 : data.size(),
                     is_root ? -1 : 0});
    engine_.run_steps(steps, [](std::size_t, std::size_t, const std::byte*, std::size_t) {});
  }

  /// The options as the rank runs with them: DTRAIN_TLS, DTRAIN_SHM, DTRAIN_FRAME_CHECKSUMS, the smallest
  /// chunk, the default log.
  static ring_tcp_options normalized(ring_tcp_options o) {
    if (environment::get(environment::tls) == "1") o.tls = true;
    if (environment::get(environment::shm) == "0") o.shared_memory = false;
    if (environment::get(environment::frame_checksums) == "0") o.frame_checksums = false;
    if (o.chunk_bytes < 4096) o.chunk_bytes = 4096;
    if (!o.log) o.log = [](const std::string& s) { std::fprintf(stderr, "dtrain ring_tcp: %s\n", s.c_str()); };
    return o;
  }

  ring_tcp_options o_;
  tcp_rendezvous rv_;
  ring_engine engine_;
  std::unique_ptr<shm_transport> shm_;  // after rv_: it leaves the segment before the sockets close
  std::vector<std::size_t> offsets_;
  std::vector<ring_engine::ring_step> steps_, back_steps_;
  std::vector<float> gathered_;  // a small all-reduce's buffers, every rank's; a both-ways one's last sum
  std::vector<bfloat16> wire_bf16_;  // a compressed all-reduce's values as they travel
  std::vector<float16> wire_fp16_;
  // the largest all-reduce reduce-scattered both ways: across hosts with 0.5 ms links 1.2-1.9x faster than
  // the ring from 64 to 512 KiB, 0.8-1.0x at 1 MiB (the ring overlaps its two phases; this does not)
  static constexpr std::size_t both_ways_bytes = std::size_t{512} << 10;

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::exception_ptr error_;
  bool stopping_ = false, running_ = false;  // running_: a collective holds the sockets
  std::thread worker_;
};

static_assert(cluster_communicator<ring_tcp> && compressing_communicator<ring_tcp>);

}  // namespace dtrain::comm
