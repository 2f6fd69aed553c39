#pragma once
/// \file
/// `cuda_detail::context<Runtime>`: one device and stream of the CUDA backend, shared by its handles: the
/// caching allocator (size-class free lists, emptied and retried once when out of memory), the recording
/// of a segment, and its issue as launches, as a captured CUDA graph or as a replay of one (how and when:
/// cuda/device.hpp). One class, because the allocator and the recording share a lock and an allocation
/// out of memory first issues what is recorded. `cuda_options` says whether graphs are used.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/backend/cuda/operation.hpp"
#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain {

/// How a CUDA backend object issues its work.
struct cuda_options {
  /// Replay repeating steps as CUDA graphs (else every kernel is launched as issued). Either way the
  /// results are bitwise the same.
  bool graphs = true;
};

namespace cuda_detail {

inline std::string mib(std::size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + "." + std::to_string(bytes % (1024 * 1024) * 10 / (1024 * 1024)) +
         " MiB";
}

/// One device and stream with its allocator, its recording and its graphs (shared by backend handles).
template <device_runtime Runtime>
class context {
 public:
  context(int device, cuda_options o) : runtime_(device), options_(o) {}
  ~context() {
    try {
      flush();
      runtime_.synchronize("freeing the device's memory");
    } catch (...) {  // a failed device cannot be waited for; the memory goes with the process
    }
    graphs_.clear();
    if (scratch_) runtime_.deallocate(scratch_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) runtime_.deallocate(p);
    for (auto& s : staging_) runtime_.deallocate_host(s.first);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  Runtime& runtime() { return runtime_; }
  std::string describe() { return runtime_.describe(); }

  // ---- memory ------------------------------------------------------------------------------------------
  /// Bytes a request of `bytes` occupies: size classes (powers of two from 512 B to 1 MiB, then
  /// multiples of 2 MiB) keep the free lists few.
  static std::size_t rounded(std::size_t bytes) {
    if (bytes <= (std::size_t{1} << 20)) return std::max<std::size_t>(512, std::bit_ceil(bytes));
    const std::size_t step = std::size_t{2} << 20;
    return (bytes + step - 1) / step * step;
  }
  void* allocate(std::size_t bytes, const char* what) {
    std::lock_guard lock(mutex_);
    const std::size_t size = rounded(bytes);
    if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size, in_use_ += size;
      peak_ = std::max(peak_, in_use_);
      return p;
    }
    void* p = runtime_.allocate(size);
    if (!p) {  // give back every cached block (after the work that may use them) and try once more
      flush_locked();
      runtime_.synchronize("an allocation");
      for (auto& [s, blocks] : free_)
        for (void* b : blocks) runtime_.deallocate(b);
      free_.clear();
      cached_ = 0;
      p = runtime_.allocate(size);
    }
    if (!p) {
      const auto [free, total] = runtime_.memory_info();
      throw device_error(describe() + ": out of memory allocating " + mib(size) + " for " + what + " (" +
                         mib(in_use_) + " in use by dtrain, " + mib(free) + " free of " + mib(total) + ")");
    }
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void release(void* p, std::size_t bytes) {
    if (!p) return;
    std::lock_guard lock(mutex_);
    const std::size_t size = rounded(bytes);
    free_[size].push_back(p);
    cached_ += size, in_use_ -= size;
  }
  std::size_t bytes_in_use() {
    std::lock_guard lock(mutex_);
    return in_use_;
  }
  std::size_t peak_bytes_in_use() {
    std::lock_guard lock(mutex_);
    return peak_;
  }

  // ---- recording ---------------------------------------------------------------------------------------
  template <cuda_kernels::kernel K, class... A>
  void launch(std::size_t threads, A... a) {
    using params = typename signature<std::remove_const_t<decltype(cuda_kernels::host_function<K>)>>::params;
    static_assert(std::tuple_size_v<params> == sizeof...(A), "a CUDA kernel launched with the wrong number of arguments");
    operation op;
    op.what = operation::type::kernel;
    op.k = K;
    op.block = block_size;
    op.grid = static_cast<unsigned>(std::clamp<std::size_t>((threads + block_size - 1) / block_size, 1, max_blocks));
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      params values{static_cast<std::tuple_element_t<I, params>>(raw(a))...};
      void* pointers[] = {&std::get<I>(values)...};
      copy_arguments<K>(pointers, op);
    }(std::index_sequence_for<A...>{});
    std::lock_guard lock(mutex_);
    record(op);
  }
  void gemm(const gemm_call& g) {
    operation op;
    op.what = operation::type::gemm;
    op.gemm = g;
    std::lock_guard lock(mutex_);
    record(op);
  }
  void upload(void* dst, const void* host, std::size_t bytes) {
    if (bytes == 0) return;
    std::lock_guard lock(mutex_);
    if (uploads_ == max_staged) {  // a program that uploads without ever reading back: reuse the slots
      flush_locked();
      runtime_.synchronize("an upload");
      uploads_ = 0;
    }
    const std::size_t slot = uploads_++;
    if (staging_.size() <= slot) staging_.resize(slot + 1, {nullptr, 0});
    auto& [stage, capacity] = staging_[slot];
    if (capacity < bytes) {
      if (stage) runtime_.deallocate_host(stage);
      stage = runtime_.allocate_host(bytes);
      capacity = stage ? bytes : 0;
      if (!stage) throw device_error(describe() + ": cannot allocate " + mib(bytes) + " of pinned host memory for an upload");
    }
    std::memcpy(stage, host, bytes);
    operation op;
    op.what = operation::type::upload;
    op.dst = dst, op.src = stage, op.bytes = bytes;
    record(op);
  }
  void download(void* host, const void* src, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    flush_locked();
    if (bytes) runtime_.copy_to_host(host, src, bytes);
    runtime_.synchronize(("a download of " + std::to_string(bytes) + " bytes").c_str());
    uploads_ = 0;
  }
  void synchronize() {
    std::lock_guard lock(mutex_);
    flush_locked();
    runtime_.synchronize("synchronize");
    uploads_ = 0;
  }
  void flush() {
    std::lock_guard lock(mutex_);
    flush_locked();
  }
  /// Issues what is recorded, then `f(runtime)` with nothing issued in between: another library's work
  /// (NCCL's collectives) on the stream, in order with the backend's kernels.
  template <class F>
  decltype(auto) enqueue(F&& f) {
    std::lock_guard lock(mutex_);
    flush_locked();
    return std::forward<F>(f)(runtime_);
  }

  /// Scratch device memory for reductions (valid until the next call; stream order keeps it safe).
  void* scratch(std::size_t bytes) {
    std::lock_guard lock(scratch_mutex_);
    if (scratch_bytes_ < bytes) {
      release(scratch_, scratch_bytes_);
      scratch_ = nullptr, scratch_bytes_ = 0;
      scratch_ = allocate(bytes, "reduction scratch");
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  /// Segments issued so far: launched operation by operation, captured, replayed (tests read these).
  struct counts {
    std::size_t launched = 0, captured = 0, replayed = 0;
  };
  counts issued() {
    std::lock_guard lock(mutex_);
    return counts_;
  }

  static constexpr unsigned block_size = 256;
  static constexpr std::size_t max_blocks = 4096;

 private:
  void record(const operation& op) {
    pending_.push_back(op);
    // launched as issued without graphs; a segment that never synchronises is issued in pieces
    if (!options_.graphs || pending_.size() >= max_pending) flush_locked();
  }

  void issue(operation& op) {
    switch (op.what) {
      case operation::type::kernel: {
        auto args = op.arg_pointers();
        runtime_.launch(op.k, op.grid, op.block, args.data());
        break;
      }
      case operation::type::gemm: runtime_.gemm(op.gemm); break;
      case operation::type::upload: runtime_.copy_to_device(op.dst, op.src, op.bytes); break;
    }
  }

  struct cached_graph {
    typename Runtime::graph graph;
    std::vector<operation> ops;
    std::vector<typename Runtime::node> nodes;  // per operation (kernels only)
  };

  void flush_locked() {
    if (pending_.empty()) return;
    std::vector<operation> ops = std::move(pending_);
    pending_.clear();
    if (options_.graphs) {
      for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
        if (!replays(ops, it->ops)) continue;
        try {
          for (std::size_t i = 0; i < ops.size(); ++i)
            if (ops[i].what == operation::type::kernel && !ops[i].same_arguments(it->ops[i])) {
              auto args = ops[i].arg_pointers();
              it->graph.update(it->nodes[i], ops[i].k, ops[i].grid, ops[i].block, args.data());
            }
        } catch (...) {  // half updated: no longer the graph of it->ops
          graphs_.erase(it);
          throw;
        }
        it->ops.swap(ops);
        it->graph.launch();
        ++counts_.replayed;
        std::rotate(graphs_.begin(), it, it + 1);  // most recently used first
        reuse(ops);
        return;
      }
      if (replays(ops, previous_) && capture(ops)) {
        previous_.clear();
        return;
      }
    }
    for (auto& op : ops) issue(op);
    ++counts_.launched;
    previous_.swap(ops);
    reuse(ops);
  }
  /// The next segment records into `ops`' storage: a step allocates no operation list.
  void reuse(std::vector<operation>& ops) {
    ops.clear();
    pending_ = std::move(ops);
  }

  /// Captures `ops` into a graph and launches it; false (nothing issued) when capture fails.
  bool capture(std::vector<operation>& ops) {
    std::vector<typename Runtime::node> nodes(ops.size());
    runtime_.begin_capture();
    try {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].what == operation::type::kernel) {
          auto args = ops[i].arg_pointers();
          nodes[i] = runtime_.launch(ops[i].k, ops[i].grid, ops[i].block, args.data());
        } else {
          issue(ops[i]);
        }
      }
    } catch (...) {
      runtime_.end_capture();
      return false;
    }
    auto g = runtime_.end_capture();
    if (!g) return false;
    g->launch();
    ++counts_.captured;
    if (graphs_.size() == max_graphs) graphs_.pop_back();
    graphs_.insert(graphs_.begin(), cached_graph{std::move(*g), std::move(ops), std::move(nodes)});
    return true;
  }

  static constexpr std::size_t max_graphs = 4;
  static constexpr std::size_t max_pending = 8192, max_staged = 256;

  Runtime runtime_;
  cuda_options options_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0, in_use_ = 0, peak_ = 0;
  std::vector<std::pair<void*, std::size_t>> staging_;
  std::size_t uploads_ = 0;
  std::vector<operation> pending_, previous_;
  std::vector<cached_graph> graphs_;
  counts counts_;
  std::mutex scratch_mutex_;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace cuda_detail

}  // namespace dtrain
