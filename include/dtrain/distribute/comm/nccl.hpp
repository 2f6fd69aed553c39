#pragma once
/// \file
/// `comm::nccl`: the communicator of GPU workers on NVIDIA's NCCL (link `dtrain::nccl`: NCCL, the CUDA
/// runtime, cuBLAS and NVRTC; a plain C++ compiler builds it). basic_nccl.hpp has what it does; here is
/// the NCCL seam on the library: non-blocking communicators (`ncclConfig_t::blocking = 0`, so opening
/// one and every collective can be waited for with a deadline and aborted), collectives on the cuda
/// backend's stream after the work it recorded, CUDA events for their completion.
///
///   dtrain::multi_worker_mirrored_strategy<dtrain::comm::nccl, dtrain::cuda> strategy;  // one GPU per worker
///   dtrain::mirrored_strategy<dtrain::comm::nccl, dtrain::cuda> strategy;                // every GPU of this host

#include <nccl.h>

#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/backend/cuda.hpp"
#include "dtrain/distribute/comm/basic_nccl.hpp"

namespace dtrain::comm {

/// NCCL's C API as the `nccl_api` seam (basic_nccl.hpp): every status code is checked here, once.
struct nccl_library {
  static constexpr const char* name = "nccl";
  using device_type = cuda;
  using unique_id = ncclUniqueId;

  /// A communicator handle (moves; basic_nccl frees it with abort).
  struct comm {
    comm() = default;
    comm(comm&& o) noexcept : c(std::exchange(o.c, nullptr)) {}
    comm& operator=(comm&& o) noexcept {
      std::swap(c, o.c);
      return *this;
    }
    ncclComm_t c = nullptr;
  };
  /// A CUDA event on a stream, destroyed with the handle.
  struct event {
    event() = default;
    event(event&& o) noexcept : e(std::exchange(o.e, nullptr)) {}
    event& operator=(event&& o) noexcept {
      std::swap(e, o.e);
      return *this;
    }
    ~event() {
      if (e) cudaEventDestroy(e);
    }
    cudaEvent_t e = nullptr;
  };

  static unique_id new_unique_id() {
    unique_id id{};
    check(ncclGetUniqueId(&id), "ncclGetUniqueId (rank 0 makes the job's id)");
    return id;
  }
  static comm init(const unique_id& id, int size, int rank, const cuda& d) {
    const cuda_detail::device_guard on(d.runtime().device());
    comm c;
    ncclConfig_t config = non_blocking();
    check(ncclCommInitRankConfig(&c.c, size, id, rank, &config),
          "ncclCommInitRankConfig (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")");
    return c;
  }
  static std::vector<comm> init_group(const unique_id& id, std::span<const cuda> devices) {
    std::vector<comm> cs(devices.size());
    check(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const cuda_detail::device_guard on(devices[i].runtime().device());
      ncclConfig_t config = non_blocking();
      const ncclResult_t r = ncclCommInitRankConfig(&cs[i].c, int(devices.size()), id, int(i), &config);
      if (first == ncclSuccess && r != ncclInProgress) first = r;
    }
    const ncclResult_t end = ncclGroupEnd();
    check(first, "ncclCommInitRankConfig (a group of " + std::to_string(devices.size()) + " devices)");
    check(end, "ncclGroupEnd (opening " + std::to_string(devices.size()) + " communicators)");
    return cs;
  }
  static nccl_state poll(comm& c, std::string& why) {
    if (!c.c) return why = "no communicator", nccl_state::failed;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(c.c, &state);
    if (r != ncclSuccess) return why = text(r, c.c), nccl_state::failed;
    if (state == ncclInProgress) return nccl_state::in_progress;
    if (state != ncclSuccess) return why = text(state, c.c), nccl_state::failed;
    return nccl_state::ready;
  }

  static void all_reduce(comm& c, const float* in, float* out, std::size_t n, reduce_op o, const cuda& d) {
    d.enqueue([&](cuda_runtime& r) {
      const cuda_detail::device_guard on(r.device());
      check(ncclAllReduce(in, out, n, ncclFloat32, to_nccl(o), c.c, r.stream()),
            "ncclAllReduce of " + std::to_string(n) + " floats", c.c);
    });
  }
  static void broadcast(comm& c, std::byte* data, std::size_t bytes, int root, const cuda& d) {
    d.enqueue([&](cuda_runtime& r) {
      const cuda_detail::device_guard on(r.device());
      check(ncclBroadcast(data, data, bytes, ncclUint8, root, c.c, r.stream()),
            "ncclBroadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root), c.c);
    });
  }
  static void all_gather(comm& c, const float* in, float* out, std::size_t n, const cuda& d) {
    d.enqueue([&](cuda_runtime& r) {
      const cuda_detail::device_guard on(r.device());
      check(ncclAllGather(in, out, n, ncclFloat32, c.c, r.stream()), "ncclAllGather of " + std::to_string(n) + " floats", c.c);
    });
  }
  static void group_start() { check(ncclGroupStart(), "ncclGroupStart"); }
  static void group_end() { check(ncclGroupEnd(), "ncclGroupEnd"); }

  static event record(comm&, const cuda& d) {
    return d.enqueue([](cuda_runtime& r) {
      const cuda_detail::device_guard on(r.device());
      event e;
      cuda_check(cudaEventCreateWithFlags(&e.e, cudaEventDisableTiming), r, "creating an event");
      cuda_check(cudaEventRecord(e.e, r.stream()), r, "recording an event after a collective");
      return e;
    });
  }
  static bool done(event& e) {
    if (!e.e) return true;
    const cudaError_t r = cudaEventQuery(e.e);
    if (r == cudaErrorNotReady) return false;
    if (r != cudaSuccess) {
      (void)cudaGetLastError();
      throw device_error("cuda: the work before a collective's event failed: " + cuda_detail::describe_error(r));
    }
    return true;
  }
  static void abort(comm& c) {
    if (c.c) ncclCommAbort(std::exchange(c.c, nullptr));
  }
 private:
  static ncclConfig_t non_blocking() {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return config;
  }
  static ncclRedOp_t to_nccl(reduce_op o) {
    switch (o) {
      case reduce_op::sum: return ncclSum;
      case reduce_op::mean: return ncclAvg;
      case reduce_op::max: return ncclMax;
      case reduce_op::min: return ncclMin;
    }
    return ncclSum;
  }
  static std::string text(ncclResult_t r, ncclComm_t c = nullptr) {
    std::string s = ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(c); last && *last) s += " (" + std::string(last) + ")";
    return s;
  }
  /// A call's immediate result: placed (success, or in progress on a non-blocking communicator), else a
  /// comm_error naming the call.
  static void check(ncclResult_t r, const std::string& what, ncclComm_t c = nullptr) {
    if (r != ncclSuccess && r != ncclInProgress) throw comm_error("comm::nccl: " + what + " failed: " + text(r, c));
  }
  static void cuda_check(cudaError_t e, const cuda_runtime& r, const char* what) {
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw device_error(r.describe() + ": " + what + " failed: " + cuda_detail::describe_error(e));
    }
  }
};

static_assert(nccl_api<nccl_library>);

/// The communicator of GPU workers: NCCL for device memory, the TCP ring for the rest (basic_nccl.hpp).
using nccl = basic_nccl<nccl_library>;
static_assert(cluster_communicator<nccl> && device_communicator<nccl, cuda> && compressing_communicator<nccl>);

}  // namespace dtrain::comm
