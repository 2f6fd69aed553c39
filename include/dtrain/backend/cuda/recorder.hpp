#pragma once
/// \file
/// `cuda_detail::recorder<Runtime>`: how the CUDA backend issues its work on one stream (in
/// cuda/context.hpp). Kernels, GEMMs and uploads are recorded as `operation`s; a segment (the work between
/// two reads back) is issued at once: launched operation by operation, captured as a CUDA graph when it
/// repeats the previous segment, or replayed from a cached graph with the kernels' arguments updated
/// (why and when: cuda/device.hpp). Uploads go through pinned host slots the recorder owns.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/backend/cuda/allocator.hpp"
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

template <device_runtime Runtime>
class recorder {
 public:
  recorder(Runtime& r, cuda_options o) : runtime_(r), options_(o) {}
  ~recorder() {
    graphs_.clear();
    for (auto& s : staging_) runtime_.deallocate_host(s.first);
  }
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;

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
      if (!stage) throw device_error(runtime_.describe() + ": cannot allocate " + mib(bytes) + " of pinned host memory for an upload");
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

  Runtime& runtime_;
  cuda_options options_;
  std::mutex mutex_;
  std::vector<std::pair<void*, std::size_t>> staging_;
  std::size_t uploads_ = 0;
  std::vector<operation> pending_, previous_;
  std::vector<cached_graph> graphs_;
  counts counts_;
};

}  // namespace cuda_detail

}  // namespace dtrain
