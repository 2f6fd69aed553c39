#pragma once
/// \file
/// The runtime seam of the CUDA backend (cuda/device.hpp): `device_runtime`, what a runtime owning one
/// device and one stream provides (`cuda_runtime` in backend/cuda.hpp, `emulated_runtime` in
/// cuda/emulator.hpp); `cuda_detail::gemm_call`, the GEMM it is handed. What it and the backend throw is a
/// `device_error` (core/error.hpp).

#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

namespace cuda_detail {
struct gemm_call;
}

/// The runtime seam of `basic_cuda`: one device and one stream of it. Contract, for a runtime `r`:
/// - `R(device)` opens the device (a `device_error` naming it when it cannot); `R::device_count()` is
///   how many there are (0 without a driver, never an error); `R::name` names the kind; `r.describe()` names the device in messages; `r.memory_info()` is {free, total} bytes.
/// - `r.allocate(bytes)` is device memory, or nullptr when the device is out of memory (any other failure
///   throws); `r.deallocate(p)`; `r.allocate_host(bytes)` is pinned host memory (nullptr when refused).
/// - In stream order: `r.copy_to_device(dst, pinned_src, bytes)`, `r.copy_to_host(dst, src, bytes)`,
///   `r.launch(kernel, grid, block, args)` (CUDA's argument array; while capturing, it returns the graph
///   node it added), `r.gemm(call)` (as cublasSgemm, column-major). `r.synchronize(what)` waits for the
///   stream and throws a `device_error` naming `what` if anything issued before it failed.
/// - `r.begin_capture()` starts recording the stream into a graph instead of running it;
///   `r.end_capture()` returns it instantiated, or nullopt when capture failed (nothing then ran);
///   `g.update(node, kernel, grid, block, args)` changes a kernel node's arguments for later launches;
///   `g.launch()` runs the graph in stream order.
template <class R>
concept device_runtime =
    requires(R& r, const R& cr, std::size_t n, void* p, const void* cp, cuda_kernels::kernel k, unsigned u,
             void** args, const cuda_detail::gemm_call& g, typename R::node node, typename R::graph& graph) {
      { R::name } -> std::convertible_to<const char*>;
      requires std::constructible_from<R, int>;
      { R::device_count() } -> std::convertible_to<int>;
      { cr.describe() } -> std::convertible_to<std::string>;
      { cr.memory_info() } -> std::convertible_to<std::pair<std::size_t, std::size_t>>;
      { r.allocate(n) } -> std::same_as<void*>;
      r.deallocate(p);
      { r.allocate_host(n) } -> std::same_as<void*>;
      r.deallocate_host(p);
      r.copy_to_device(p, cp, n);
      r.copy_to_host(p, cp, n);
      r.synchronize("what");
      { r.launch(k, u, u, args) } -> std::same_as<typename R::node>;
      r.gemm(g);
      r.begin_capture();
      { r.end_capture() } -> std::same_as<std::optional<typename R::graph>>;
      graph.update(node, k, u, u, args);
      graph.launch();
    };

namespace cuda_detail {

/// A GEMM as cublasSgemm takes it (column-major).
struct gemm_call {
  bool ta, tb;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;
  friend bool operator==(const gemm_call&, const gemm_call&) = default;
};

}  // namespace cuda_detail

}  // namespace dtrain
