#pragma once
/// \file
/// `cuda_emulated`: the CUDA backend (cuda/device.hpp) on a runtime that emulates one device on the
/// host. Kernels are the host copies of cuda/<family>.hpp, run block by block and thread by thread with
/// CUDA's indices set; GEMMs are column-major loops of their own (not the cpu backend's, so the
/// row-major to column-major mapping of `basic_cuda::gemm` is checked, not mirrored); a captured
/// graph is the list of its nodes, replayed from its own copies of the arguments (so a node whose
/// update was missed replays stale arguments, and the tests see it). Device memory is host memory
/// behind `device_pointer`, so nothing outside the backend can read it. `emulated_runtime::capacity`
/// bounds the emulated device's memory, to test running out of it.
///
/// Every machine runs the CUDA backend's code this way: the unit suite has it as a backend.

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtrain/backend/cuda/device.hpp"
#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

namespace cuda_detail {

/// Runs kernel K's host copy with CUDA's argument array, as the device would: every thread of every block.
template <cuda_kernels::kernel K>
void emulate(unsigned grid, unsigned block, void** args) {
  using params = typename signature<std::remove_const_t<decltype(cuda_kernels::host_function<K>)>>::params;
  namespace k = cuda_kernels::host;
  k::gridDim = {grid, 1, 1};
  k::blockDim = {block, 1, 1};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t) {
        k::blockIdx = {b, 0, 0};
        k::threadIdx = {t, 0, 0};
        cuda_kernels::host_function<K>(*static_cast<std::tuple_element_t<I, params>*>(args[I])...);
      }
  }(std::make_index_sequence<std::tuple_size_v<params>>{});
}

inline constexpr void (*emulated_kernels[])(unsigned, unsigned, void**) = {
#define DTRAIN_CUDA_EMULATE_(k) &emulate<cuda_kernels::kernel::k>,
    DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_EMULATE_)
#undef DTRAIN_CUDA_EMULATE_
};

}  // namespace cuda_detail

/// An emulated device, whose stream runs each operation when it is issued.
class emulated_runtime {
 public:
  static constexpr const char* name = "cuda_emulated";
  /// Bytes of memory each emulated device has (tests lower it to run out).
  static inline std::size_t capacity = std::size_t{1} << 34;
  /// How many devices the emulator has (two: enough for mirrored_strategy's tests).
  static inline int devices = 2;
  static int device_count() { return devices; }

  explicit emulated_runtime(int device) : device_(device) {
    if (device < 0 || device >= devices)
      throw device_error("cuda_emulated: no CUDA device " + std::to_string(device) + " (the emulator has " +
                         std::to_string(devices) + ")");
  }
  std::string describe() const { return "cuda device " + std::to_string(device_) + " (emulated on the host)"; }
  int device() const { return device_; }
  std::pair<std::size_t, std::size_t> memory_info() const { return {capacity - std::min(capacity, used_), capacity}; }

  void* allocate(std::size_t bytes) {
    if (bytes > capacity - std::min(capacity, used_)) return nullptr;
    used_ += bytes;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    sizes_.emplace_back(p, bytes);
    return p;
  }
  void deallocate(void* p) {
    for (auto it = sizes_.begin(); it != sizes_.end(); ++it)
      if (it->first == p) {
        used_ -= it->second;
        sizes_.erase(it);
        break;
      }
    std::free(p);
  }
  void* allocate_host(std::size_t bytes) { return std::malloc(bytes); }
  void deallocate_host(void* p) { std::free(p); }

  /// A node of a captured graph: a kernel with its own copy of the arguments, a GEMM or a copy.
  struct kernel_node {
    cuda_kernels::kernel k;
    unsigned grid, block;
    cuda_detail::operation args;  // the argument bytes and their offsets
  };
  struct copy_node {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  using node_type = std::variant<kernel_node, cuda_detail::gemm_call, copy_node>;
  using node = std::size_t;

  class graph {
   public:
    explicit graph(std::vector<node_type> nodes) : nodes_(std::move(nodes)) {}
    void update(node n, cuda_kernels::kernel k, unsigned grid, unsigned block, void** args) {
      nodes_.at(n) = make_kernel_node(k, grid, block, args);
    }
    void launch() {
      for (auto& n : nodes_) run(n);
    }

   private:
    std::vector<node_type> nodes_;
  };

  void copy_to_device(void* dst, const void* src, std::size_t bytes) { add(copy_node{dst, src, bytes}); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  void synchronize(const char*) {}
  node launch(cuda_kernels::kernel k, unsigned grid, unsigned block, void** args) {
    return add(make_kernel_node(k, grid, block, args));
  }
  void gemm(const cuda_detail::gemm_call& g) { add(g); }

  void begin_capture() { capture_.emplace(); }
  std::optional<graph> end_capture() {
    std::optional<graph> g(graph(std::move(*capture_)));
    capture_.reset();
    return g;
  }

 private:
  /// A kernel node holding its own copies of the arguments `args` points to.
  static kernel_node make_kernel_node(cuda_kernels::kernel k, unsigned grid, unsigned block, void** args) {
    kernel_node n{k, grid, block, {}};
    cuda_detail::copy_arguments(k, args, n.args);
    return n;
  }

  node add(node_type n) {
    if (capture_) {
      capture_->push_back(std::move(n));
      return capture_->size() - 1;
    }
    run(n);
    return 0;
  }
  static void run(node_type& n) {
    if (auto* k = std::get_if<kernel_node>(&n)) {
      auto args = k->args.arg_pointers();
      cuda_detail::emulated_kernels[static_cast<int>(k->k)](k->grid, k->block, args.data());
    } else if (auto* g = std::get_if<cuda_detail::gemm_call>(&n)) {
      column_major_gemm(*g);
    } else {
      const auto& c = std::get<copy_node>(n);
      std::memcpy(c.dst, c.src, c.bytes);
    }
  }
  /// C = alpha op(A) op(B) + beta C, column-major, as cublasSgemm (beta 0: C is not read).
  static void column_major_gemm(const cuda_detail::gemm_call& g) {
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < g.k; ++l) {
          const float a = g.ta ? g.a[l + std::size_t(i) * g.lda] : g.a[i + std::size_t(l) * g.lda];
          const float b = g.tb ? g.b[j + std::size_t(l) * g.ldb] : g.b[l + std::size_t(j) * g.ldb];
          acc += a * b;
        }
        float& c = g.c[i + std::size_t(j) * g.ldc];
        c = g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * c;
      }
  }

  int device_;
  std::size_t used_ = 0;
  std::vector<std::pair<void*, std::size_t>> sizes_;
  std::optional<std::vector<node_type>> capture_;
};

static_assert(device_runtime<emulated_runtime>);

/// The CUDA backend on the emulated device.
using cuda_emulated = basic_cuda<emulated_runtime>;
static_assert(backend<cuda_emulated>);

}  // namespace dtrain
