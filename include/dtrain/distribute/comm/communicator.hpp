#pragma once
/// \file
/// The communicator seam: collective operations on spans of floats (and bytes) among the replicas of
/// a synchronous job. Strategies and models only ever talk to a communicator through this concept.
///
/// Contract (`communicator`): `rank()` in [0, size()); every rank calls the same collectives in the same
/// order with the same sizes (a mismatch is a protocol error, never silent garbage). `all_reduce(data, op)`
/// leaves every rank with the element-wise reduction, bitwise identical on all ranks;
/// `all_reduce_async` starts one and returns a handle whose `wait()` completes it (operations complete
/// in the order they were started; the span must stay alive until then); `broadcast(data, root)` copies
/// root's data everywhere; `all_gather(in, out)` concatenates every rank's `in` (all the same size) into
/// `out` in rank order; `barrier()` returns once every rank has entered it. The first failure latches:
/// pending operations fail with it and every later call rethrows it.
///
/// A communicator that joins a cluster of processes (`cluster_communicator` in cluster.hpp, what
/// `multi_worker_mirrored_strategy<Comm>` takes) is made by `Comm::connect(cluster, options)`: it
/// connects to (or waits for) every member of `cluster` within `options.connect_timeout` and returns a
/// communicator with `rank() == cluster.rank` and `size() == cluster.world_size`, or throws
/// `comm_error` (a peer never came) or `config_error` (the cluster or options cannot work for it).
///
/// A `compressing_communicator` also sums in 16 bits on the wire: `all_reduce(data, op, compression)`
/// (and its async twin) sends every value and partial sum rounded to bfloat16 or float16 and adds what
/// it receives in FP32, so each hop rounds once; the result is rounded once more, so that it is the same
/// bits on every rank (a value of the wire type, widened). In a world of one nothing is sent and
/// nothing rounded.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/float16.hpp"

namespace dtrain {

/// The reduction of an all-reduce (`tf.distribute.ReduceOp` plus max and min).
enum class reduce_op { sum, mean, max, min };

/// A failure of communication: a dead, hung or misbehaving peer (named in the message).
struct comm_error : error {
  using error::error;
};

/// The exit code of a process that ends because a peer failed: Kubeflow and TF treat it as retryable.
inline constexpr int peer_failure_exit_code = retryable_exit_code;

/// The element type of gradients on the wire (Horovod's `Compression.fp16`, PyTorch DDP's
/// `bf16_compress_hook`): FP32 as they are, or rounded to bfloat16 or float16, half the bytes.
enum class compression { none, bf16, fp16 };
inline const char* name_of(compression c) { return c == compression::bf16 ? "bf16" : c == compression::fp16 ? "fp16" : "none"; }

/// `tf.distribute.experimental.CommunicationOptions` plus dtrain's knobs.
struct communication_options {
  /// ring: ring all-reduce over TCP; nccl: NVIDIA NCCL (needs the CUDA backend); auto: the best available.
  enum class implementation_type { auto_, ring, nccl };
  implementation_type implementation = implementation_type::auto_;
  /// How long a collective may wait with no progress; zero (the default, as in TF): as long as every
  /// worker is alive. A bound on slowness for jobs that prefer failing to waiting.
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds connect_timeout{300'000};  // for all workers to come up
  /// A worker whose ring neighbour sends no heartbeat for this long names it as failed (it died, was
  /// stopped, or its host went down); zero: never. Liveness, whatever the collectives' pace.
  std::chrono::milliseconds heartbeat_timeout{10'000};
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  // the first gradient bucket (starts early)
  std::size_t bucket_bytes = std::size_t{25} << 20;       // the following ones
  std::size_t chunk_bytes = std::size_t{1} << 20;  // the ring's frame size; the same on every worker
  /// The job token every connection proves (docs/security.md); nullopt: DTRAIN_JOB_TOKEN or
  /// DTRAIN_JOB_TOKEN_FILE, "": none. The same on every worker.
  std::optional<std::string> job_token{};
  /// Refuse to run off loopback without a token (also DTRAIN_REQUIRE_JOB_TOKEN=1); else one warning.
  bool require_job_token = false;
  /// Encrypt the data plane with TLS 1.3 keyed by the job token (also DTRAIN_TLS=1): docs/security.md.
  bool tls = false;
  /// When every worker is on this host, all-reduce through shared memory instead of loopback TCP (also
  /// DTRAIN_SHM=0 turns it off): docs/distributed.md.
  bool shared_memory = true;
  /// Gradients between workers in 16 bits (docs/distributed.md#gradients-in-16-bits): each hop rounds
  /// what it sends and adds in FP32; the sum is identical on every worker. bf16 keeps FP32's range,
  /// fp16 three more bits of precision but overflows past 65504. The running metric states that ride
  /// with the gradients, and every other collective, stay FP32. The same on every worker.
  compression gradient_compression = compression::none;
};

template <class H>
concept collective_handle = requires(H& h) { h.wait(); };

template <class C>
concept communicator = requires(C& c, std::span<float> f, std::span<const float> cf, std::span<std::byte> b, int root) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_reduce(f, reduce_op::sum);
  { c.all_reduce_async(f, reduce_op::sum) } -> collective_handle;
  c.broadcast(f, root);
  c.broadcast(b, root);
  c.all_gather(cf, f);
  c.barrier();
};

/// A communicator that can sum in 16 bits on the wire (see the contract above).
template <class C>
concept compressing_communicator = communicator<C> && requires(C& c, std::span<float> f) {
  c.all_reduce(f, reduce_op::sum, compression::bf16);
  { c.all_reduce_async(f, reduce_op::sum, compression::bf16) } -> collective_handle;
};

/// A communicator that also sums device memory of backend B where it lies (comm::nccl: on B's stream).
/// `device_data_plane()` says whether it does in this job; if not, device data goes through host memory
/// and the host collectives above.
template <class C, class B>
concept device_communicator = communicator<C> && requires(C& c, const C& cc, device_span<float, B> d) {
  { cc.device_data_plane() } -> std::convertible_to<bool>;
  c.all_reduce(d, reduce_op::sum);
  { c.all_reduce_async(d, reduce_op::sum) } -> collective_handle;
};

namespace detail {
/// When a wait bounded by `timeout` from now ends; zero: never.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout : std::chrono::steady_clock::time_point::max();
}

/// dst[i] = dst[i] op src[i] (`mean` sums: the caller divides once, at the end).
inline void reduce_into(float* dst, const float* src, std::size_t n, reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
    case reduce_op::max:
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      break;
    case reduce_op::min:
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      break;
  }
}

/// dst[i] = dst[i] op float(src[i]): a reduction of values that came in 16 bits, in FP32 (widened a
/// block at a time into the cache, by F16C or AVX2 where the CPU has them, then reduced as floats).
template <half_float T>
void reduce_into(float* dst, const T* src, std::size_t n, reduce_op op) {
  float block[512];
  for (std::size_t i = 0; i < n; i += 512) {
    const std::size_t m = std::min<std::size_t>(n - i, 512);
    widen(src + i, m, block);
    reduce_into(dst + i, block, m, op);
  }
}

/// f(T{}) with the wire type T that `c` (bf16 or fp16) names.
template <class F>
decltype(auto) with_wire_type(compression c, F&& f) {
  if (c == compression::fp16) return std::forward<F>(f)(float16{});
  return std::forward<F>(f)(bfloat16{});
}
}  // namespace detail

namespace comm {

/// One replica, no network: every collective is the identity.
class local {
 public:
  /// For a cluster of one (a `cluster_info`; templated so that this header needs no cluster code).
  template <class Cluster>
  static local connect(const Cluster& c, const communication_options&) {
    if (c.world_size != 1)
      throw config_error("comm::local: the cluster has " + std::to_string(c.world_size) +
                         " workers; comm::local serves one");
    return {};
  }
  struct handle {
    void wait() {}
  };
  int rank() const { return 0; }
  int size() const { return 1; }
  void all_reduce(std::span<float>, reduce_op, compression = compression::none) {}
  handle all_reduce_async(std::span<float>, reduce_op, compression = compression::none) { return {}; }
  void broadcast(std::span<float>, int root) { check_root(root); }
  void broadcast(std::span<std::byte>, int root) { check_root(root); }
  void all_gather(std::span<const float> in, std::span<float> out) {
    if (out.size() != in.size()) throw value_error("all_gather: output must hold size() * input elements");
    std::memcpy(out.data(), in.data(), in.size_bytes());
  }
  void barrier() {}

 private:
  static void check_root(int root) {
    if (root != 0) throw value_error("broadcast: root " + std::to_string(root) + " is not a rank of a world of 1");
  }
};

}  // namespace comm

static_assert(compressing_communicator<comm::local>);

}  // namespace dtrain
