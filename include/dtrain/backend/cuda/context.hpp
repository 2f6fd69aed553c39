#pragma once
/// \file
/// `cuda_detail::context<Runtime>`: one device and stream of the CUDA backend, shared by its handles. It
/// puts together the runtime, the caching allocator (cuda/allocator.hpp), the recorder that issues the
/// work as launches or CUDA graphs (cuda/recorder.hpp) and the reductions' scratch memory. An allocation
/// that finds the device full first has the recorder issue what it holds and wait for it.

#include <cstddef>
#include <mutex>
#include <string>

#include "dtrain/backend/cuda/allocator.hpp"
#include "dtrain/backend/cuda/recorder.hpp"
#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain::cuda_detail {

template <device_runtime Runtime>
class context {
 public:
  context(int device, cuda_options o) : runtime_(device), memory_(runtime_), work_(runtime_, o) {}
  ~context() {
    try {
      work_.synchronize();  // the device may still use memory about to be freed
    } catch (...) {  // a failed device cannot be waited for; the memory goes with the process
    }
    memory_.release(scratch_, scratch_bytes_);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  Runtime& runtime() { return runtime_; }
  std::string describe() { return runtime_.describe(); }
  /// The stream's work: kernels, GEMMs, uploads and downloads, in order.
  recorder<Runtime>& work() { return work_; }

  void* allocate(std::size_t bytes, const char* what) {
    return memory_.allocate(bytes, what, [this] { work_.synchronize(); });
  }
  void release(void* p, std::size_t bytes) { memory_.release(p, bytes); }
  std::size_t bytes_in_use() { return memory_.bytes_in_use(); }
  std::size_t peak_bytes_in_use() { return memory_.peak_bytes_in_use(); }

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

 private:
  Runtime runtime_;
  caching_allocator<Runtime> memory_;
  recorder<Runtime> work_;
  std::mutex scratch_mutex_;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace dtrain::cuda_detail
