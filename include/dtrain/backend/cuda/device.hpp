#pragma once
/// \file
/// `basic_cuda<Runtime>`: the CUDA backend written once over a runtime that owns one device and one
/// stream. `cuda` (backend/cuda.hpp) runs it on the CUDA runtime, cuBLAS and NVRTC; `cuda_emulated`
/// (cuda/emulator.hpp) runs the very same code, kernels included, on the host, so everything here but
/// the runtime calls is tested on machines without a GPU.
///
/// How a step runs. Kernels (cuda/kernels.hpp lists them), GEMMs and uploads are recorded, not issued,
/// until the host needs a result (`download`, `synchronize`): a training step is one such segment. At that
/// point the segment is issued in one of three ways:
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
/// The runtime seam (`device_runtime`, cuda/runtime.hpp): what `cuda_runtime` and `emulated_runtime` provide.
///
/// This header defines `basic_cuda` (its buffers; its kernels' launches are its bases, one per family,
/// each in the family's header cuda/<family>.hpp with the family's source) and includes its parts: the
/// runtime seam (cuda/runtime.hpp), the device pointer (cuda/device_pointer.hpp), the recorded operations
/// (cuda/operation.hpp) and the per-stream context (cuda/context.hpp), which puts the caching allocator
/// (cuda/allocator.hpp) and the recorder with its graphs (cuda/recorder.hpp) together.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/context.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/backend/cuda/operation.hpp"
#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain {

/// The memory and the recording here; each kernel family's launches in its own file (cuda/<family>.hpp),
/// a base of `basic_cuda`.
template <device_runtime Runtime>
class basic_cuda : public cuda_detail::cuda_blas_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_activation_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_window_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_normalization_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_embedding_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_regularization_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_loss_kernels<basic_cuda<Runtime>>,
                   public cuda_detail::cuda_update_kernels<basic_cuda<Runtime>> {
  using context = cuda_detail::context<Runtime>;

 public:
  static constexpr const char* name = Runtime::name;
  static constexpr device_kind device = device_kind::gpu;

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
  auto issued() const { return c_->work().issued(); }
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
    return c_->work().enqueue(std::forward<F>(f));
  }
  template <class T>
  void upload(std::size_t n, const T* host, pointer<T> p) const {
    c_->work().upload(p.get(), host, n * sizeof(T));
  }
  template <class T>
  void download(std::size_t n, pointer<T> p, std::remove_const_t<T>* host) const {
    c_->work().download(host, p.get(), n * sizeof(T));
  }
  void synchronize() const { c_->work().synchronize(); }

 private:
  template <class>
  friend class cuda_detail::cuda_blas_kernels;
  template <class>
  friend class cuda_detail::cuda_activation_kernels;
  template <class>
  friend class cuda_detail::cuda_window_kernels;
  template <class>
  friend class cuda_detail::cuda_normalization_kernels;
  template <class>
  friend class cuda_detail::cuda_embedding_kernels;
  template <class>
  friend class cuda_detail::cuda_regularization_kernels;
  template <class>
  friend class cuda_detail::cuda_loss_kernels;
  template <class>
  friend class cuda_detail::cuda_update_kernels;
  using blas = cuda_detail::cuda_blas_kernels<basic_cuda>;
  using blas::reduce, blas::tree_size;  // the other families' sums

  /// Records a launch of the kernel whose host copy is F on `threads` threads (none when 0).
  template <auto F, class... A>
  void run(std::size_t threads, A... a) const {
    constexpr auto k = cuda_kernels::id_of<F>;
    static_assert(k != cuda_kernels::kernel::count_, "a CUDA kernel missing from its family's kernel list");
    if (threads == 0) return;
    c_->work().template launch<k>(threads, a...);
  }
  void issue_gemm(const cuda_detail::gemm_call& g) const { c_->work().gemm(g); }
  /// The reductions' scratch block, at least `bytes` long.
  void* scratch(std::size_t bytes) const { return c_->scratch(bytes); }

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
