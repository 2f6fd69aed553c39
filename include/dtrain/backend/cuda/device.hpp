#pragma once
/// \file
/// `basic_cuda<Runtime>`: the CUDA backend written once over a runtime that owns one device and one
/// stream. `cuda` (backend/cuda.hpp) runs it on the CUDA runtime, cuBLAS and NVRTC; `cuda_emulated`
/// (cuda/emulator.hpp) runs the very same code, kernels included, on the host, so everything here but
/// the runtime calls is tested on machines without a GPU.
///
/// How a step runs. Kernels (cuda/kernels.hpp), GEMMs and uploads are recorded, not issued, until the
/// host needs a result (`download`, `synchronize`): a training step is one such segment. At that point
/// the segment is issued in one of three ways:
/// - it has the shape of a segment already captured as a CUDA graph (same kernels, GEMMs and copies in
///   the same order on the same buffers; kernel arguments such as Adam's step size or a dropout key may
///   differ and are patched into the graph's nodes): the graph is replayed;
/// - it has the shape of the segment before it (a step seen twice): it is captured into a graph, which
///   is instantiated and launched (kept for the next ones; four shapes are kept);
/// - else (or with `cuda_options::graphs` false, or when capture fails) every operation is launched.
/// The same kernels run with the same arguments in every case, so a graph step and a launched step
/// give the same bits. Uploads are staged through pinned host memory (the copy a graph replays reads
/// the staging slot the upload wrote), so `upload` returns at once, as the contract asks.
///
/// A backend object and its copies are used by one thread at a time; each thread's default-constructed
/// handles get a stream of their own.
///
/// Memory comes from a caching allocator (no cudaMalloc per step): freed blocks return to size-class
/// free lists of the backend's one stream, where stream order makes their reuse safe. Out of memory,
/// the cache is emptied and the allocation retried once; then the error names the device, the sizes
/// and what is cached and in use.
///
/// The runtime seam (`device_runtime`, below): what `cuda_runtime` and `emulated_runtime` provide.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <concepts>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

/// An error of a device: the message names the device, the operation and the sizes.
struct device_error : error {
  using error::error;
};

/// How a CUDA backend object issues its work.
struct cuda_options {
  /// Replay repeating steps as CUDA graphs (else every kernel is launched as issued). Either way the
  /// results are bitwise the same.
  bool graphs = true;
};

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

/// An address in device memory: it converts to nothing on the host (the backend's kernels read it).
template <class T>
class device_pointer {
 public:
  device_pointer() = default;
  device_pointer(std::nullptr_t) {}
  explicit device_pointer(T* p) : p_(p) {}
  template <class U>
    requires std::is_same_v<const U, T> && (!std::is_same_v<U, T>)
  device_pointer(device_pointer<U> p) : p_(p.get()) {}
  device_pointer operator+(std::size_t n) const { return device_pointer(p_ + n); }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator!() const { return p_ == nullptr; }
  friend bool operator==(const device_pointer&, const device_pointer&) = default;
  /// The device address (not to be dereferenced on the host).
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

template <class T>
T* raw(device_pointer<T> p) {
  return p.get();
}
template <class T>
T raw(T v) {
  return v;
}

template <class F>
struct signature;
template <class... P>
struct signature<void (*)(P...)> {
  using params = std::tuple<P...>;
};

struct operation;
template <cuda_kernels::kernel K>
void copy_arguments(void* const* args, operation& out);

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

/// One recorded operation of a segment.
struct operation {
  enum class type : std::uint8_t { kernel, gemm, upload } what{};
  cuda_kernels::kernel k{};
  unsigned grid = 0, block = 0;
  std::uint8_t arg_count = 0;
  std::uint16_t arg_bytes = 0;
  std::array<std::uint16_t, 16> offsets{};
  alignas(16) std::array<std::byte, 192> args{};
  gemm_call gemm{};
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;

  /// The argument pointers a launch takes (into this operation's own copy).
  std::array<void*, 16> arg_pointers() {
    std::array<void*, 16> p{};
    for (std::size_t i = 0; i < arg_count; ++i) p[i] = args.data() + offsets[i];
    return p;
  }
  bool same_arguments(const operation& o) const {
    return arg_bytes == o.arg_bytes && grid == o.grid && block == o.block &&
           std::memcmp(args.data(), o.args.data(), arg_bytes) == 0;
  }
  /// Whether a graph captured from `o` can replay this (kernel arguments patched).
  bool replays(const operation& o) const {
    if (what != o.what) return false;
    switch (what) {
      case type::kernel: return k == o.k && arg_count == o.arg_count;
      case type::gemm: return gemm == o.gemm;
      case type::upload: return dst == o.dst && src == o.src && bytes == o.bytes;
    }
    return false;
  }
};

/// Copies the arguments of kernel K (typed by its host copy's signature) from a launch's argument
/// array into `out`, each at its alignment.
template <cuda_kernels::kernel K>
void copy_arguments(void* const* args, operation& out) {
  using params = typename signature<std::remove_const_t<decltype(cuda_kernels::host_function<K>)>>::params;
  static_assert(std::tuple_size_v<params> <= 16);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t at = 0;
    auto put = [&]<class P>(std::size_t i, const P* value) {
      static_assert(std::is_trivially_copyable_v<P>);
      at = (at + alignof(P) - 1) / alignof(P) * alignof(P);
      std::memcpy(out.args.data() + at, value, sizeof(P));
      out.offsets[i] = static_cast<std::uint16_t>(at);
      at += sizeof(P);
    };
    (put(I, static_cast<const std::tuple_element_t<I, params>*>(args[I])), ...);
    out.arg_count = static_cast<std::uint8_t>(sizeof...(I));
    out.arg_bytes = static_cast<std::uint16_t>(at);
  }(std::make_index_sequence<std::tuple_size_v<params>>{});
}

/// copy_arguments for a kernel known at run time.
inline void copy_arguments(cuda_kernels::kernel k, void* const* args, operation& out) {
  static constexpr void (*copiers[])(void* const*, operation&) = {
#define DTRAIN_CUDA_COPIER_(k) &copy_arguments<cuda_kernels::kernel::k>,
      DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_COPIER_)
#undef DTRAIN_CUDA_COPIER_
  };
  copiers[static_cast<int>(k)](args, out);
}

inline bool replays(const std::vector<operation>& now, const std::vector<operation>& before) {
  if (now.size() != before.size()) return false;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (!now[i].replays(before[i])) return false;
  return true;
}

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

template <device_runtime Runtime>
class basic_cuda {
  using context = cuda_detail::context<Runtime>;
  using kernel = cuda_kernels::kernel;

 public:
  static constexpr const char* name = Runtime::name;

  template <class T>
  using pointer = cuda_detail::device_pointer<T>;

  /// Device memory, returned to the backend's cache when the buffer goes.
  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    buffer(std::shared_ptr<context> c, std::size_t n)
        : c_(std::move(c)), p_(n ? static_cast<T*>(c_->allocate(n * sizeof(T), "a buffer")) : nullptr), n_(n) {}
    buffer(buffer&& o) noexcept
        : c_(std::move(o.c_)), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    buffer& operator=(buffer&& o) noexcept {
      if (this != &o) {
        reset();
        c_ = std::move(o.c_), p_ = std::exchange(o.p_, nullptr), n_ = std::exchange(o.n_, 0);
      }
      return *this;
    }
    ~buffer() { reset(); }
    pointer<T> data() const { return pointer<T>(p_); }
    std::size_t size() const { return n_; }

   private:
    void reset() {
      if (c_ && p_) c_->release(p_, n_ * sizeof(T));
      p_ = nullptr, n_ = 0;
    }
    std::shared_ptr<context> c_;
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };

  /// Pinned host memory (the device copies to and from it at full speed), freed when the buffer goes:
  /// what a host communicator's data is staged through.
  template <class T>
  class host_buffer {
   public:
    using value_type = T;
    host_buffer() = default;
    host_buffer(std::shared_ptr<context> c, std::size_t n) : c_(std::move(c)), n_(n) {
      if (n == 0) return;
      p_ = static_cast<T*>(c_->runtime().allocate_host(n * sizeof(T)));
      if (!p_)
        throw device_error(c_->describe() + ": cannot allocate " + cuda_detail::mib(n * sizeof(T)) +
                           " of pinned host memory");
    }
    host_buffer(host_buffer&& o) noexcept
        : c_(std::move(o.c_)), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    host_buffer& operator=(host_buffer&& o) noexcept {
      std::swap(c_, o.c_), std::swap(p_, o.p_), std::swap(n_, o.n_);
      return *this;
    }
    ~host_buffer() {
      if (p_) c_->runtime().deallocate_host(p_);
    }
    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    operator std::span<T>() const { return {p_, n_}; }

   private:
    std::shared_ptr<context> c_;
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };

  /// How many devices there are (0 without a driver).
  static int device_count() { return Runtime::device_count(); }
  /// Device 0 through this thread's stream (every default-constructed handle of a thread shares it).
  basic_cuda() : basic_cuda(0) {}
  /// Device `device` through this thread's stream for it.
  explicit basic_cuda(int device) : c_(shared(device)) {}
  /// A stream of its own on `device` (a replica's), issuing work as `o` says.
  basic_cuda(int device, cuda_options o) : c_(std::make_shared<context>(device, o)) {}

  /// "cuda device 0 (NVIDIA H100 80GB HBM3)".
  std::string describe() const { return c_->describe(); }
  /// Bytes of device memory the backend's buffers hold (its cache excluded).
  std::size_t bytes_in_use() const { return c_->bytes_in_use(); }
  /// The most bytes the backend's buffers held at once.
  std::size_t peak_bytes_in_use() const { return c_->peak_bytes_in_use(); }
  /// How the segments so far were issued (launched, captured as a graph, replayed).
  auto issued() const { return c_->issued(); }
  Runtime& runtime() const { return c_->runtime(); }

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(c_, n);
  }
  template <class T>
  host_buffer<T> allocate_host(std::size_t n) const {
    return host_buffer<T>(c_, n);
  }
  /// Issues the recorded work, then runs `f(runtime)`: work of another library on the backend's stream
  /// (comm::nccl's collectives), in order with its kernels.
  template <class F>
  decltype(auto) enqueue(F&& f) const {
    return c_->enqueue(std::forward<F>(f));
  }
  template <class T>
  void upload(std::size_t n, const T* host, pointer<T> p) const {
    c_->upload(p.get(), host, n * sizeof(T));
  }
  template <class T>
  void download(std::size_t n, pointer<T> p, std::remove_const_t<T>* host) const {
    c_->download(host, p.get(), n * sizeof(T));
  }
  void synchronize() const { c_->synchronize(); }

  // ---- BLAS-like ---------------------------------------------------------------------------------------
  void fill(std::size_t n, float v, pointer<float> x) const { run<kernel::dtrain_fill>(n, n, v, x); }
  void copy(std::size_t n, pointer<const float> x, pointer<float> y) const { run<kernel::dtrain_copy>(n, n, x, y); }
  void copy_columns(std::size_t rows, std::size_t cols, pointer<const float> x, std::size_t ldx, pointer<float> y,
                    std::size_t ldy) const {
    run<kernel::dtrain_copy_columns>(rows * cols, rows, cols, x, ldx, y, ldy);
  }
  void axpy(std::size_t n, float a, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_axpy>(n, n, a, x, y);
  }
  void multiply(std::size_t n, pointer<const float> x, pointer<const float> y, pointer<float> z) const {
    run<kernel::dtrain_multiply>(n, n, x, y, z);
  }
  /// Row-major C = alpha op(A) op(B) + beta C, as cuBLAS' column-major C^T = op(B)^T op(A)^T.
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            pointer<const float> a, std::size_t lda, pointer<const float> b, std::size_t ldb, float beta,
            pointer<float> c, std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    for (std::size_t v : {m, n, k, lda, ldb, ldc})
      if (v > std::size_t(std::numeric_limits<int>::max()))
        throw device_error(describe() + ": a GEMM of " + std::to_string(m) + " x " + std::to_string(n) + " x " +
                           std::to_string(k) + " (leading dimensions " + std::to_string(lda) + ", " +
                           std::to_string(ldb) + ", " + std::to_string(ldc) + ") exceeds cuBLAS' 32-bit sizes");
    const auto i = [](std::size_t v) { return static_cast<int>(std::max<std::size_t>(v, 1)); };
    c_->gemm({tb == transpose::yes, ta == transpose::yes, static_cast<int>(n), static_cast<int>(m),
              static_cast<int>(k), alpha, b.get(), i(ldb), a.get(), i(lda), beta, c.get(), i(ldc)});
  }
  void broadcast_rows(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_broadcast_rows>(rows * cols, rows, cols, x, y);
  }
  /// y = the column sums of x, as a tree: each level adds at most `fan_in` rows of the one below
  /// (rows ch, ch + chunks, ...: coalesced), the last level into y.
  void column_sums(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    if (cols == 0) return;
    std::size_t below = 0;
    for (std::size_t r = rows; r > fan_in; r = parts_of(r)) below += parts_of(r) * cols;
    auto* part = static_cast<float*>(c_->scratch(below * sizeof(float)));
    const float* from = x.get();
    for (; rows > fan_in; rows = parts_of(rows)) {
      const std::size_t chunks = parts_of(rows);
      run<kernel::dtrain_column_partials>(chunks * cols, rows, cols, chunks, from, part);
      from = part, part += chunks * cols;
    }
    run<kernel::dtrain_column_partials>(cols, rows, cols, 1, from, y);
  }
  void sum(std::size_t n, pointer<const float> x, pointer<float> out) const { reduce(n, x, false, 1.0, 0.0f, false, out); }

  // ---- layers ------------------------------------------------------------------------------------------
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, pointer<float> v) const {
    if constexpr (A != activation_kind::linear)
      run<kernel::dtrain_activation_forward>(A == activation_kind::softmax ? rows : rows * cols, rows, cols,
                                             static_cast<int>(A), v);
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, pointer<const float> z, pointer<const float> y,
                           pointer<float> d) const {
    if constexpr (A != activation_kind::linear)
      run<kernel::dtrain_activation_backward>(A == activation_kind::softmax ? rows : rows * cols, rows, cols,
                                              static_cast<int>(A), z, y, d);
  }
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return n * G.pixels() * G.taps();
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return input_gradient ? n * G.pixels() * G.taps() : 0;
  }
  /// im2col into the workspace, y = cols x kernel, then the bias and the activation in one pass.
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w, pointer<const float> b,
                      pointer<float> y, pointer<float> z, pointer<float> work) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    run<kernel::dtrain_im2col>(m * k, n, geometry<G>(), x, work);
    gemm(transpose::no, transpose::no, m, G.f, k, 1.0f, work, k, w, G.f, 0.0f, y, G.f);
    constexpr bool rowwise = A == activation_kind::softmax;
    run<kernel::dtrain_bias_activation>(m * G.f, m, G.f, static_cast<int>(rowwise ? activation_kind::linear : A), b,
                                        needs_input(A) ? z : pointer<float>{}, y);
    if constexpr (rowwise) activation_forward<A>(m, G.f, y);
  }
  /// The activation's backward on dy, kernel gradient = cols^T dy, bias gradient = column sums of dy,
  /// and with dx: column gradients = dy kernel^T gathered back into dx (col2im).
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, pointer<const float> z, pointer<const float> y, pointer<float> dy,
                       pointer<const float> w, pointer<const float> work, pointer<float> scratch, pointer<float> g,
                       pointer<float> dx) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    activation_backward<A>(m, G.f, z, y, dy);
    gemm(transpose::yes, transpose::no, k, G.f, m, 1.0f, work, k, dy, G.f, 0.0f, g, G.f);
    column_sums(m, G.f, dy, g + k * G.f);
    if (!dx) return;
    gemm(transpose::no, transpose::yes, m, k, G.f, 1.0f, dy, G.f, w, G.f, 0.0f, scratch, k);
    run<kernel::dtrain_col2im>(n * G.in_size(), n, geometry<G>(), scratch, dx);
  }
  template <window_geometry G>
  void max_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y,
                             pointer<std::uint32_t> argmax) const {
    run<kernel::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 1, x, y, argmax);
  }
  template <window_geometry G>
  void max_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<const std::uint32_t> argmax,
                              pointer<float> dx) const {
    run<kernel::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 1, dy, argmax, dx);
  }
  template <window_geometry G>
  void average_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 0, x, y, pointer<std::uint32_t>{});
  }
  template <window_geometry G>
  void average_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 0, dy, pointer<const std::uint32_t>{}, dx);
  }
  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_zero_pad_forward>(n * G.out_size(), n, geometry<G>(), x, y);
  }
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_zero_pad_backward>(n * G.in_size(), n, geometry<G>(), dy, dx);
  }
  void leaky_relu_forward(std::size_t n, float slope, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_leaky_relu_forward>(n, n, slope, x, y);
  }
  void leaky_relu_backward(std::size_t n, float slope, pointer<const float> x, pointer<const float> dy,
                           pointer<float> dx) const {
    run<kernel::dtrain_leaky_relu_backward>(n, n, slope, x, dy, dx);
  }
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    run<kernel::dtrain_layer_norm_forward>(rows, rows, cols, epsilon, x, gamma, beta, y, xhat, inv_std);
  }
  void layer_normalization_backward(std::size_t rows, std::size_t cols, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_layer_norm_backward>(rows, rows, cols, xhat, inv_std, gamma, dy, dx);
  }
  void squared_deviations(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<const float> mean,
                          pointer<float> out) const {
    run<kernel::dtrain_squared_deviations>(rows * cols, rows, cols, x, mean, out);
  }
  void moving_average(std::size_t n, float momentum, pointer<const float> value, pointer<float> average) const {
    run<kernel::dtrain_moving_average>(n, n, momentum, value, average);
  }
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> mean, pointer<const float> variance,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    run<kernel::dtrain_batch_norm_forward>(rows * cols, rows, cols, epsilon, x, mean, variance, gamma, beta, y, xhat,
                                           inv_std);
  }
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> sums, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_batch_norm_backward>(rows * cols, rows, cols, inv_count, xhat, inv_std, gamma, sums, dy, dx);
  }
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                pointer<const float> b, pointer<float> y) const {
    run<kernel::dtrain_depthwise_forward>(n * G.out_size(), n, geometry<G>(), x, w, b, y);
  }
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                 pointer<const float> dy, pointer<float> gw, pointer<float> dx) const {
    run<kernel::dtrain_depthwise_kernel_grad>(G.kh * G.kw * G.f, n, geometry<G>(), x, dy, gw);
    if (dx) run<kernel::dtrain_depthwise_input_grad>(n * G.in_size(), n, geometry<G>(), w, dy, dx);
  }
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, pointer<const float> x,
                         pointer<const float> table, pointer<float> y) const {
    run<kernel::dtrain_embedding_forward>(rows * dim, rows, dim, vocab, x, table, y);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, pointer<const std::uint32_t> order,
                          pointer<const std::uint32_t> starts, pointer<const float> dy, pointer<float> grad) const {
    run<kernel::dtrain_embedding_backward>(vocab * dim, vocab, dim, order, starts, dy, grad);
  }
  void dropout(std::size_t n, float rate, std::uint64_t key, pointer<const float> x, pointer<float> y,
               pointer<float> mask) const {
    run<kernel::dtrain_dropout>((n + 3) / 4, n, rate, key, x, y, mask);
  }
  /// penalty[0] += factor sum(w^2) (in double); g += scale 2 factor w.
  void l2(std::size_t n, float factor, float scale, pointer<const float> w, pointer<float> g,
          pointer<float> penalty) const {
    reduce(n, w, true, 1.0, factor, true, penalty);
    if (g) axpy(n, scale * 2.0f * factor, w, g);
  }

  // ---- losses, metrics, optimizer steps ------------------------------------------------------------------
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, pointer<const float> y_true,
            pointer<const float> y_pred, pointer<float> losses, pointer<float> d) const {
    int kind = 3, logits = 0;
    if constexpr (requires { o.from_logits; }) logits = o.from_logits ? 1 : 0;
    if constexpr (std::is_same_v<Op, op::sparse_categorical_crossentropy>) kind = 0;
    else if constexpr (std::is_same_v<Op, op::categorical_crossentropy>) kind = 1;
    else if constexpr (std::is_same_v<Op, op::binary_crossentropy>) kind = 2;
    run<kernel::dtrain_loss>(rows, rows, cols, kind, logits, scale, loss_epsilon, y_true, y_pred, losses, d);
  }
  /// out[0] = the batch's correct rows (binary accuracy: correct values / cols).
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, pointer<const float> y_true,
              pointer<const float> y_pred, pointer<float> out) const {
    int kind = 0;
    float threshold = 0.0f;
    if constexpr (std::is_same_v<Op, op::categorical_accuracy>) kind = 1;
    if constexpr (std::is_same_v<Op, op::binary_accuracy>) kind = 2, threshold = o.threshold;
    // the hits after the reduction's partials in one scratch block
    const std::size_t parts = tree_size(rows);
    auto* part = static_cast<double*>(c_->scratch(parts * sizeof(double) + rows * sizeof(float)));
    auto* hits = reinterpret_cast<float*>(part + parts);
    run<kernel::dtrain_metric_hits>(rows, rows, cols, kind, threshold, y_true, y_pred, hits);
    reduce(rows, pointer<const float>(hits), false, kind == 2 ? static_cast<double>(cols) : 1.0, 0.0f, false, out, part);
  }
  void update(const op::sgd& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    run<kernel::dtrain_sgd>(n, n, o.learning_rate, o.momentum, o.nesterov ? 1 : 0, g, o.momentum > 0 ? s : nullptr, p);
  }
  void update(const op::adam& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    run<kernel::dtrain_adam>(n, n, o.alpha, o.one_minus_beta_1, o.one_minus_beta_2, o.epsilon, o.decay,
                             o.amsgrad ? 1 : 0, g, s, s + n, o.amsgrad ? s + 2 * n : nullptr, p);
  }
  void update(const op::rmsprop& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    const bool momentum = o.momentum > 0.0f;
    run<kernel::dtrain_rmsprop>(n, n, o.learning_rate, o.rho, o.momentum, o.epsilon, o.centered ? 1 : 0, g, s,
                                momentum ? s + n : nullptr, o.centered ? s + n * (momentum ? 2 : 1) : nullptr, p);
  }

 private:
  template <kernel K, class... A>
  void run(std::size_t threads, A... a) const {
    if (threads == 0) return;
    c_->template launch<K>(threads, a...);
  }
  template <window_geometry G>
  static cuda_kernels::window geometry() {
    const auto i = [](std::size_t v) { return static_cast<int>(v); };
    return {i(G.h), i(G.w), i(G.c), i(G.kh), i(G.kw), i(G.sh), i(G.sw), i(G.pt), i(G.pl), i(G.oh), i(G.ow), i(G.f)};
  }
  /// A reduction tree's fan-in: no thread adds more values than this.
  static constexpr std::size_t fan_in = 32;
  static std::size_t parts_of(std::size_t n) { return (n + fan_in - 1) / fan_in; }
  /// The doubles a sum of n values keeps between its levels.
  static std::size_t tree_size(std::size_t n) {
    std::size_t total = std::max<std::size_t>(parts_of(n), 1);
    for (std::size_t p = total; p > fan_in; p = parts_of(p)) total += parts_of(p);
    return total;
  }
  /// out[0] = sum(x) (of squares with `square`) / divisor; with `accumulate`, out[0] += factor sum. In
  /// double, as a tree (levels in `part`, tree_size(n) doubles; the scratch block when null).
  void reduce(std::size_t n, pointer<const float> x, bool square, double divisor, float factor, bool accumulate,
              pointer<float> out, double* part = nullptr) const {
    if (!part) part = static_cast<double*>(c_->scratch(tree_size(n) * sizeof(double)));
    std::size_t parts = std::max<std::size_t>(parts_of(n), 1);
    run<kernel::dtrain_sum_partials>(parts, n, parts, square ? 1 : 0, x, part);
    for (; parts > fan_in; part += parts, parts = parts_of(parts))
      run<kernel::dtrain_sum_doubles>(parts_of(parts), parts, parts_of(parts), part, part + parts);
    run<kernel::dtrain_sum_finish>(1, parts, divisor, factor, accumulate ? 1 : 0, part, out);
  }

  /// This thread's stream on `device` (made on first use, kept while the thread lives).
  static std::shared_ptr<context> shared(int device) {
    thread_local std::map<int, std::shared_ptr<context>> contexts;
    auto& c = contexts[device];
    if (!c) c = std::make_shared<context>(device, cuda_options{});
    return c;
  }

  std::shared_ptr<context> c_;
};

}  // namespace dtrain
